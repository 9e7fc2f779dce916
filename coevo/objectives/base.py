"""The batch every policy-update objective consumes, and the Objective Protocol.

A `PolicyBatch` holds per-token logprobs of the sampled completion tokens, padded to one length T,
under four views: the trainer now (with grad), the trainer before this iteration's first optimizer
step, the generation engine that sampled, and (optionally) a frozen reference model. Objectives turn
it into a scalar loss plus `policy/`-namespaced float stats.
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

    def __post_init__(self) -> None:
        """Reject mismatched shapes early: a [B] vs [B, T] mix-up would otherwise broadcast silently."""
        shape = tuple(self.logprobs.shape)
        if len(shape) != 2:
            raise ValueError(f"PolicyBatch.logprobs must be [B, T], got {shape}")
        named = {"old_logprobs": self.old_logprobs, "sampling_logprobs": self.sampling_logprobs, "mask": self.mask}
        if self.ref_logprobs is not None:
            named["ref_logprobs"] = self.ref_logprobs
        for key, tensor in named.items():
            if tuple(tensor.shape) != shape:
                raise ValueError(f"PolicyBatch.{key} must be {shape} like logprobs, got {tuple(tensor.shape)}")
        if tuple(self.advantages.shape) != shape[:1]:
            raise ValueError(f"PolicyBatch.advantages must be [{shape[0]}], got {tuple(self.advantages.shape)}")


@runtime_checkable
class Objective(Protocol):
    """A policy-update loss, chosen by name from `coevo.objectives.registry`."""

    name: str
    needs_reference: bool  # True when a reference model's logprobs are required

    def loss(self, batch: PolicyBatch) -> tuple[Tensor, dict[str, float]]:
        """Scalar loss to minimise (with grad through batch.logprobs) and `policy/...` float stats."""
        ...
