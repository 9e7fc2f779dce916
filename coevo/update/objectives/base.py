"""The batch every policy-update objective consumes, and the Objective Protocol.

A `PolicyBatch` holds per-token logprobs of the sampled completion tokens, padded to one length T,
under four views: the trainer now (with grad), the trainer before this iteration's first optimizer
step, the generation engine that sampled, and (optionally) a frozen reference model. Objectives that
look at whole distributions (self-distillation, entropy-adaptive advantages) also get the trainer's
log-distribution over the vocabulary at every completion position, and self-distillation gets the
self-teacher's (the same model given privileged context, computed without grad). Objectives turn it
into a scalar loss plus `policy/`-namespaced float stats.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from torch import Tensor


@dataclass
class PolicyBatch:
    """Per-token logprobs of B sampled completions, padded to T tokens, and one advantage each."""

    logprobs: Tensor  # [B, T] trainer logprobs of the sampled tokens, WITH grad
    old_logprobs: Tensor  # [B, T] trainer logprobs before this iteration's first optimizer step (detached)
    sampling_logprobs: Tensor  # [B, T] the engine's logprobs of the same tokens (other context / numerics)
    advantages: Tensor  # [B] one advantage per sequence
    mask: Tensor  # [B, T] float 1.0 on completion tokens, 0.0 on padding
    ref_logprobs: Tensor | None = None  # [B, T] frozen reference logprobs (needed iff kl_coef > 0)
    max_len: int | None = None  # normaliser of seq-mean-token-sum-norm (Dr.GRPO); None -> T
    distributions: Tensor | None = None  # [B, T, V] trainer log-probs over the vocabulary, WITH grad
    teacher_distributions: Tensor | None = None  # [B, T, V] self-teacher log-probs (privileged context), detached
    teacher_logprobs: Tensor | None = None  # [B, T] self-teacher logprobs of the sampled tokens, detached
    passed: Tensor | None = None  # [B] bool: the verifier passed the sequence

    def __post_init__(self) -> None:
        """Reject mismatched shapes early: a [B] vs [B, T] mix-up would otherwise broadcast silently."""
        shape = tuple(self.logprobs.shape)
        if len(shape) != 2:
            raise ValueError(f"PolicyBatch.logprobs must be [B, T], got {shape}")
        named = {"old_logprobs": self.old_logprobs, "sampling_logprobs": self.sampling_logprobs, "mask": self.mask}
        optional = {"ref_logprobs": self.ref_logprobs, "teacher_logprobs": self.teacher_logprobs}
        named.update({key: tensor for key, tensor in optional.items() if tensor is not None})
        for key, tensor in named.items():
            if tuple(tensor.shape) != shape:
                raise ValueError(f"PolicyBatch.{key} must be {shape} like logprobs, got {tuple(tensor.shape)}")
        for key, tensor in {
            "distributions": self.distributions,
            "teacher_distributions": self.teacher_distributions,
        }.items():
            if tensor is not None and tuple(tensor.shape[:2]) != shape:
                raise ValueError(f"PolicyBatch.{key} must be {shape} + (V,), got {tuple(tensor.shape)}")
        for key, tensor in {"advantages": self.advantages, "passed": self.passed}.items():
            if tensor is not None and tuple(tensor.shape) != shape[:1]:
                raise ValueError(f"PolicyBatch.{key} must be [{shape[0]}], got {tuple(tensor.shape)}")


@runtime_checkable
class Objective(Protocol):
    """A policy-update loss, chosen by name from `coevo.update.objectives.registry`."""

    name: str
    needs_reference: bool  # True when a reference model's logprobs are required
    needs_distributions: bool  # True when batch.distributions (the trainer's full vocabulary) is required
    needs_teacher: bool  # True when the self-teacher's view (teacher_distributions, teacher_logprobs) is required
    token_signal: bool  # True when tokens carry signal beyond the group advantage, so zero-variance groups are kept

    def loss(self, batch: PolicyBatch) -> tuple[Tensor, dict[str, float]]:
        """Scalar loss to minimise (with grad through batch.logprobs) and `policy/...` float stats."""
        ...
