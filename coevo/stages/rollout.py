"""The rollout stage: the iteration's batch sampled by the policy (coevo/rollout/stage.py `run_rollouts`)."""

from __future__ import annotations

import functools
from dataclasses import replace

import pandas as pd

from coevo.coevolvers.composite import coevolver_at
from coevo.config import Config
from coevo.faults import pause_point
from coevo.io import hash_file
from coevo.layout import RunLayout
from coevo.model.cache import live_engine
from coevo.model.checkpoint import policy_version
from coevo.records import InForce, Table
from coevo.rollout.dynamic import sample_rounds
from coevo.rollout.stage import run_rollouts
from coevo.sharding import seed_stage, shard_of, shard_path
from coevo.store.tables import batch_of, training_split
from coevo.types import ContextVariant
from coevo.verification.stage import verify_rollouts
from schemas.rollouts import write_rollouts


def rollout_stage(cfg: Config, now: InForce, checkpoint: str, shard: int = 0, shards: int = 1) -> Table:
    """The iteration's rollouts, or shard `shard` of `shards` of them (coevo/sharding.py): the batch
    `now` names, planned by co-evolver version it-1, each plan sampled for every role of
    rollout.roles (coevo/rollout/roles.py), under the params in force."""
    it = now.iteration
    evolver = coevolver_at(cfg, it, now.coevolver.path)
    ds = cfg.rollout.dynamic_sampling

    def sample(problems: pd.DataFrame, round_: int = 0) -> pd.DataFrame:
        planned = evolver.plan(problems, cfg.rollout.group_size)
        problems, variants = shard_of(problems, with_roles(planned, cfg.rollout.roles), shard, shards)
        stage = seed_stage(shard, shards) + (f"-round{round_}" if round_ else "")
        engine = live_engine(cfg, checkpoint)
        return run_rollouts(engine, variants, problems, now.cfg, it, policy_version(checkpoint), stage)

    pause_point("rollout", f"{it}.{shard}")  # a shard's rollout before it samples (the Ray worker-kill test)
    metrics = {}
    if ds.enabled:  # DAPO's rounds (coevo/rollout/dynamic.py); one shard: the config refuses more
        score = functools.partial(verify_rollouts, problems=training_split(now), cfg=now.cfg)
        frame, metrics = sample_rounds(batch_of(now), cfg.rollout.problems_per_iter, ds, sample, score)
    else:
        frame = sample(batch_of(now))
    path = shard_path(RunLayout(cfg.run.out_dir).rollouts(it), shard, shards)
    write_rollouts(path, frame)
    return Table(str(path), hash_file(path), {**rollout_metrics(frame, cfg.episodes), **metrics})


def with_roles(variants: list[ContextVariant], roles: list[str]) -> list[ContextVariant]:
    """Each planned variant once per role, the roles of a problem after one another."""
    return [replace(variant, role=role) for variant in variants for role in roles]


def rollout_metrics(rollouts: pd.DataFrame, episodes: bool = False) -> dict[str, float]:
    """Completion length and finished share; with `episodes` (tools or an environment), the mean
    assistant turns, tool calls and tool errors per episode and the truncated share."""
    metrics = {
        "rollout/completion_len": float(rollouts["completion_ids"].map(len).mean()),
        "rollout/finished_frac": float(rollouts["finished"].mean()),
    }
    if episodes:
        metrics |= {
            "rollout/turns": float(rollouts["turns"].mean()),
            "rollout/tool_calls": float(rollouts["tool_calls"].mean()),
            "rollout/tool_errors": float(rollouts["tool_errors"].mean()),
            "rollout/truncated_frac": float(rollouts["truncated"].mean()),
        }
    return metrics
