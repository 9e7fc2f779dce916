"""Rollout and verification in shards (pipeline.shards): the iteration's batch split by problem.

Shard j of k gets the j-th contiguous block of the problems the co-evolver chose for the iteration
(numpy.array_split: the first len % k blocks hold one problem more) with every context variant it
planned for them, and samples with its own seed, derived from (seed, iteration, "rollout", j, k).
Each shard is verified on its own; `coevo.stages.merge.merge_stage` then concatenates the shards in shard
order into the iteration's rollouts and rewards tables, validated and written exactly where an
unsharded run writes them, so the co-evolver, the update, the catalog and resume see one table each.
Sampling depends on the shard, never on where it ran (the flow's process or a Ray worker).
With k = 1 nothing is split or merged and the seed is the unsharded one: bit-identical to a run
without sharding.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from coevo.types import ContextVariant


def shard_of(
    batch: pd.DataFrame, variants: list[ContextVariant], shard: int, shards: int
) -> tuple[pd.DataFrame, list[ContextVariant]]:
    """Shard `shard` of `shards`: its block of the batch's problems and their variants, in plan order."""
    if not 0 <= shard < shards:
        raise ValueError(f"shard {shard}: expected 0 <= shard < pipeline.shards ({shards})")
    if shards == 1:
        return batch, variants
    if shards > len(batch):
        raise ValueError(
            f"pipeline.shards ({shards}) exceeds the problems of the iteration ({len(batch)}, "
            f"rollout.problems_per_iter): a shard would be empty"
        )
    rows = np.array_split(np.arange(len(batch)), shards)[shard]
    part = batch.iloc[rows]
    ids = set(part["id"])
    return part, [v for v in variants if v.problem_id in ids]


def seed_stage(shard: int, shards: int) -> str:
    """The stage label the shard's sampling seed is derived from ("rollout" unsharded)."""
    return "rollout" if shards == 1 else f"rollout:{shard}/{shards}"


def shard_path(table: Path, shard: int, shards: int) -> Path:
    """Where shard `shard` of an iteration's table is written (the table itself when unsharded):
    rollouts/iter_0001.parquet -> rollouts/shards/iter_0001.00-of-02.parquet."""
    table = Path(table)
    return table if shards == 1 else table.parent / "shards" / f"{table.stem}.{shard:02d}-of-{shards:02d}{table.suffix}"
