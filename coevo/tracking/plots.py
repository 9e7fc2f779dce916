"""The learning-curve figure: held-out accuracy against training iteration.

`learning_curve` draws one line per headline metric present in the curve -- `eval/acc` (context-free
greedy accuracy), `eval/acc_context` (with the co-evolver's context) and `eval/pass@<k>` -- and a
thinner dashed line per family for `eval/acc/<family>`, every series in its own colour (`colours`).
A series is drawn through the iterations that carry it, so evaluations every few iterations still
give connected lines.

The figure is built on a bare `matplotlib.figure.Figure` with the Agg canvas: no pyplot, no global
backend switch, safe from worker threads. The PNG is written atomically (`coevo.io.atomic_path`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from coevo.io import atomic_path

HEADLINE = re.compile(r"^eval/(acc|acc_context|pass@\w+)$")
FAMILY = re.compile(r"^eval/acc/([^/]+)$")
FIGSIZE = (8.0, 5.0)  # inches
DPI = 100  # the PNG is FIGSIZE * DPI pixels: 800 x 500


def _series(curve: Sequence[dict], key: str) -> tuple[list[float], list[float]]:
    """(iterations, values) of the points of `curve` that carry `key`, sorted by iteration."""
    points = sorted((float(row["iteration"]), float(row[key])) for row in curve if row.get(key) is not None)
    return [x for x, _ in points], [y for _, y in points]


def _keys(curve: Sequence[dict], pattern: re.Pattern) -> list[str]:
    """Metric names in `curve` matching `pattern`, headline order: acc, acc_context, pass@k."""
    return sorted({key for row in curve for key in row if pattern.match(key)})


def colours(n: int) -> list[tuple[float, float, float, float]]:
    """`n` distinct colours: tab10's, then tab20's light ones, then evenly spaced hues past those 20,
    so no two series of a figure share one (matplotlib's default cycle repeats after 10)."""
    palette = [colormaps["tab10"](i) for i in range(10)] + [colormaps["tab20"](2 * i + 1) for i in range(10)]
    extra = max(0, n - len(palette))
    return (palette + [colormaps["hsv"](i / extra) for i in range(extra)])[:n]


def draw(curve: list[dict]) -> Figure:
    """The learning-curve figure of `curve`: each headline metric and each family its own colour."""
    fig = Figure(figsize=FIGSIZE, dpi=DPI)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    headlines, families = _keys(curve, HEADLINE), _keys(curve, FAMILY)
    palette = iter(colours(len(headlines) + len(families)))
    for key in headlines:
        ax.plot(*_series(curve, key), color=next(palette), marker="o", markersize=3, linewidth=2.0, label=key[5:])
    for key in families:
        ax.plot(*_series(curve, key), color=next(palette), linestyle="--", linewidth=0.9, alpha=0.8, label=key[5:])
    ax.set_title("Held-out accuracy by iteration")
    ax.set_xlabel("iteration")
    ax.set_ylabel("accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize="small", ncols=2)
    else:
        ax.text(0.5, 0.5, "no evaluations yet", transform=ax.transAxes, ha="center", va="center")
    return fig


def learning_curve(curve: list[dict], path: Path) -> Path:
    """Write the learning-curve PNG of `curve` (rows with "iteration" and eval/ metrics) to `path`."""
    fig = draw(curve)
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=DPI)
    return path
