"""Each problem family's verifier, chosen from a registry, and `family_verdicts`, the built-in reward `verifier`.

Verifiers are chosen by problem family from a registry (`FAMILY_VERIFIERS`), never by if-chains: the
built-in arithmetic families (add, sub, mul, addmul) need the answer stated as a number
(`check_stated_number`: math-verify would evaluate a boxed restatement of the question, a reward
hack a real policy found); a family without an entry (user math files) gets the math verifier
(exact integers, math-verify for other answers); the code families
(coevo.code.families.CODE_FAMILIES) run the completion's program against the hidden tests in the
sandbox configured by code.sandbox; the constraint kinds run their hidden gold checks. An entry is
`score(problem_rows, completions, cfg) -> list[Reward]`, where the rows are problems-table rows of
that family, one per completion.

`family_verdicts` is the judge behind the built-in reward `verifier` of `rewards:` (coevo/verification/rewards.py),
which the verification stage combines with the other rewards (coevo/verification/stage.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pandas as pd

from coevo.code.families import CODE_FAMILIES
from coevo.code.verifier import score_problem_rows
from coevo.config import Config
from coevo.problems.arithmetic import COMBINATIONS
from coevo.problems.arithmetic import FAMILIES as ARITHMETIC_FAMILIES
from coevo.problems.constraints import KINDS as CONSTRAINT_KINDS
from coevo.problems.constraints import score_constraints
from coevo.problems.math_verifier import MathVerifier, check_stated_number
from coevo.registry import Registry
from coevo.types import Reward

FamilyVerifier = Callable[[pd.DataFrame, Sequence[str], Config], list[Reward]]
FAMILY_VERIFIERS = Registry("family verifier")
register_family_verifier = FAMILY_VERIFIERS.add


def score_math(problems: pd.DataFrame, completions: Sequence[str], cfg: Config) -> list[Reward]:
    return MathVerifier().score(list(problems["answer"]), list(completions))


def score_arithmetic(problems: pd.DataFrame, completions: Sequence[str], cfg: Config) -> list[Reward]:
    return [
        check_stated_number(completion, str(answer))
        for answer, completion in zip(problems["answer"], completions, strict=True)
    ]


for _family in [*ARITHMETIC_FAMILIES, *COMBINATIONS]:
    register_family_verifier(_family, score_arithmetic)
for _family in CODE_FAMILIES:
    register_family_verifier(_family, score_problem_rows)
for _family in CONSTRAINT_KINDS:  # the constraint problems' hidden gold checks
    register_family_verifier(_family, score_constraints)


def verifier_for(family: str) -> FamilyVerifier:
    return FAMILY_VERIFIERS[family] if family in FAMILY_VERIFIERS.names() else score_math


def family_verdicts(problems: pd.DataFrame, completions: Sequence[str], cfg: Config) -> list[Reward]:
    """One verdict per (problems-table row, completion) pair, in order, each by its family's verifier.

    Rows are grouped by verifier, not by family, so every code sample of a batch runs in one
    parallel sandbox call whatever its family.
    """
    groups: dict[FamilyVerifier, list[int]] = {}
    for position, family in enumerate(problems["family"]):
        groups.setdefault(verifier_for(str(family)), []).append(position)
    results: list[Reward | None] = [None] * len(problems)
    for verifier, positions in groups.items():
        scored = verifier(problems.iloc[positions].reset_index(drop=True), [completions[i] for i in positions], cfg)
        for i, reward in zip(positions, scored, strict=True):
            results[i] = reward
    return results
