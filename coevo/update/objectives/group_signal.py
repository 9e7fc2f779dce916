"""The learning signal of an iteration's groups, read from its rollouts and rewards tables: the mean
|advantage| of each problem's group and whether its rewards are all equal (no signal). The
curriculum rewards its arms with the first; the co-evolution stage logs the share of the second
(coevo/zero_var_share) for every co-evolver."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from coevo.update.objectives.advantages import group_advantages, nonzero_variance_groups


def group_signal(rollouts: pd.DataFrame, rewards: pd.DataFrame) -> pd.DataFrame:
    """Per problem (its rollouts form one group): mean |advantage| (reward - group mean) and whether
    the group's rewards are all equal. Columns problem_id, abs_adv, zero_var; ordered by problem_id."""
    joined = rollouts[["rollout_id", "problem_id"]].merge(rewards[["rollout_id", "reward"]], on="rollout_id")
    groups = [(pid, g["reward"].to_numpy(dtype=np.float64)) for pid, g in joined.groupby("problem_id", sort=True)]
    if not groups:
        return pd.DataFrame({"problem_id": [], "abs_adv": [], "zero_var": []})
    if len({len(r) for _, r in groups}) != 1:
        raise ValueError("every problem needs the same number of rollouts (rollout.group_size)")
    matrix = torch.tensor(np.stack([r for _, r in groups]))  # [N, G]
    advantages = group_advantages(matrix, std_normalize=False, eps=0.0)  # [N, G]
    return pd.DataFrame(
        {
            "problem_id": [pid for pid, _ in groups],
            "abs_adv": advantages.abs().mean(dim=1).tolist(),  # [N]
            "zero_var": (~nonzero_variance_groups(matrix)).tolist(),  # [N]
        }
    )


def zero_variance_share(rollouts: pd.DataFrame, rewards: pd.DataFrame) -> float:
    """Share of the iteration's groups (one per problem and role) whose rewards are all equal (no
    learning signal); 0 for none."""
    zero = [group_signal(rows, rewards)["zero_var"] for _, rows in rollouts.groupby("role", sort=True)]
    return float(pd.concat(zero).mean()) if zero and sum(map(len, zero)) else 0.0
