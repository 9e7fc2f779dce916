"""mkdocs hook: the site's home page is the repository's README.md.

README.md is the front page on the forge and the home page of the site, so it is written once: at
build time it becomes the generated page `index.md`, its links into `docs/` rewritten to be relative
to the docs directory (`docs/pipeline.md` -> `pipeline.md`), and its figures under bench/results/ to
the copies docs/hooks/figures.py puts in the site (`figures/...`). Any other link from README.md to a
file outside `docs/` would not resolve in the site; `tests/test_docs.py` builds the site with
`--strict`, which fails on it.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File, Files

_DOCS_LINK = re.compile(r"\]\(docs/")
_FIGURE_LINK = re.compile(r"\]\(bench/results/")  # figures.py's SITE_DIR holds them under the same path


def on_files(files: Files, config) -> Files:
    readme = Path(config.config_file_path).parent / "README.md"
    text = _FIGURE_LINK.sub("](figures/", _DOCS_LINK.sub("](", readme.read_text(encoding="utf-8")))
    files.append(File.generated(config, "index.md", content=text))
    return files
