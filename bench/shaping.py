"""Known-bad shaping terms for `bench/harness.py --scenario shaping`: reward plugins (the `rewards:`
contract, coevo/rewards.py) that pay for something other than a correct answer."""

from __future__ import annotations


def length(completions: list[str], **columns) -> list[float]:
    """One point per character: a length bonus, the classic exploitable shaping term."""
    return [float(len(text.strip())) for text in completions]


def even(completions: list[str], **columns) -> list[float]:
    """1.0 when the completion ends in an even digit: a term unrelated to correctness."""
    return [float(text.strip()[-1:] in tuple("02468")) for text in completions]
