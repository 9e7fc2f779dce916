"""The policy update's steps, shared by the update stage (coevo/stages/update.py) and the torchrun
ranks (coevo/update/rank.py): the optimizer, objective and reference model (`update_state`), the
optimizer steps (`update_train`) and the checkpoint written with its lineage (`update_save`)."""

from __future__ import annotations

from pathlib import Path

from coevo.coevolvers.composite import coevolver_at
from coevo.config import Config
from coevo.layout import RunLayout
from coevo.model.checkpoint import TRAINER_STATE, Policy, load_optimizer_state, load_policy, save_checkpoint
from coevo.model.lora import apply_lora, is_adapter_dir, is_lora
from coevo.records import InForce, Splits
from coevo.rollout.dynamic import kept_rows
from coevo.rollout.engines import samples_with_trainer_model
from coevo.seeding import derive_seed
from coevo.store.lineage import checkpoint_lineage
from coevo.store.tables import table, training_split
from coevo.update.objectives import build_objective
from coevo.update.stage import build_optimizer, policy_update
from coevo.update.teacher import teacher_context
from schemas.rewards import read_rewards
from schemas.rollouts import read_rollouts


def update_state(cfg: Config, it: int, checkpoint: str, policy: Policy) -> tuple:
    """The update's optimizer (with checkpoint k's state), objective and reference model (or None)."""
    with_lora(policy, cfg, Path(checkpoint))
    optimizer = build_optimizer(policy.model, cfg)
    if not load_optimizer_state(checkpoint, optimizer) and it > 1:
        raise FileNotFoundError(
            f"{checkpoint}: no {TRAINER_STATE}; the update cannot resume exactly from this checkpoint"
        )
    objective = build_objective(cfg.objective)
    reference = (
        load_policy(RunLayout(cfg.run.out_dir).checkpoint(0), cfg.policy.device, cfg.policy.dtype).model
        if objective.needs_reference
        else None
    )
    return optimizer, objective, reference


def update_train(
    cfg: Config,
    now: InForce,
    policy: Policy,
    optimizer,
    objective,
    reference,
    rollouts: str,
    rewards: str,
    coevolver: str,
    ranks=None,
) -> dict:
    """The optimizer steps of iteration `now.iteration` (none with policy.frozen), with the params in
    force; `ranks`: one rank's share."""
    it = now.iteration
    if cfg.policy.frozen:
        return {"policy/steps": 0.0}
    teacher = (
        teacher_context(cfg.objective.teacher.sources, coevolver_at(cfg, it, coevolver))
        if objective.needs_teacher
        else None
    )
    answers = training_split(now).set_index("id")["answer"] if teacher is not None else None
    frame, scored = table(read_rollouts, rollouts), table(read_rewards, rewards)
    ds = cfg.rollout.dynamic_sampling
    if ds.enabled:  # the first problems_per_iter mixed groups of the rounds (coevo/rollout/dynamic.py)
        frame, scored = kept_rows(frame, scored, cfg.rollout.problems_per_iter, ds.gate)
        if frame.empty:  # no round found a mixed group: nothing to train on
            return {"policy/steps": 0.0, "policy/groups_total": 0.0, "policy/groups_kept": 0.0}
    seed, engine_is_trainer = derive_seed(cfg.seed, it, "update"), samples_with_trainer_model(cfg)
    return policy_update(
        policy,
        optimizer,
        objective,
        frame,
        scored,
        now.cfg,
        seed,
        reference,
        teacher,
        answers,
        engine_is_trainer,
        ranks,
    )


def update_save(
    cfg: Config,
    now: InForce,
    checkpoint: str,
    rollouts: str,
    rewards: str,
    coevolver: str,
    data: Splits,
    policy: Policy,
    optimizer,
    stats: dict,
    meta: dict | None = None,
) -> str:
    """Write checkpoint k+1 with its lineage (plus `meta`) atomically; returns its weights hash."""
    it = now.iteration
    lineage = checkpoint_lineage(
        cfg, it, Path(checkpoint), Path(rollouts), Path(rewards), Path(coevolver), data, policy.base, now.harness
    )
    unchanged = stats["policy/steps"] == 0 and is_adapter_dir(checkpoint) == is_lora(
        policy.model
    )  # no step: same weights, same optimizer state
    if unchanged:
        lineage["unchanged_from"] = lineage["parent"]["path"]
    out = RunLayout(cfg.run.out_dir).checkpoint(it)
    return save_checkpoint(
        out,
        policy,
        {"iteration": it, "lineage": lineage, **(meta or {})},
        optimizer,
        unchanged_from=checkpoint if unchanged else None,
    )


def with_lora(policy: Policy, cfg: Config, checkpoint: Path) -> None:
    """With policy.lora.rank > 0, a full policy gets fresh adapters (seeded) on `checkpoint` as its base."""
    if cfg.policy.lora.rank and not cfg.policy.frozen and not is_lora(policy.model):
        policy.model = apply_lora(policy.model, cfg.policy.lora, derive_seed(cfg.seed, 0, "lora"))
        policy.base = checkpoint
