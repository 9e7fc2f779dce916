"""Per-token KL estimators (Schulman 2020) and the reductions of per-token losses to a scalar.

Estimators of KL(pi || ref) from tokens sampled from pi, with log_r = ref_logprobs - logprobs:
  k1 = -log_r                    unbiased, high variance, can be negative per token
  k2 = 0.5 * log_r**2            biased (low for small divergences), low variance, >= 0
  k3 = exp(log_r) - 1 - log_r    unbiased, low variance, >= 0 (GRPO's choice)

Aggregations (per_token [B, T], mask [B, T] -> scalar):
  token-mean               sum(x * m) / sum(m)                 every token weighs the same (DAPO)
  seq-mean-token-mean      mean_b(sum_t x*m / sum_t m)         every sequence weighs the same (GRPO)
  seq-mean-token-sum-norm  sum(x * m) / (B * (max_len or T))   a constant normaliser (Dr.GRPO)
A batch with no tokens reduces to 0 rather than NaN; seq-mean-token-mean skips empty sequences.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor


def _k1(log_r: Tensor) -> Tensor:
    return -log_r


def _k2(log_r: Tensor) -> Tensor:
    return 0.5 * log_r.pow(2)


def _k3(log_r: Tensor) -> Tensor:
    return torch.exp(log_r) - 1.0 - log_r


KL_ESTIMATORS: dict[str, Callable[[Tensor], Tensor]] = {"k1": _k1, "k2": _k2, "k3": _k3}


def kl_per_token(logprobs: Tensor, ref_logprobs: Tensor, estimator: str) -> Tensor:
    """Per-token estimate of KL(pi || ref) [B, T] by Schulman's `estimator` ("k1", "k2" or "k3")."""
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"unknown KL estimator {estimator!r}; known: {sorted(KL_ESTIMATORS)}")
    log_r = ref_logprobs - logprobs  # [B, T]
    return KL_ESTIMATORS[estimator](log_r)  # [B, T]


def _token_mean(per_token: Tensor, mask: Tensor, max_len: int | None) -> Tensor:
    return (per_token * mask).sum() / mask.sum().clamp(min=1.0)


def _seq_mean_token_mean(per_token: Tensor, mask: Tensor, max_len: int | None) -> Tensor:
    seq_lens = mask.sum(dim=1)  # [B]
    seq_means = (per_token * mask).sum(dim=1) / seq_lens.clamp(min=1.0)  # [B]
    has_tokens = (seq_lens > 0).to(per_token.dtype)  # [B]
    return (seq_means * has_tokens).sum() / has_tokens.sum().clamp(min=1.0)


def _seq_mean_token_sum_norm(per_token: Tensor, mask: Tensor, max_len: int | None) -> Tensor:
    batch, length = per_token.shape
    norm = length if max_len is None else max_len
    if norm < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    return (per_token * mask).sum() / (batch * norm)


AGGREGATIONS: dict[str, Callable[[Tensor, Tensor, int | None], Tensor]] = {
    "token-mean": _token_mean,
    "seq-mean-token-mean": _seq_mean_token_mean,
    "seq-mean-token-sum-norm": _seq_mean_token_sum_norm,
}


def aggregate(per_token: Tensor, mask: Tensor, mode: str, max_len: int | None = None) -> Tensor:
    """Reduce per-token values [B, T] over the tokens where mask [B, T] is 1 to a scalar by `mode`."""
    if mode not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {mode!r}; known: {sorted(AGGREGATIONS)}")
    return AGGREGATIONS[mode](per_token, mask, max_len)


def shard_weight(mask: Tensor, mode: str) -> Tensor:
    """How much of a minibatch one shard [B, T] of it holds under aggregation `mode`: its masked
    tokens (token-mean), its sequences with tokens (seq-mean-token-mean) or its rows
    (seq-mean-token-sum-norm with a fixed max_len). `aggregate` over the whole minibatch equals the
    sum over its shards of aggregate(shard) * shard_weight(shard) / sum of the shards' weights, for
    every mode: the distributed update (coevo/update/distributed.py) scales each rank's loss so."""
    if mode == "token-mean":
        return mask.sum()
    if mode == "seq-mean-token-mean":
        return (mask.sum(dim=1) > 0).to(mask.dtype).sum()
    if mode == "seq-mean-token-sum-norm":
        return torch.tensor(float(mask.size(0)), dtype=mask.dtype, device=mask.device)
    raise ValueError(f"unknown aggregation {mode!r}; known: {sorted(AGGREGATIONS)}")


def reference_kl(logprobs: Tensor, ref_logprobs: Tensor | None, estimator: str) -> Tensor:
    """Per-token KL(pi || ref) [B, T] for a penalty with kl_coef > 0; the reference's logprobs must be there."""
    if ref_logprobs is None:
        raise ValueError("objective.kl_coef > 0 needs batch.ref_logprobs (a reference model's logprobs)")
    return kl_per_token(logprobs, ref_logprobs.detach(), estimator)
