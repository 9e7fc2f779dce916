"""The merge stage: an iteration's rollouts and rewards tables from its shards (pipeline.shards > 1)."""

from __future__ import annotations

import pandas as pd

from coevo.config import Config
from coevo.io import hash_file
from coevo.layout import RunLayout
from coevo.records import Table
from coevo.stages.rollout import rollout_metrics
from coevo.stages.verify import reward_metrics
from coevo.store.tables import table
from schemas.rewards import read_rewards, write_rewards
from schemas.rollouts import read_rollouts, write_rollouts


def merge_stage(cfg: Config, it: int, rollouts: list[str], rewards: list[str]) -> tuple[Table, Table]:
    """The iteration's rollouts and rewards tables from its shards, concatenated in shard order
    (pipeline.shards > 1; coevo/sharding.py): (rollouts, rewards)."""
    layout = RunLayout(cfg.run.out_dir)
    frame = pd.concat([table(read_rollouts, path) for path in rollouts], ignore_index=True)
    scored = pd.concat([table(read_rewards, path) for path in rewards], ignore_index=True)
    write_rollouts(layout.rollouts(it), frame)
    write_rewards(layout.rewards(it), scored)
    return (
        Table(str(layout.rollouts(it)), hash_file(layout.rollouts(it)), rollout_metrics(frame, cfg.episodes)),
        Table(str(layout.rewards(it)), hash_file(layout.rewards(it)), reward_metrics(frame, scored)),
    )
