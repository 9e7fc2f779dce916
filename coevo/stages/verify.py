"""The verification stage: the rewards of the iteration's rollouts (coevo/verification/stage.py)."""

from __future__ import annotations

import json

import pandas as pd

from coevo.config import Config
from coevo.io import hash_file
from coevo.layout import RunLayout
from coevo.records import InForce, Table
from coevo.sharding import shard_path
from coevo.store.tables import table, training_split
from coevo.verification.stage import verify_rollouts
from schemas.rewards import COMPONENTS, LOGGED, write_rewards
from schemas.rollouts import read_rollouts


def verify_stage(cfg: Config, now: InForce, rollouts: str, shard: int = 0, shards: int = 1) -> Table:
    """Rewards of the iteration's rollouts, or of shard `shard` of `shards` of them."""
    frame = table(read_rollouts, rollouts)
    rewards = verify_rollouts(frame, training_split(now), now.cfg)  # the reward weights in force
    path = shard_path(RunLayout(cfg.run.out_dir).rewards(now.iteration), shard, shards)
    write_rewards(path, rewards)
    return Table(str(path), hash_file(path), reward_metrics(frame, rewards))


def reward_metrics(rollouts: pd.DataFrame, rewards: pd.DataFrame) -> dict[str, float]:
    joined = rollouts[["rollout_id", "family"]].merge(rewards, on="rollout_id")
    metrics = {"verify/reward_mean": float(joined["reward"].mean()), "verify/pass_rate": float(joined["passed"].mean())}
    metrics.update({f"verify/pass_rate/{f}": float(g["passed"].mean()) for f, g in joined.groupby("family")})
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
