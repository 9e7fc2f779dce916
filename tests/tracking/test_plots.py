"""The learning-curve PNG: valid image of the documented size, written atomically, right series."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image

from coevo.tracking.plots import DPI, FAMILY, FIGSIZE, HEADLINE, _keys, _series, learning_curve

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

CURVE = [
    {"iteration": 0, "eval/acc": 0.2, "eval/acc/add": 0.3, "eval/acc/mul": 0.1, "eval/pass@4": 0.4},
    {
        "iteration": 2,
        "eval/acc": 0.5,
        "eval/acc/add": 0.6,
        "eval/acc/mul": 0.4,
        "eval/pass@4": 0.7,
        "eval/acc_context": 0.55,
        "eval/acc_context/add": 0.65,
        "policy/loss": 1.0,
    },
    {"iteration": 1, "eval/acc": 0.3, "eval/acc/add": 0.4, "eval/acc/mul": 0.2, "eval/pass@4": 0.5},
]


def _assert_png(path: Path) -> None:
    assert path.read_bytes()[:8] == PNG_MAGIC
    height, width, _ = matplotlib.image.imread(path).shape
    assert (width, height) == (int(FIGSIZE[0] * DPI), int(FIGSIZE[1] * DPI))


def test_learning_curve_writes_a_png_atomically(tmp_path):
    path = learning_curve(CURVE, tmp_path / "plots" / "curve.png")
    assert path == tmp_path / "plots" / "curve.png"
    _assert_png(path)
    assert sorted(p.name for p in path.parent.iterdir()) == ["curve.png"]  # no temporary left behind


def test_learning_curve_replaces_an_existing_file(tmp_path):
    path = tmp_path / "curve.png"
    path.write_bytes(b"stale")
    learning_curve(CURVE[:1], path)
    _assert_png(path)


def test_learning_curve_without_evaluations_still_draws(tmp_path):
    _assert_png(learning_curve([], tmp_path / "empty.png"))
    _assert_png(learning_curve([{"iteration": 1, "policy/loss": 0.3}], tmp_path / "no_eval.png"))


def test_series_selection():
    assert _keys(CURVE, HEADLINE) == ["eval/acc", "eval/acc_context", "eval/pass@4"]
    assert _keys(CURVE, FAMILY) == ["eval/acc/add", "eval/acc/mul"]  # acc_context/<family> is not a family line


def test_series_is_sorted_and_skips_missing_points():
    assert _series(CURVE, "eval/acc") == ([0.0, 1.0, 2.0], [0.2, 0.3, 0.5])
    assert _series(CURVE, "eval/acc_context") == ([2.0], [0.55])


def test_every_series_has_its_own_colour_however_many_families():
    """matplotlib's default cycle repeats after 10 colours: with 3 headlines and 12 families two
    families shared one. Each line now has a colour no other line of the figure has."""
    from matplotlib.colors import to_hex

    from coevo.tracking.plots import colours, draw

    families = [f"f{i:02d}" for i in range(12)]
    curve = [
        {"iteration": it, "eval/acc": 0.1, "eval/acc_context": 0.2, "eval/pass@4": 0.3}
        | {f"eval/acc/{family}": 0.01 * i for i, family in enumerate(families)}
        for it in range(3)
    ]
    lines = draw(curve).axes[0].get_lines()
    assert len(lines) == 15
    assert len({to_hex(line.get_color(), keep_alpha=False) for line in lines}) == 15
    assert len({to_hex(colour) for colour in colours(40)}) == 40
