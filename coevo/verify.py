"""Verification stage: score every rollout with the problem's verifier into the rewards table."""

from __future__ import annotations

import pandas as pd

from coevo.problems.verifier import MathVerifier


def verify_rollouts(rollouts: pd.DataFrame, problems: pd.DataFrame) -> pd.DataFrame:
    """One rewards row per rollout (schemas/rewards.py), same order."""
    answers = problems.set_index("id")["answer"]
    verifier = MathVerifier()
    results = verifier.score(list(answers.loc[rollouts["problem_id"]]), list(rollouts["completion"]))
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
