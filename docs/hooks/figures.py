"""mkdocs hook: the committed benchmark figures (bench/results/**/*.png) in the site.

The figures live beside their results, outside `docs/`, and a page embeds one by its path in the
repository, relative to the page as the forge resolves it (`../../bench/results/compare-smollm2/
compare.png` from docs/benchmarks/): the Markdown renders the same on the forge. At build time each
figure becomes the generated file `figures/<its path under bench/results>` and such a link is
rewritten to it, so `mkdocs build --strict` copies the figure into the site and checks the link; a
link to a figure that does not exist stays as written and fails the strict build.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File, Files

RESULTS = Path("bench") / "results"
SITE_DIR = "figures"
_FIGURE_LINK = re.compile(r"\]\(((?:\.\./)+)bench/results/")


def on_files(files: Files, config) -> Files:
    root = Path(config.config_file_path).parent
    for png in sorted((root / RESULTS).rglob("*.png")):
        files.append(
            File.generated(config, f"{SITE_DIR}/{png.relative_to(root / RESULTS).as_posix()}", abs_src_path=str(png))
        )
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    depth = page.file.src_uri.count("/")  # directories between docs/ and the page

    def site_link(match: re.Match) -> str:
        ups = match.group(1).count("../")
        return f"]({'../' * depth}{SITE_DIR}/" if ups == depth + 1 else match.group(0)

    return _FIGURE_LINK.sub(site_link, markdown)
