"""The program a code completion stands for, in the answer formats models use.

Base models continue the stub (HumanEval's convention: the program is `prompt + completion`);
instruct models, asked for the function in a fenced block (`prompt.instruction.code`), answer with
Markdown, as they are evaluated on HumanEval by instruct-model harnesses (evalplus' `sanitize`,
bigcode-evaluation-harness' instruct tasks). Rules, in order:

1. No fence in the completion: `prompt + completion` (today's convention, the tiny policy's format).
2. A fenced block (```python, ```py or a bare ```; an unclosed fence at the end of a truncated
   completion counts, up to the end): the first block that defines the stub's function (`def <name>(`)
   if any, else the first block.
3. A block that defines the function replaces it: the program is the stub (for its imports and
   helpers; a HumanEval stub ends in its docstring, so it is valid Python) followed by the block,
   whose later definition wins. When the stub alone is not valid Python (a one-line synthetic stub
   ending in `return `), the block alone is the program.
4. A block that does not define the function is the body continuing the stub: `prompt + block`.

Departures from evalplus' sanitizer: no AST dependency pruning (the sandbox runs the program as is);
the function name is taken from the stub's last `def`, not from the dataset's entry point field.
"""

from __future__ import annotations

import ast
import re

FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)
DEF = re.compile(r"^\s*def\s+([A-Za-z_]\w*)\s*\(", re.MULTILINE)


def fenced_blocks(completion: str) -> list[str]:
    """The contents of the completion's fenced code blocks, in order (a trailing unclosed one too)."""
    return [block for block in FENCE.findall(completion) if block.strip()]


def stub_function(prompt: str) -> str | None:
    """The name of the last function the stub defines (the one to complete), if any."""
    names = DEF.findall(prompt)
    return names[-1] if names else None


def _valid(source: str) -> bool:
    try:
        ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    return True


def extract_program(prompt: str, completion: str) -> str:
    """The program to run for a completion of the code stub `prompt` (module docstring)."""
    blocks = fenced_blocks(completion)
    if "```" not in completion or not blocks:
        return prompt + completion
    name = stub_function(prompt)
    defining = [
        b for b in blocks if name is not None and re.search(rf"^\s*def\s+{re.escape(name)}\s*\(", b, re.MULTILINE)
    ]
    if not defining:
        return prompt + blocks[0]
    block = defining[0]
    return f"{prompt.rstrip()}\n\n{block}" if _valid(prompt) else block
