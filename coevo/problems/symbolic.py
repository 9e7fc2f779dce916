"""Math answers beyond plain integers, judged by math-verify (fractions, decimals, LaTeX, \\boxed{}).

Method: Hugging Face's math-verify (the answer checker of open-r1 and TRL's accuracy reward):
`parse` extracts the completion's final answer (the last \\boxed{} first, then LaTeX and plain
expressions) into SymPy, `verify(gold, answer)` compares symbolically and numerically.

Departures from math-verify's defaults:
1. No time-outs. math-verify's own are `signal.alarm` based: they raise outside the main thread
   (Prefect runs tasks in worker threads) and, being wall-clock limits, could change a verdict with
   the machine's load. Both are off (`parsing_timeout=None`, `timeout_seconds=None`) and a
   deterministic guard stands in for them: an answer whose SymPy tree has more than `MAX_NODES`
   nodes, a power with a non-numeric exponent beyond `MAX_EXPONENT` in size or a nested numeric
   power (9^{9^{9^9}} made `verify` run for minutes), or a factorial of more than `MAX_EXPONENT`,
   is judged wrong without being compared ("too costly to compare"). Only the last `MAX_CHARS`
   characters of a completion are parsed.
2. The reference answer is parsed as LaTeX math (wrapped in `$...$` unless it has its own
   delimiters), so "3/4", "\\frac{3}{4}", "0.75" and "\\sqrt{2}" all parse; an answer math-verify
   cannot parse fails every completion, with the reason in `details`.
3. Verdicts are cached per (completion, answer) pair (pure functions of the two strings).
"""

from __future__ import annotations

import functools
import logging

from coevo.types import Reward

NAME = "math_verify"
MAX_CHARS = 4000
MAX_NODES = 400
MAX_EXPONENT = 1000


class _QuietTimeoutWarning(logging.Filter):
    """Drops math-verify's one-off warning that its time-outs are off: the guard above replaces them."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Timeout is disabled")


@functools.cache
def _math_verify():
    """math-verify's (parse, verify), imported on first use (~0.6 s; integer-only runs never pay it)."""
    import math_verify

    for module in ("math_verify.parser", "math_verify.grader"):
        logging.getLogger(module).addFilter(_QuietTimeoutWarning())
    return math_verify.parse, math_verify.verify


@functools.lru_cache(maxsize=4096)
def parse_answer(answer: str) -> tuple:
    """math-verify's parse of a reference answer (as LaTeX math unless it carries its own delimiters)."""
    parse, _ = _math_verify()
    text = answer if any(mark in answer for mark in ("$", "\\(", "\\[", "\\boxed")) else f"${answer}$"
    return tuple(parse(text, parsing_timeout=None))


@functools.lru_cache(maxsize=65536)
def check_symbolic(completion: str, answer: str) -> Reward:
    """1.0 iff math-verify finds the completion's final answer equal to `answer` (see the module doc)."""
    parse, verify = _math_verify()
    gold = parse_answer(answer)
    if not gold:
        return Reward(0.0, False, NAME, f"expected answer {answer!r} could not be parsed")
    found = parse(completion[-MAX_CHARS:], parsing_timeout=None)
    shown = f"extracted={_shown(found)} expected={_shown(gold)}"
    if not found:
        return Reward(0.0, False, NAME, f"no answer in completion; expected={_shown(gold)}")
    if _too_costly(gold) or _too_costly(found):
        return Reward(0.0, False, NAME, f"{shown} too costly to compare")
    passed = bool(verify(list(gold), found, timeout_seconds=None))
    return Reward(1.0 if passed else 0.0, passed, NAME, shown)


def _shown(parsed) -> str:
    """The matched text of a parse (its last item), without spaces so `details` stays key=value."""
    return "".join(str(parsed[-1]).split()) if parsed else "none"


def _too_costly(parsed) -> bool:
    """Whether a parse holds an expression the guard refuses to compare (module doc, departure 1)."""
    import sympy

    for expr in parsed:
        if not isinstance(expr, sympy.Basic):
            continue
        for count, node in enumerate(sympy.preorder_traversal(expr)):
            if count >= MAX_NODES:
                return True
            if isinstance(node, sympy.Pow) and _huge_exponent(node.exp):
                return True
            if isinstance(node, sympy.factorial) and node.args[0].is_Number and abs(node.args[0]) > MAX_EXPONENT:
                return True
    return False


def _huge_exponent(exponent) -> bool:
    import sympy

    if exponent.is_Number:
        return abs(exponent) > MAX_EXPONENT
    if not exponent.is_number:
        return False  # symbolic: x^{n}
    towers = [p for p in exponent.atoms(sympy.Pow) if not (p.exp.is_Number and abs(p.exp) <= 1)]
    return bool(towers) or exponent.has(sympy.factorial)  # 9^{9^{9}} is a tower; 2^{\\sqrt{2}} is not
