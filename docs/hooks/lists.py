"""mkdocs hook: render the pages' lists as GitHub renders them.

The pages are written for GitHub's Markdown (CommonMark): a list may follow its paragraph's last line
directly, and a nested list or a code fence inside an item is indented by 2 spaces. Python-Markdown,
which mkdocs uses, needs a blank line before a list and 4 spaces of indentation inside an item, and
would otherwise print such lists as one paragraph of "- " lines. This hook rewrites only what mkdocs
renders (the files keep their text): outside code fences it puts a blank line before a list that
follows a paragraph, and it doubles the indentation of the lines of a list (items, continuation
lines, fences and their contents), so that 2-space nesting becomes Python-Markdown's 4.
"""

from __future__ import annotations

import re

_ITEM = re.compile(r"^(\s*)([-*+]|\d+[.)])\s+\S")
_FENCE = ("```", "~~~")


def normalise_lists(markdown: str) -> str:
    out: list[str] = []
    fence: str | None = None  # the marker of the open fence
    fence_in_list = False
    in_list = False
    prev_blank = True
    for line in markdown.split("\n"):
        stripped = line.lstrip()
        indent = len(line) - len(stripped)
        if fence is not None:
            if fence_in_list and indent > 0:
                line = " " * indent + line
            out.append(line)
            if stripped.startswith(fence):
                fence = None
            prev_blank = False
            continue
        if not stripped:
            out.append(line)
            prev_blank = True
            continue
        item = _ITEM.match(line)
        if indent == 0 and not item:
            in_list = False
        elif prev_blank and in_list and indent >= 4 and not item:
            in_list = False  # an indented code block after the list, not a 2-space continuation
        if item and indent == 0 and not in_list:
            if not prev_blank:
                out.append("")
            in_list = True
        if in_list and indent > 0:
            line = " " * indent + line
        if stripped.startswith(_FENCE):
            fence, fence_in_list = stripped[:3], in_list and indent > 0
        out.append(line)
        prev_blank = False
    return "\n".join(out)


def on_page_markdown(markdown: str, page, config, files) -> str:
    return normalise_lists(markdown)
