"""Math verifier: an exact integer fast path, and math-verify for every other answer.

Which path (`check_answer`):
- Fast path, exact match: the reference answer is a plain integer ("46", "-22", "1,234") and the
  completion has no \\boxed{} or its last one holds a plain number. The completion's final number
  (rules below) is compared exactly with the answer (verifier name `math_exact`).
- Otherwise (fractions, decimals, LaTeX answers, a box holding an expression such as
  \\boxed{\\frac{6}{2}}): math-verify parses and compares them (coevo/problems/symbolic.py,
  verifier name `math_verify`). On integers stated as a number both paths agree; the fast path gave
  ~48k verdicts/s against math-verify's ~750 on one rollout batch (bench/verifier.py).

Extraction rules (`extract_final_number`):
1. If the text contains `\\boxed{...}`, only the content of the last one is searched (braces may nest);
   a box with no number in it gives None.
2. Otherwise the last number in the text wins; trailing text after it is ignored ("46 apples" -> 46).
3. A number is digits with an optional decimal part ("2.50"), or digits grouped by thousands
   separators ("1,234,567"; groups of exactly three digits, otherwise the commas separate numbers).
   No exponents and no leading-dot decimals (".5" reads as 5).
4. A '-' (ASCII or unicode minus '−') or '+' directly before the number, optionally followed by
   spaces, is its sign only when it stands at the start of the text or follows whitespace, '=',
   '(' or ':'. So "12-5" gives 5 (a binary minus), "= -5" and "- 5" give -5, and, by the same
   rule, "3 - 5" gives -5.
5. The result is canonical: no leading zeros, no trailing fractional zeros ("2.50" -> 2.5,
   "3.0" -> 3), no '+' sign, and "-0" -> 0.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from coevo.problems.symbolic import check_symbolic
from coevo.types import Reward

_NUMBER = r"(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?"
_FINAL = re.compile(rf"(?:(?<![^\s=(:])(?P<sign>[-−+])\s*)?(?<!\d)(?P<num>{_NUMBER})")
_WHOLE = re.compile(rf"\s*(?:(?P<sign>[-−+])\s*)?(?P<num>{_NUMBER})\s*")
_BOXED = "\\boxed{"


def extract_final_number(text: str) -> str | None:
    """The canonical form of the final number in `text` (inside the last \\boxed{} if any), or None."""
    boxed = _last_boxed(text)
    if boxed is not None:
        text = boxed
    last = None
    for last in _FINAL.finditer(text):
        pass
    return None if last is None else _canonical(last["sign"], last["num"])


def canonical_number(text: str) -> str | None:
    """Canonical form of `text` if it is exactly one number (surrounding spaces allowed), else None."""
    match = _WHOLE.fullmatch(text)
    return None if match is None else _canonical(match["sign"], match["num"])


def check_answer(completion: str, answer: str) -> Reward:
    """1.0 iff the completion's final answer equals the reference answer: exactly for integers (the
    fast path), by math-verify otherwise (see the module doc for which path a pair takes)."""
    expected = canonical_number(answer)
    if not _fast_path(completion, expected):
        return check_symbolic(completion, answer)
    return check_exact(completion, expected)


def check_stated_number(completion: str, answer: str) -> Reward:
    """For problems that ask to compute a value (the built-in arithmetic families): 1.0 iff the final
    number stated (in the last box, else in the text) is the answer. Never math-verify: it evaluates
    a boxed expression, so restating the question (`\\boxed{92 \\times 86}`) would pass; here the
    box's last number (86) is read instead."""
    expected = canonical_number(answer)
    if expected is None:
        return Reward(0.0, False, MathVerifier.name, f"reference answer {answer!r} is not a number")
    return check_exact(completion, expected)


def check_exact(completion: str, expected: str) -> Reward:
    """1.0 iff the completion's final number equals `expected` (a canonical number) exactly."""
    extracted = extract_final_number(completion)
    if extracted is None:
        return Reward(0.0, False, MathVerifier.name, f"no number in completion; expected={expected}")
    passed = extracted == expected
    return Reward(1.0 if passed else 0.0, passed, MathVerifier.name, f"extracted={extracted} expected={expected}")


class MathVerifier:
    """Scores completions against reference answers with `check_answer`; needs no trainer."""

    name = "math_exact"

    def score(self, answers: Sequence[str], completions: Sequence[str]) -> list[Reward]:
        if len(answers) != len(completions):
            raise ValueError(f"{self.name}: {len(answers)} answers but {len(completions)} completions")
        return [check_answer(completion, answer) for answer, completion in zip(answers, completions)]


def _fast_path(completion: str, expected: str | None) -> bool:
    """An integer answer, and a completion without a box or whose last box holds a plain number."""
    if expected is None or "." in expected:
        return False
    boxed = _last_boxed(completion)
    return boxed is None or canonical_number(boxed) is not None


def _last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} with balanced braces (to the end of text if unclosed)."""
    start = text.rfind(_BOXED)
    if start < 0:
        return None
    depth, begin = 1, start + len(_BOXED)
    for i in range(begin, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[begin:i]
    return text[begin:]


def _canonical(sign: str | None, number: str) -> str:
    whole, _, fraction = number.replace(",", "").partition(".")
    whole = whole.lstrip("0") or "0"
    fraction = fraction.rstrip("0")
    body = f"{whole}.{fraction}" if fraction else whole
    negative = sign in ("-", "−") and body != "0"
    return f"-{body}" if negative else body
