"""How context (skills, memory) and a question become one prompt string.

Skills are rendered one per line before the question; the tiny policy's warm start shows it worked
examples in exactly this layout so it learns to read them.
"""

from __future__ import annotations

from collections.abc import Sequence


def render_prompt(question: str, context: Sequence[str] = ()) -> str:
    return "".join(f"{line}\n" for line in context) + question
