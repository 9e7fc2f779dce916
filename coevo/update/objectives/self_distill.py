"""On-policy self-distillation: the student samples, the same model given privileged context scores.

Method: on-policy self-distillation. The student's completions were sampled under the plain prompt.
The self-teacher is the *same* model with privileged context placed before the question (the
reference answer, the verifier's feedback, or the co-evolver's retrieved memory or skills; see
`objective.teacher.sources`). One teacher forward pass per minibatch, under `torch.no_grad`, over the rows
whose teacher prompt differs from the student's (the others reuse the student's detached distribution:
the same model on the same tokens; coevo/update/prefix.py), gives the
teacher's distribution over the vocabulary at every position of the student's completion; the loss is
a per-token divergence between the two distributions on the student's own support:

    reverse (default)  D_t = sum_v p_s(v) (log p_s(v) - log p_t(v))      KL(student || teacher)
    forward            D_t = sum_v p_t(v) (log p_t(v) - log p_s(v))      KL(teacher || student)

Both are exact over the vocabulary (no sampled estimate), which costs a [B, T, V] tensor per
minibatch: cheap for the tiny default; for large vocabularies lower `optim.minibatch_size`.

Three objectives share this machinery:
- "opsd": grpo_weight * GRPO + coef * D. grpo_weight = 0 is pure OPSD/SDPO (003 lines 10, 91);
  PMD (000 abstract 1) is opsd with `teacher.sources: [coevolver]` and `coevolver.kind: memory`.
- "rlsd" (003 line 10): RL sets the direction, the teacher only the magnitude. Each token's
  advantage is A * w_t with w_t = min(exp(sign(A) * (log p_t(y_t) - log p_s(y_t))), magnitude_cap),
  renormalised to mean 1 over the sequence's tokens, so the sequence's total push is GRPO's and only
  its distribution over tokens follows the teacher: on a correct sample the tokens the teacher
  endorses more move most, on a wrong one the tokens the teacher rejects.
- "sdar" (003 line 62): GRPO stays the primary objective; distillation is an auxiliary term gated per
  token by g_t = sigmoid((log p_t(y_t) - log p_s(y_t)) / gate_temperature) (detached), strong where
  the teacher endorses the sampled token and soft where it rejects it: GRPO + coef * g_t * D_t.

`teacher.apply_to` restricts the distillation signal to verified-correct sequences ("correct",
compression, 003 line 113) or to incorrect ones ("incorrect", correction); other sequences keep the
GRPO term only (rlsd: weight 1).

Choices where the abstracts are silent: the teacher is the current weights (synchronised with the
student at every minibatch, as Skill-SD does, 003 line 49), not a lagged copy; the divergence is exact
over the vocabulary; rlsd's magnitude is a capped exponential of the teacher-student logprob gap;
sdar's gate reads the same gap. Zero-variance groups are kept in the batch (`token_signal`): their
GRPO advantage is 0, but the teacher still has something to say about them.
"""

from __future__ import annotations

import torch
from torch import Tensor

from coevo.config import ObjectiveConfig
from coevo.update.objectives.base import PolicyBatch
from coevo.update.objectives.grpo import GRPO, token_mean
from coevo.update.objectives.kl import aggregate
from coevo.update.objectives.registry import register_objective


def divergence_per_token(batch: PolicyBatch, kind: str) -> Tensor:
    """Exact per-position divergence [B, T] between the student (with grad) and the detached teacher."""
    if batch.distributions is None or batch.teacher_distributions is None:
        raise ValueError("self-distillation needs batch.distributions and batch.teacher_distributions")
    student, teacher = batch.distributions, batch.teacher_distributions.detach()  # [B, T, V]
    if kind == "reverse":
        return (student.exp() * (student - teacher)).sum(-1)  # [B, T]
    if kind == "forward":
        return (teacher.exp() * (teacher - student)).sum(-1)  # [B, T]
    raise ValueError(f"unknown divergence {kind!r}; known: reverse, forward")


def teacher_gap(batch: PolicyBatch) -> Tensor:
    """log p_teacher(y_t) - log p_student(y_t) of the sampled tokens [B, T], detached."""
    if batch.teacher_logprobs is None:
        raise ValueError("self-distillation needs batch.teacher_logprobs")
    return (batch.teacher_logprobs - batch.logprobs).detach()  # [B, T]


def distill_mask(batch: PolicyBatch, apply_to: str) -> Tensor:
    """batch.mask [B, T] restricted to the sequences `teacher.apply_to` selects."""
    if apply_to == "all":
        return batch.mask
    if batch.passed is None:
        raise ValueError(f"teacher.apply_to={apply_to!r} needs batch.passed")
    chosen = batch.passed if apply_to == "correct" else ~batch.passed  # [B]
    return batch.mask * chosen.to(batch.mask.dtype)[:, None]  # [B, T]


class SelfDistillation:
    """Shared flags and the GRPO term of the self-distillation objectives."""

    name: str
    needs_distributions = True
    needs_teacher = True
    token_signal = True

    def __init__(self, cfg: ObjectiveConfig) -> None:
        self.cfg = cfg
        self.teacher = cfg.teacher
        self.grpo = GRPO(cfg)
        self.needs_reference = self.grpo.needs_reference
        # The distillation term is aggregated over apply_to's tokens, the GRPO term over all: only
        # with "all" do both share one normaliser, so that ranks' shares scale exactly (kl.shard_weight).
        self.shardable = cfg.teacher.apply_to == "all"

    def distill_stats(self, batch: PolicyBatch, divergence: Tensor, mask: Tensor) -> dict[str, float]:
        return {
            "policy/distill_divergence": token_mean(divergence, batch.mask),
            "policy/distill_token_frac": token_mean(mask, batch.mask),
            "policy/teacher_gap": token_mean(teacher_gap(batch), batch.mask),
        }


@register_objective("opsd")
class OPSD(SelfDistillation):
    """grpo_weight * GRPO + coef * D (D aggregated over the tokens `apply_to` selects)."""

    def loss(self, batch: PolicyBatch) -> tuple[Tensor, dict[str, float]]:
        grpo_loss, stats = self.grpo.loss(batch)
        divergence = divergence_per_token(batch, self.teacher.divergence)  # [B, T]
        mask = distill_mask(batch, self.teacher.apply_to)  # [B, T]
        distill = aggregate(divergence, mask, self.cfg.aggregation, batch.max_len)
        loss = self.cfg.grpo_weight * grpo_loss + self.teacher.coef * distill
        stats.update(self.distill_stats(batch, divergence, mask))
        stats.update({"policy/distill_loss": distill.item(), "policy/loss": loss.item()})
        return loss, stats


@register_objective("sdar")
class SDAR(SelfDistillation):
    """GRPO + coef * sigmoid(gap / temperature) * D: distillation gated by the teacher's endorsement."""

    def loss(self, batch: PolicyBatch) -> tuple[Tensor, dict[str, float]]:
        grpo_loss, stats = self.grpo.loss(batch)
        divergence = divergence_per_token(batch, self.teacher.divergence)  # [B, T]
        gate = torch.sigmoid(teacher_gap(batch) / self.teacher.gate_temperature)  # [B, T] detached
        mask = distill_mask(batch, self.teacher.apply_to)  # [B, T]
        distill = aggregate(gate * divergence, mask, self.cfg.aggregation, batch.max_len)
        loss = grpo_loss + self.teacher.coef * distill
        stats.update(self.distill_stats(batch, divergence, mask))
        stats.update(
            {
                "policy/gate_mean": token_mean(gate, mask),
                "policy/distill_loss": distill.item(),
                "policy/loss": loss.item(),
            }
        )
        return loss, stats


@register_objective("rlsd")
class RLSD(SelfDistillation):
    """GRPO with per-token advantages A * w_t: direction from the reward, magnitude from the teacher."""

    needs_distributions = False  # only the teacher's logprobs of the sampled tokens are read

    def __init__(self, cfg: ObjectiveConfig) -> None:
        super().__init__(cfg)
        self.shardable = True  # apply_to only shapes each sequence's magnitudes; the loss is GRPO's aggregate

    def loss(self, batch: PolicyBatch) -> tuple[Tensor, dict[str, float]]:
        weights = self.magnitudes(batch)  # [B, T]
        loss, stats = self.grpo.token_loss(batch, batch.advantages[:, None] * weights)
        stats.update(
            {
                "policy/teacher_gap": token_mean(teacher_gap(batch), batch.mask),
                "policy/magnitude_max": float(weights.max()),
            }
        )
        return loss, stats

    def magnitudes(self, batch: PolicyBatch) -> Tensor:
        """w_t [B, T]: capped exp(sign(A) * gap), mean 1 over each selected sequence's tokens, 1 elsewhere."""
        direction = torch.sign(batch.advantages.detach())[:, None]  # [B, 1]
        raw = torch.exp(direction * teacher_gap(batch)).clamp(max=self.teacher.magnitude_cap)  # [B, T]
        mask = distill_mask(batch, self.teacher.apply_to)  # [B, T]
        mean = (raw * mask).sum(1, keepdim=True) / mask.sum(1, keepdim=True).clamp(min=1.0)  # [B, 1]
        selected = mask.sum(1, keepdim=True) > 0  # [B, 1]
        return torch.where(selected, raw / mean.clamp(min=1e-12), torch.ones_like(raw))  # [B, T]
