"""Verification stage: score every rollout with its problem's verifier into the rewards table.

Verifiers are chosen by problem family from a registry (`FAMILY_VERIFIERS`), never by if-chains: a
family without an entry (arithmetic, user math files) gets the exact-match math verifier; the code
families (coevo.code.verifier.CODE_FAMILIES) run the completion's program against the hidden tests
in the sandbox. An entry is `score(problem_rows, completions) -> list[Reward]`, where the rows are
problems-table rows of that family, one per completion.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pandas as pd

from coevo.code.verifier import CODE_FAMILIES, score_problem_rows
from coevo.problems.verifier import MathVerifier
from coevo.registry import Registry
from coevo.types import Reward

FamilyVerifier = Callable[[pd.DataFrame, Sequence[str]], list[Reward]]
FAMILY_VERIFIERS = Registry("family verifier")
register_family_verifier = FAMILY_VERIFIERS.add


def score_math(problems: pd.DataFrame, completions: Sequence[str]) -> list[Reward]:
    return MathVerifier().score(list(problems["answer"]), list(completions))


for _family in CODE_FAMILIES:
    register_family_verifier(_family, score_problem_rows)


def verifier_for(family: str) -> FamilyVerifier:
    return FAMILY_VERIFIERS[family] if family in FAMILY_VERIFIERS.names() else score_math


def verify_rollouts(rollouts: pd.DataFrame, problems: pd.DataFrame) -> pd.DataFrame:
    """One rewards row per rollout (schemas/rewards.py), same order."""
    by_id = problems.set_index("id")
    rows = by_id.loc[rollouts["problem_id"]].reset_index()
    results: list[Reward | None] = [None] * len(rollouts)
    completions = list(rollouts["completion"])
    for family, positions in rows.groupby("family", sort=True).indices.items():
        scored = verifier_for(str(family))(rows.iloc[positions].reset_index(drop=True), [completions[i] for i in positions])
        for i, reward in zip(positions, scored):
            results[i] = reward
    return pd.DataFrame(
        {
            "rollout_id": rollouts["rollout_id"].to_numpy(),
            "iteration": rollouts["iteration"].to_numpy(),
            "problem_id": rollouts["problem_id"].to_numpy(),
            "reward": [r.reward for r in results],
            "passed": [r.passed for r in results],
            "verifier": [r.verifier for r in results],
            "details": [r.details for r in results],
        }
    )
