"""Dynamic sampling (DAPO, Yu et al. 2025, arXiv 2503.14476): draw problems until the batch's groups
have mixed outcomes.

A group whose G completions all pass (or all fail) has zero group-normalised advantage: it trains
nothing. DAPO over-samples and keeps drawing until the batch holds `problems_per_iter` groups with
mixed outcomes. In coevo (`rollout.dynamic_sampling`):

1. The batch in force (coevo/stages/in_force.py `in_force`) is the chooser's draw of problems_per_iter x
   (1 + max_rounds) problems (`candidate_count`), shuffled by (seed, iteration) (`shuffled`), and
   round r samples its slice r. The extra problems come from the chooser in force (the uniform
   sampler or the curriculum, the proposer's problems included) and depend only on the seed, the
   iteration and the co-evolver version, never on outcomes: a resumed or re-run rollout stage draws
   the same problems, and the flow and the plain driver agree.
2. The rollout stage samples round 0, verifies it to gate (`mixed_problems`), and samples the next
   round while fewer than problems_per_iter groups are mixed and rounds remain (`sample_rounds`).
   Round r > 0 is seeded from (seed, iteration, "rollout-round<r>"); round 0 is exactly the rollout
   without dynamic sampling. The table holds every round's rollouts: verification scores them all and
   the co-evolvers learn from all of them (a curriculum's cell value sees its dead groups too).
3. The update trains on the first problems_per_iter mixed groups in draw order (`kept_rows`), or on
   every mixed group when the rounds ran out first.

Departures from DAPO:
1. Rounds are bounded (`max_rounds`) and a short batch trains as it is; verl's recipe raises, or
   continues with a short batch, once its own bound is reached.
2. The gate is the verifier's pass/fail by default (`gate: passed`), not the reward's spread: under a
   shaped reward (format, length terms) a group whose answers all fail still has reward variance, so
   a reward gate keeps groups with no outcome signal (verl's recipe measured the zero-signal share
   0.10 under GRPO, 0.04 with a reward-spread filter, 0.75 with a pass/fail filter on a shaped GSM8K
   reward). `gate: reward` is DAPO's filter.
3. Every round draws problems_per_iter problems, not the shortfall: the draw is fixed before any
   round runs (point 1), so what a round samples cannot depend on what an earlier one found.
4. Verification runs twice on the gated rounds' rollouts (once to gate, once in the verification
   stage): reward functions are deterministic here, so both agree; an expensive judge pays twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pandas as pd

from coevo.config import DynamicSamplingConfig, RolloutConfig
from coevo.seeding import derive_seed


def candidate_count(rollout: RolloutConfig, available: int) -> int:
    """How many problems the iteration's chooser draws: problems_per_iter, or problems_per_iter x
    (1 + max_rounds) under dynamic sampling, at most the training problems there are."""
    ds = rollout.dynamic_sampling
    rounds = 1 + (ds.max_rounds if ds.enabled else 0)
    return min(rollout.problems_per_iter * rounds, available) if ds.enabled else rollout.problems_per_iter


def shuffled(batch: pd.DataFrame, seed: int, iteration: int) -> pd.DataFrame:
    """The drawn candidates in a seeded order, so that every round's slice is a sample of the chooser's
    distribution (a curriculum returns its draw grouped by category)."""
    order = np.random.default_rng(derive_seed(seed, iteration, "dynamic-sampling")).permutation(len(batch))
    return batch.iloc[order].reset_index(drop=True)


def mixed_problems(rollouts: pd.DataFrame, rewards: pd.DataFrame, gate: str) -> set[str]:
    """Problem ids whose group has mixed outcomes: some completions pass and some fail (`passed`), or
    the rewards differ (`reward`)."""
    column = "passed" if gate == "passed" else "reward"
    joined = rollouts[["rollout_id", "problem_id"]].merge(rewards[["rollout_id", column]], on="rollout_id")
    spread = joined.groupby("problem_id", sort=False)[column].nunique()
    return set(spread.index[spread > 1].astype(str))


def sample_rounds(
    candidates: pd.DataFrame,
    per_round: int,
    ds: DynamicSamplingConfig,
    sample: Callable[[pd.DataFrame, int], pd.DataFrame],
    score: Callable[[pd.DataFrame], pd.DataFrame],
) -> tuple[pd.DataFrame, dict[str, float]]:
    """Every round's rollouts, concatenated in draw order, and the rollout/ds_* metrics.

    `sample(problems, round)` rolls out a slice of the candidates; `score(rollouts)` verifies them.
    Round 0 always runs; round r > 0 runs while fewer than `per_round` groups are mixed."""
    frames, mixed, drawn, extra_seconds = [], 0, 0, 0.0
    for round_ in range(1 + ds.max_rounds):
        part = candidates.iloc[round_ * per_round : (round_ + 1) * per_round]
        if part.empty:
            break
        started = time.perf_counter()
        frame = sample(part, round_)
        mixed += len(mixed_problems(frame, score(frame), ds.gate))
        extra_seconds += time.perf_counter() - started if round_ else 0.0
        frames.append(frame)
        drawn += len(part)
        if mixed >= per_round:
            break
    rollouts = pd.concat(frames, ignore_index=True)
    extra_tokens = sum(int(f["completion_ids"].map(len).sum()) for f in frames[1:])
    kept = min(mixed, per_round)
    metrics = {
        "rollout/ds_rounds": float(len(frames) - 1),  # extra rounds run
        "rollout/ds_groups_drawn": float(drawn),
        "rollout/ds_groups_mixed": float(mixed),
        "rollout/ds_groups_kept": float(kept),
        "rollout/ds_zero_var_share_drawn": 1.0 - mixed / drawn,  # before the filter (TRL's frac_reward_zero_std)
        "rollout/ds_zero_var_share_kept": 1.0 - kept / per_round,  # the batch's slots without a mixed group
        "time/rollout_extra_rounds": extra_seconds,  # wall clock: a time/ metric, never compared
        "rollout/ds_extra_tokens": float(extra_tokens),
    }
    return rollouts, metrics


def kept_rows(
    rollouts: pd.DataFrame, rewards: pd.DataFrame, per_round: int, gate: str
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rollouts and rewards the update trains on: the first `per_round` mixed groups in draw order
    (the rollouts table's order)."""
    mixed = mixed_problems(rollouts, rewards, gate)
    order = [pid for pid in dict.fromkeys(rollouts["problem_id"].astype(str)) if pid in mixed][:per_round]
    chosen = set(order)
    frame = rollouts[rollouts["problem_id"].astype(str).isin(chosen)].reset_index(drop=True)
    scored = rewards[rewards["rollout_id"].isin(set(frame["rollout_id"]))].reset_index(drop=True)
    return frame, scored
