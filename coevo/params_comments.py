"""params.yaml's comments, written from the field descriptions of coevo/config/ (their one source).

Every key line of params.yaml carries its setting's description as an inline comment. `rewrite`
replaces each such comment with the description of the field the line sets (found from the line's
indentation, and for list items from the list's element model) and leaves every value, blank line and
comment-only line as it is, so the file's settings never change. A test asserts params.yaml equals
its rewrite; after editing a description in coevo/config/, regenerate the comments with

    python -m coevo.params_comments params.yaml
"""

from __future__ import annotations

import re
import sys
import types
import typing
from pathlib import Path

from pydantic import BaseModel

from coevo.config import Config
from coevo.io import write_text

KEY_LINE = re.compile(r"^(?P<indent>\s*)(?P<dash>- )?(?P<key>[A-Za-z_][\w]*):(?P<rest>.*)$")


def nested_model(annotation) -> type[BaseModel] | None:
    """The model a field holds, directly, in a list or as an optional: the settings its child lines set."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (list, typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            if (model := nested_model(arg)) is not None:
                return model
    return None


def split_comment(rest: str) -> str:
    """The value part of a key line's text after the colon: what precedes a `#` outside quotes."""
    quote = None
    for i, char in enumerate(rest):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or rest[i - 1].isspace()):
            return rest[:i].rstrip()
    return rest.rstrip()


def rewrite(text: str, model: type[BaseModel] = Config) -> str:
    """`text` (a params file) with every key line's comment set to its field's description."""
    # (indent of the key, the model whose fields the lines below it set)
    stack: list[tuple[int, type[BaseModel] | None]] = [(-1, model)]
    lines = []
    for line in text.splitlines():
        match = KEY_LINE.match(line)
        if not match:
            lines.append(line)
            continue
        indent = len(match["indent"]) + (2 if match["dash"] else 0)
        while stack[-1][0] >= indent:
            stack.pop()
        owner = stack[-1][1]
        field = owner.model_fields.get(match["key"]) if owner else None
        stack.append((indent, nested_model(field.annotation) if field else None))
        value = split_comment(match["rest"])
        if field is None or not field.description:
            lines.append(line)
            continue
        lines.append(f"{match['indent']}{match['dash'] or ''}{match['key']}:{value}  # {field.description}")
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


def main(argv: list[str]) -> int:
    path = Path(argv[0] if argv else "params.yaml")
    text = path.read_text()
    new = rewrite(text)
    if new != text:
        write_text(path, new)
    print(f"{path}: {'comments rewritten' if new != text else 'comments already agree'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
