"""The policy-update stage: checkpoint k -> k+1 (its steps: coevo/update/steps.py)."""

from __future__ import annotations

from coevo.config import Config
from coevo.faults import pause_point
from coevo.layout import RunLayout
from coevo.model.cache import cached_policy, forget_policies, keep_policy, take_policy
from coevo.model.checkpoint import PrunedCheckpointError, read_pruned
from coevo.records import InForce, Splits, Trained
from coevo.rollout.engines import LIVE
from coevo.update.distributed import launch_update
from coevo.update.steps import update_save, update_state, update_train


def update_stage(
    cfg: Config, now: InForce, checkpoint: str, rollouts: str, rewards: str, coevolver: str, data: Splits
) -> Trained:
    """Checkpoint k -> k+1. Resumable: reads weights and optimizer state from checkpoint k only.

    A self-distillation objective's teacher reads its privileged context from co-evolver k+1 (the
    one this iteration produced) and the problems' answers; with `policy.frozen` (ablation) no
    optimizer step is taken and checkpoint k+1 keeps k's weights. With policy.lora.rank > 0 a full
    checkpoint gets fresh adapters (it becomes the base) and checkpoint k+1 holds the adapters only.
    An update without an optimizer step clones k's files into k+1 (checked against k's hashes).
    With policy.distributed.world_size > 1 the update runs in torchrun's ranks
    (coevo/update/distributed.py launches coevo/update/rank.py), which call update_state /
    update_train / update_save (coevo/update/steps.py).
    """
    it, layout = now.iteration, RunLayout(cfg.run.out_dir)
    if read_pruned(checkpoint) is not None:
        raise PrunedCheckpointError(checkpoint)
    LIVE.sleep()  # a colocated vLLM engine releases its GPU memory for the update
    if cfg.policy.distributed.world_size > 1 and not cfg.policy.frozen:
        forget_policies()  # the ranks load checkpoint k themselves
        record = launch_update(
            cfg, now, checkpoint, rollouts, rewards, coevolver, data, rank_module="coevo.update.rank"
        )
        LIVE.sync(record.path, record.sha256, lambda: cached_policy(record.path, cfg))
        return record
    policy = take_policy(checkpoint, cfg)
    optimizer, objective, reference = update_state(cfg, it, checkpoint, policy)
    stats = update_train(cfg, now, policy, optimizer, objective, reference, rollouts, rewards, coevolver)
    pause_point("update", it)  # trained in memory, nothing saved yet
    version = update_save(cfg, now, checkpoint, rollouts, rewards, coevolver, data, policy, optimizer, stats)
    keep_policy(version, policy)
    out = layout.checkpoint(it)
    LIVE.sync(out, version, lambda: policy)  # a persistent engine serves the new weights in place (no restart)
    return Trained(str(out), version, stats)
