"""The documentation: the mkdocs-material site under docs/ builds with no broken link, and README.md
stays a front page whose relative links all land on files of the repository."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_README_LINES = 200

# [text](target) outside code spans and fences; the target up to a space (a title) or the closing paren.
_LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def _prose(markdown: str) -> str:
    """The text outside fenced code blocks and inline code spans."""
    out, fence = [], False
    for line in markdown.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
            continue
        if not fence:
            out.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(out)


def test_site_builds_strict(tmp_path):
    """A broken internal link, a nav entry without its page or a failing hook fails the build."""
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    assert (tmp_path / "index.html").is_file()
    reference = (tmp_path / "configuration-reference" / "index.html").read_text()
    assert "run.iterations" in reference  # generated from coevo/config/
    assert_figures_shown(tmp_path)


def assert_figures_shown(site: Path) -> None:
    """Every committed compare.png a page embeds is in the built site, and the page's <img> finds it."""
    embedded = {}
    for page in sorted((ROOT / "docs").rglob("*.md")):
        for name in re.findall(r"\]\((?:\.\./)+bench/results/([\w.-]+)/compare\.png\)", page.read_text()):
            embedded.setdefault(name, []).append(page.relative_to(ROOT / "docs").with_suffix(""))
    committed = {png.parent.name for png in (ROOT / "bench" / "results").glob("*/compare.png")}
    assert embedded and set(embedded) == committed, f"embedded {sorted(embedded)}, committed {sorted(committed)}"
    for name, pages in embedded.items():
        figure = site / "figures" / name / "compare.png"
        assert figure.read_bytes() == (ROOT / "bench" / "results" / name / "compare.png").read_bytes()
        for page in pages:
            html = site / page / "index.html"
            sources = re.findall(r'<img[^>]*src="([^"]+)"', html.read_text())
            assert any((html.parent / src).resolve() == figure.resolve() for src in sources), (page, sources)


def test_every_command_is_in_the_commands_page_with_the_paths_it_writes():
    """docs/commands.md names every `coevo` command and `coevo query` subcommand; the bootstrap's path is
    RunLayout's checkpoint 0, and the export-merged example is a checkpoint default retention keeps."""
    import typer.main

    from coevo.cli import app
    from coevo.config import load_config
    from coevo.layout import RunLayout
    from coevo.model.retention import keep_set

    page = (ROOT / "docs" / "commands.md").read_text()
    group = typer.main.get_group(app)
    names = [f"coevo {name}" for name in group.commands]
    for name, command in group.commands.items():
        names += [f"coevo {name} {sub}" for sub in getattr(command, "commands", {})]
    assert [name for name in names if not re.search(rf"{re.escape(name)}\b", page)] == []
    cfg = load_config(ROOT / "params.yaml")
    bootstrap = RunLayout(cfg.run.out_dir).checkpoint(0).as_posix()
    assert re.search(rf"coevo bootstrap .*{re.escape(bootstrap)}", page) and "checkpoints/iter_0000" not in page
    retention, last = cfg.run.retention, cfg.run.iterations
    kept = keep_set(list(range(last + 1)), {}, retention.keep_last, retention.keep_every, retention.keep_best)
    for example in re.findall(r"coevo export-merged \S+/iter_(\d{4})", page):
        assert int(example) in kept, f"docs/commands.md exports iter_{example}, which default retention prunes"


def test_every_long_page_has_headings():
    """A page of more than 60 lines has a table of contents: at least one `##` heading."""
    flat = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        text = _prose(page.read_text())
        if len(page.read_text().splitlines()) > 60 and not re.search(r"^##+ ", text, re.MULTILINE):
            flat.append(str(page.relative_to(ROOT)))
    assert flat == [], f"pages without a heading below the title: {flat}"


def test_readme_is_a_front_page():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; the reference belongs in docs/"
    assert "make test" in README.read_text()  # CI runs the command the README gives


def test_readme_relative_links_exist():
    targets = _LINK.findall(_prose(README.read_text()))
    assert targets, "no links found in README.md"
    missing = []
    for target in targets:
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):  # http:, mailto:, in-page anchors
            continue
        path = target.split("#", 1)[0].split("?", 1)[0]
        if not (ROOT / path).exists():
            missing.append(target)
    assert not missing, f"README.md links to paths that do not exist: {missing}"


def test_the_configuration_reference_titles_the_coevolver_section_as_a_mapping_or_a_list():
    """`coevolver` takes one mapping or a list of them: its section is `coevolver` (its type says both);
    `rewards` takes only a list: `rewards[]`."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("config_reference", ROOT / "docs" / "hooks" / "config_reference.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    page = hook.render()
    assert "## `coevolver`" in page and "## `coevolver[]`" not in page and "## `rewards[]`" in page
    assert "| `coevolver` | [section](#coevolver) or list[section] |" in page
