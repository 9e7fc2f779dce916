"""A known-bad shaping term for `bench/harness.py --scenario shaping`: a reward plugin (the `rewards:`
contract, coevo/verification/rewards.py) that pays for something other than a correct answer."""

from __future__ import annotations


def length(completions: list[str], **columns) -> list[float]:
    """One point per character: a length bonus, the classic exploitable shaping term."""
    return [float(len(text.strip())) for text in completions]
