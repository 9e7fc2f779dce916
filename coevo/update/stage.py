"""Policy-update stage: turn verified rollouts into optimizer steps of the registered objective.

1. Join rollouts with rewards; each problem's rows form one group of G (matched halves included).
2. Group advantages; groups whose rewards are all equal are dropped when configured, unless the
   objective has a token-level signal beyond the group advantage (self-distillation, opsa).
3. Training prompts: with `coevolver.update_context = "strip"` the skills are removed and the bare
   question is trained (the student runs without skills), rendered by `prompt.format` exactly as the
   engine renders it (coevo/rollout/prompting.py); the shift between the skill-conditioned
   sampler and the bare-prompt trainer is corrected by the objective's truncated IS weight. For a
   self-distillation objective each row also gets a teacher prompt: the privileged context
   (coevo/update/teacher.py) before the bare question.
4. pi_old (and the reference, when the objective needs one) is computed once, without grad, and
   only where it is not known already: when the engine samples with the trainer's own model (HF),
   a row trained under the prompt it was sampled with holds pi_old as its sampling logprobs. With a
   separate engine (vLLM) the same pass also gives the engine-vs-trainer mismatch metrics.
5. `optim.epochs` passes over seeded minibatch permutations (of rows, or of whole groups with
   `policy.shared_prefix: group`; coevo/update/prefix.py), gradient-norm clipping each step. The
   self-teacher (the current weights on the teacher prompts) runs once per minibatch under no_grad,
   on the rows whose teacher prompt differs from the student's; the others reuse the student's pass.
6. One minibatch's loss is `minibatch_loss`, called by this process alone or, in a distributed
   update (policy.distributed.world_size > 1, coevo/update/distributed.py), by every rank on its
   share of the same minibatch, scaled so the all-reduced gradient is this one.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import pandas as pd
import torch
from torch import Tensor
from transformers import PreTrainedModel

from coevo.config import Config
from coevo.model.checkpoint import Policy
from coevo.rollout.episodes import renderer_for
from coevo.update.logprobs import (
    PackedBatch,
    completion_distributions,
    completion_logprobs,
    pack,
    sampled_logprobs,
)
from coevo.update.mismatch import measured_rows, mismatch_of
from coevo.update.objectives import (
    Objective,
    PolicyBatch,
    group_advantages,
    nonzero_variance_groups,
)
from coevo.update.prefix import epoch_minibatches, shares, teacher_view
from coevo.update.teacher import TeacherContext


class RankShare(Protocol):
    """This process as one rank of a distributed update (`Ranks`, coevo/update/distributed.py)."""

    def share_loss(
        self, model, objective: Objective, data: TrainingSet, idx: list[int], old, ref, cfg: Config, pad_id: int
    ) -> tuple[Tensor, dict]:
        """This rank's loss on its share of the minibatch `idx`, scaled for DDP's mean over ranks."""

    def mean_stats(self, stats: dict[str, float]) -> dict[str, float]:
        """Each stat averaged over the ranks."""


@dataclass
class TrainingSet:
    rollout_ids: list[str]
    prompts: list[list[int]]
    completions: list[list[int]]
    sampling_logprobs: list[list[float]]
    as_sampled: list[bool]  # trained under exactly the prompt it was sampled with
    advantages: Tensor  # [N]
    passed: Tensor  # [N] bool
    policy_masks: list[list[int]] = field(default_factory=list)  # per row: 1 on policy tokens ([] = all)
    teacher_prompts: list[list[int]] | None = None  # privileged context + question, when a teacher is used
    sampled_bare: set[str] | None = None  # ids of all rollouts sampled on the bare question as prompt.format renders it


def build_training_set(
    policy: Policy,
    rollouts: pd.DataFrame,
    rewards: pd.DataFrame,
    cfg: Config,
    keep_all_groups: bool = False,
    teacher: TeacherContext | None = None,
    answers: pd.Series | None = None,
) -> tuple[TrainingSet, dict]:
    """The rows the update trains on. `keep_all_groups` keeps zero-variance groups; `teacher` (with
    the problems' `answers` by problem id, for the "answer" source) adds the teacher prompts."""
    joined = rollouts.merge(
        rewards[["rollout_id", "reward", "passed", "details"]], on="rollout_id", validate="one_to_one"
    )
    joined = joined[joined["role"].isin(cfg.trained_roles)]  # rollout.train_roles (coevo/rollout/roles.py)
    group_size = cfg.rollout.group_size
    groups = [g for _, g in joined.groupby(["problem_id", "role"], sort=True)]  # a group per problem and role
    if any(len(g) != group_size for g in groups):
        raise ValueError(f"every problem and role needs exactly {group_size} rollouts (rollout.group_size)")
    reward_matrix = torch.tensor(np.stack([g["reward"].to_numpy(dtype=np.float64) for g in groups]))  # [N, G]
    drop = cfg.objective.drop_zero_variance and not keep_all_groups
    keep = nonzero_variance_groups(reward_matrix) if drop else torch.ones(len(groups), dtype=torch.bool)  # [N]
    advantages = group_advantages(reward_matrix, cfg.objective.std_normalize, cfg.objective.eps)  # [N, G]
    kept = pd.concat([g for g, k in zip(groups, keep.tolist()) if k]) if bool(keep.any()) else joined.iloc[:0]
    strip = cfg.update_context == "strip"
    renderer = renderer_for(cfg, policy.tokenizer)  # the engine's rendering (coevo/rollout/episodes.py)
    bare_of = dict(
        zip(
            joined["rollout_id"],
            renderer.render_all([{"prompt": q, "family": f} for q, f in zip(joined["question"], joined["family"])]),
        )
    )
    sampled_bare = {rid for rid, prompt in zip(joined["rollout_id"], joined["prompt"]) if prompt == bare_of[rid]}
    prompts = (
        renderer.encode([bare_of[rid] for rid in kept["rollout_id"]])
        if strip
        else [list(ids) for ids in kept["prompt_ids"]]
    )
    as_sampled = [rid in sampled_bare for rid in kept["rollout_id"]] if strip else [True] * len(kept)
    stats = {
        "policy/groups_total": float(len(groups)),
        "policy/groups_kept": float(keep.sum()),
        "policy/advantage_abs_mean": float(advantages[keep].abs().mean()) if bool(keep.any()) else 0.0,
    }
    return (
        TrainingSet(
            rollout_ids=list(kept["rollout_id"]),
            prompts=prompts,
            completions=[list(ids) for ids in kept["completion_ids"]],
            sampling_logprobs=[list(lp) for lp in kept["sampling_logprobs"]],
            policy_masks=[list(m) for m in kept["policy_mask"]] if "policy_mask" in kept else [],
            as_sampled=as_sampled,
            advantages=advantages[keep].reshape(-1).float(),  # [N_kept * G]
            passed=torch.tensor(kept["passed"].to_numpy(dtype=bool)),
            teacher_prompts=_teacher_prompts(policy, kept, teacher, answers, cfg) if teacher is not None else None,
            sampled_bare=sampled_bare,
        ),
        stats,
    )


def _teacher_prompts(
    policy: Policy, kept: pd.DataFrame, teacher: TeacherContext, answers: pd.Series | None, cfg: Config
) -> list[list[int]]:
    rows = kept.assign(answer=kept["problem_id"].map(answers) if answers is not None else None).to_dict("records")
    renderer = renderer_for(cfg, policy.tokenizer)
    texts = [
        renderer.render({"prompt": str(row["question"]), "family": row.get("family")}, teacher(row)) for row in rows
    ]
    return renderer.encode(texts)


@torch.no_grad()
def frozen_logprobs(
    model: PreTrainedModel, prompts: list[list[int]], completions: list[list[int]], cfg: Config, pad_id: int
) -> list[Tensor]:
    """Per-sequence logprobs under a model without grad (pi_old or the reference), chunked."""
    out: list[Tensor] = []
    step = cfg.optim.minibatch_size
    for start in range(0, len(prompts), step):
        packed = pack(
            prompts[start : start + step],
            completions[start : start + step],
            pad_id,
            model.device,
            shares(cfg.policy.shared_prefix),
        )
        logprobs = completion_logprobs(model, packed, cfg.sampling.temperature)  # [b, T]
        out.extend(row[: len(c)].cpu() for row, c in zip(logprobs, completions[start : start + step]))
    return out


def old_logprobs(
    model: PreTrainedModel, data: TrainingSet, rollouts: pd.DataFrame, cfg: Config, pad_id: int, engine_is_trainer: bool
) -> tuple[list[Tensor], dict[str, float]]:
    """pi_old of every training row, and the engine-vs-trainer mismatch, from one pass without grad.

    When the engine samples with the trainer's own model (`engine_is_trainer`), a row trained under
    the prompt it was sampled with already holds pi_old: its sampling logprobs. Only the other rows
    (skill context stripped) are scored, and there is no mismatch to measure. With a separate engine
    every training row is scored, and the same pass scores the rest of the rollouts the mismatch
    metrics read (coevo/update/mismatch.py), so no sequence is scored twice.
    """
    if engine_is_trainer:
        old = [torch.as_tensor(lp, dtype=torch.float32) for lp in data.sampling_logprobs]
        stripped = [i for i, same in enumerate(data.as_sampled) if not same]
        scored = frozen_logprobs(
            model, [data.prompts[i] for i in stripped], [data.completions[i] for i in stripped], cfg, pad_id
        )
        for i, logprobs in zip(stripped, scored):
            old[i] = logprobs
        return old, {}
    measured = measured_rows(rollouts, data.sampled_bare)
    trained_as_sampled = {rid for rid, same in zip(data.rollout_ids, data.as_sampled) if same}
    extra = measured[~measured["rollout_id"].isin(trained_as_sampled)]
    prompts, completions = (
        data.prompts + [list(p) for p in extra["prompt_ids"]],
        data.completions + [list(c) for c in extra["completion_ids"]],
    )
    scored = frozen_logprobs(model, prompts, completions, cfg, pad_id)
    old = scored[: len(data.prompts)]
    trainer = dict(zip([*data.rollout_ids, *extra["rollout_id"]], scored))
    masks = list(measured["policy_mask"]) if "policy_mask" in measured else None
    return old, mismatch_of(
        [trainer[rid] for rid in measured["rollout_id"]], list(measured["sampling_logprobs"]), masks
    )


def _pad(rows: list[Tensor | list[float]], width: int, device: torch.device) -> Tensor:
    padded = torch.zeros((len(rows), width))  # [b, T]
    for i, row in enumerate(rows):
        padded[i, : len(row)] = torch.as_tensor(row, dtype=torch.float32)
    return padded.to(device)


def policy_update(
    policy: Policy,
    optimizer: torch.optim.Optimizer,
    objective: Objective,
    rollouts: pd.DataFrame,
    rewards: pd.DataFrame,
    cfg: Config,
    seed: int,
    reference: PreTrainedModel | None = None,
    teacher: TeacherContext | None = None,
    answers: pd.Series | None = None,
    engine_is_trainer: bool = False,
    ranks: RankShare | None = None,
) -> dict[str, float]:
    """Apply `optim.epochs` passes of the objective to this iteration's rollouts; returns mean stats.

    A self-distillation objective (`objective.needs_teacher`) needs `teacher`, the privileged
    context of each row, and `answers` (reference answers by problem id) when that context uses them.
    `engine_is_trainer`: the rollouts were sampled by this policy's own model (the HF engine), so
    their sampling logprobs are pi_old (see `old_logprobs`). `ranks`: this process is one rank of a
    distributed update (coevo/update/distributed.py); each minibatch's rows are shared among the
    ranks and the loss is scaled so the all-reduced gradient is the single-process one.
    """
    model, pad_id = policy.model, policy.tokenizer.pad_token_id
    if objective.needs_teacher and teacher is None:
        raise ValueError(f"objective {objective.name!r} needs a teacher context (objective.teacher.sources)")
    if objective.needs_teacher and cfg.episodes:
        raise ValueError(
            f"objective {objective.name!r} (self-distillation) cannot train multi-turn episodes (tools or "
            "environment.factory): its teacher re-reads the completion under another prompt, which an episode's "
            "tool turns do not follow; use grpo"
        )
    teacher = teacher if objective.needs_teacher else None
    data, stats = build_training_set(policy, rollouts, rewards, cfg, objective.token_signal, teacher, answers)
    if not data.prompts:
        return {**stats, "policy/steps": 0.0}
    model.eval()  # no dropout in the tiny model; eval keeps pi_old and pi_theta computed identically
    old, mismatch = old_logprobs(model, data, rollouts, cfg, pad_id, engine_is_trainer)  # before the update
    stats.update(mismatch)
    ref = frozen_logprobs(reference, data.prompts, data.completions, cfg, pad_id) if objective.needs_reference else None
    generator = torch.Generator().manual_seed(seed)
    sums: dict[str, float] = defaultdict(float)
    steps, size, mode = 0, cfg.optim.minibatch_size, cfg.policy.shared_prefix
    for _ in range(cfg.optim.epochs):
        for idx in epoch_minibatches(len(data.prompts), cfg.rollout.group_size, size, mode, generator):
            if ranks is None:
                loss, step_stats, _ = minibatch_loss(model, model, objective, data, idx, old, ref, cfg, pad_id)
            else:
                loss, step_stats = ranks.share_loss(model, objective, data, idx, old, ref, cfg, pad_id)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # DDP (ranks): the all-reduce leaves the global gradient on every rank
            trained = [
                p for group in optimizer.param_groups for p in group["params"]
            ]  # LoRA: adapters only (frozen base grads never count)
            grad_norm = torch.nn.utils.clip_grad_norm_(trained, cfg.optim.grad_clip)
            optimizer.step()
            for key, value in {**step_stats, "policy/grad_norm": float(grad_norm)}.items():
                sums[key] += value
            steps += 1
    means = {k: v / steps for k, v in sums.items()}
    return {**stats, **(ranks.mean_stats(means) if ranks is not None else means), "policy/steps": float(steps)}


def minibatch_loss(
    model: PreTrainedModel,
    forward: torch.nn.Module,
    objective: Objective,
    data: TrainingSet,
    idx: list[int],
    old: list[Tensor],
    ref: list[Tensor] | None,
    cfg: Config,
    pad_id: int,
) -> tuple[Tensor, dict[str, float], PolicyBatch]:
    """The objective's loss and stats on training rows `idx`, and the batch it read. `forward` runs
    the pass with grad (the model itself, or its DDP wrapper); the no-grad teacher pass uses `model`.
    The single-process update and every rank of the distributed one (coevo/update/distributed.py)
    call this, so the objective math exists once."""
    completions, prompts, share = (
        [data.completions[i] for i in idx],
        [data.prompts[i] for i in idx],
        shares(cfg.policy.shared_prefix),
    )
    masks = [data.policy_masks[i] for i in idx] if data.policy_masks else None
    packed = pack(prompts, completions, pad_id, model.device, share, masks)
    width = packed.completion_mask.size(1)
    logprobs, distributions = student_view(
        forward, packed, objective, cfg.sampling.temperature
    )  # [b, T], [b, T, V] | None
    teacher, reused = None, None
    if data.teacher_prompts is not None and distributions is not None:  # a teacher implies the student's distributions
        teachers = [data.teacher_prompts[i] for i in idx]
        *teacher, reused = teacher_view(
            model, teachers, prompts, completions, distributions, packed, pad_id, cfg.sampling.temperature, share
        )
    batch = PolicyBatch(
        logprobs=logprobs,  # [b, T]
        old_logprobs=_pad([old[i] for i in idx], width, model.device),  # [b, T]
        sampling_logprobs=_pad([data.sampling_logprobs[i] for i in idx], width, model.device),  # [b, T]
        advantages=data.advantages[idx].to(model.device),  # [b]
        mask=packed.loss_mask,  # [b, T] the policy's tokens
        ref_logprobs=_pad([ref[i] for i in idx], width, model.device) if ref is not None else None,
        max_len=cfg.environment.max_tokens if cfg.episodes else cfg.sampling.max_new_tokens,
        distributions=distributions if objective.needs_distributions else None,
        teacher_distributions=teacher[0] if teacher is not None else None,  # [b, T, V]
        teacher_logprobs=teacher[1] if teacher is not None else None,  # [b, T]
        passed=data.passed[idx].to(model.device),  # [b]
    )
    loss, step_stats = objective.loss(batch)
    if reused is not None:
        step_stats["policy/teacher_reused_frac"] = reused
    return loss, step_stats, batch


def student_view(
    model: PreTrainedModel, packed: PackedBatch, objective: Objective, temperature: float
) -> tuple[Tensor, Tensor | None]:
    """The trainer's logprobs of the sampled tokens (with grad) and, when the objective reads whole
    distributions or a teacher, its log-distributions over the vocabulary."""
    if not (objective.needs_distributions or objective.needs_teacher):
        return completion_logprobs(model, packed, temperature), None
    distributions = completion_distributions(model, packed, temperature)  # [b, T, V]
    return sampled_logprobs(distributions, packed), distributions


def build_optimizer(model: PreTrainedModel, cfg: Config) -> torch.optim.Optimizer:
    """AdamW over the trainable parameters: all of them, or a LoRA model's adapters (at policy.lora.lr)."""
    from coevo.model.lora import is_lora

    lr = (cfg.policy.lora.lr or cfg.optim.lr) if is_lora(model) else cfg.optim.lr
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(params, lr=lr, betas=cfg.optim.betas, weight_decay=cfg.optim.weight_decay)
