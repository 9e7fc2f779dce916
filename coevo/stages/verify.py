"""The verification stage: the rewards of the iteration's rollouts (coevo/verification/stage.py)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pandas as pd

from coevo.code.execution import cure_frame
from coevo.coevolvers.base import KeepsTests
from coevo.coevolvers.composite import coevolver_at, member_with
from coevo.config import Config
from coevo.io import hash_file
from coevo.layout import RunLayout
from coevo.records import InForce, Table
from coevo.rollout.roles import SOLVER
from coevo.sharding import shard_path
from coevo.store.tables import table, training_split
from coevo.verification.stage import verify_rollouts
from schemas.rewards import COMPONENTS, LOGGED, write_rewards
from schemas.rollouts import read_rollouts, with_episode_columns


def verify_stage(cfg: Config, now: InForce, rollouts: str, shard: int = 0, shards: int = 1) -> Table:
    """Rewards of the iteration's rollouts, or of shard `shard` of `shards` of them: with one role,
    the `rewards:` in force (coevo/verification/stage.py); with the solver and the tester, CURE's for
    both from one pass table, with the test bank's tests in force (coevo/code/execution.py)."""
    frame = table(read_rollouts, rollouts)
    metrics = {}
    if now.cfg.rollout.roles == [SOLVER]:
        rewards = verify_rollouts(frame, training_split(now), now.cfg)  # the reward weights in force
    else:
        rewards, metrics = cure_frame(frame, training_split(now), tests_in_force(cfg, now), now.cfg)
    path = shard_path(RunLayout(cfg.run.out_dir).rewards(now.iteration), shard, shards)
    write_rewards(path, rewards)
    return Table(str(path), hash_file(path), {**reward_metrics(frame, rewards), **metrics})


def tests_in_force(cfg: Config, now: InForce) -> Callable[[str], list[str]]:
    """A problem's unit tests in the co-evolver version the iteration runs under (a test bank's; none
    without one)."""
    keeper = None
    if now.coevolver is not None:
        keeper = member_with(coevolver_at(cfg, now.iteration, now.coevolver.path), KeepsTests)
    return keeper.tests_for if keeper is not None else lambda problem_id: []


def reward_metrics(rollouts: pd.DataFrame, rewards: pd.DataFrame) -> dict[str, float]:
    """The solver's reward mean and pass rate (overall and per family), the mean of each reward
    component and plugin metric, and each other role's reward mean and pass rate (a rollouts frame
    without roles holds the solver's samples)."""
    everyone = with_episode_columns(rollouts)[["rollout_id", "family", "role"]].merge(
        rewards.drop(columns="role", errors="ignore"), on="rollout_id"
    )
    joined = everyone[everyone["role"] == SOLVER]
    metrics = {"verify/reward_mean": float(joined["reward"].mean()), "verify/pass_rate": float(joined["passed"].mean())}
    metrics.update({f"verify/pass_rate/{f}": float(g["passed"].mean()) for f, g in joined.groupby("family")})
    for role, rows in everyone[everyone["role"] != SOLVER].groupby("role"):
        metrics |= {f"verify/{role}/reward_mean": float(rows["reward"].mean())}
        metrics |= {f"verify/{role}/pass_rate": float(rows["passed"].mean())}
    components = pd.DataFrame(
        [json.loads(text) for text in rewards[COMPONENTS]], dtype=float
    )  # None -> NaN: skipped by mean
    metrics.update({f"verify/reward/{name}": float(column.mean()) for name, column in components.items()})
    if (
        LOGGED in rewards.columns
    ):  # reward plugins' log_metric values (coevo/verification/reward_calls.py), mean over the rows
        logged = pd.DataFrame([json.loads(text).get("metric", {}) for text in rewards[LOGGED]], dtype=float)
        metrics.update({f"verify/logged/{name}": float(column.mean()) for name, column in logged.items()})
    parse_fail = rewards["details"].str.extract(r"(?:^| )judge_parse_fail=(\d+)")[0].dropna()
    if len(parse_fail):  # the rubric judge's unparseable replies (left out of the reward)
        metrics["verify/judge_parse_fail"] = float(parse_fail.astype(int).sum())
    return metrics
