"""ESS-adaptive objective: the batch's own ratio statistics replace the fixed clip (003 line 121).

Method. With w = pi_theta(y_t) / mu(y_t), the ratio between the trainer now and the engine that
sampled (detached), over the N masked tokens of the batch, the normalised effective sample size

    ESS = (sum w)^2 / (N * sum w^2)        in (0, 1]; 1 when every ratio is equal

measures how concentrated the ratios are. The same statistic sets both controls:

    cap      c = 1 + ESS                   the score-function weight is min(w, c)
    strength beta = 1 - ESS                of the off-policy regulariser 0.5 * (log pi_theta - log mu)^2
    loss     = aggregate(-min(w, c) * A * log pi_theta(y_t) + beta * 0.5 * (log pi_theta - log mu)^2)

With near-uniform ratios (on-policy data) ESS is ~1: the weight is the plain importance weight up to
2 and the regulariser vanishes, i.e. the usual on-policy score-function update. When stale or
mismatched data concentrate the ratios, ESS falls: the cap tightens towards 1 and the regulariser
pulls the trainer back towards the sampler. A token whose ratio exceeds the cap keeps the capped
weight, so high-ratio tokens still carry a learning signal (unlike PPO's clip, which zeroes them).

Choices where the abstract is silent: the ratio is taken against the sampling engine (it covers both
the trust-region concern, trainer vs its own past, and the off-policy one, engine numerics and the
skill context `strip` removes); the cap is 1 + ESS and the regulariser a k2 penalty of strength
1 - ESS. No clip_low/clip_high/tis_cap are read; the KL-to-reference penalty still applies when
`kl_coef > 0`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from coevo.update.objectives.base import PolicyBatch
from coevo.update.objectives.grpo import GRPO, token_mean
from coevo.update.objectives.kl import aggregate, reference_kl
from coevo.update.objectives.registry import register_objective


def effective_sample_size(weights: Tensor, mask: Tensor) -> Tensor:
    """Normalised ESS (sum w)^2 / (N sum w^2) of the masked weights [B, T] (a 0-dim tensor; 1 if N = 0)."""
    w = weights.detach() * mask  # [B, T]
    n = mask.sum()
    if n == 0:
        return torch.ones((), dtype=weights.dtype)
    return w.sum().pow(2) / (n * w.pow(2).sum()).clamp(min=torch.finfo(weights.dtype).tiny)


@register_objective("ess")
class ESSAdaptive(GRPO):
    """GRPO's flags and KL penalty setup; its own loss (no clip, no TIS)."""

    shardable = False  # the ESS is a statistic of the whole minibatch: a rank's share would see its own

    def loss(self, batch: PolicyBatch) -> tuple[Tensor, dict[str, float]]:
        cfg = self.cfg
        log_w = batch.logprobs - batch.sampling_logprobs  # [B, T]
        w = torch.exp(log_w).detach()  # [B, T]
        ess = effective_sample_size(w, batch.mask)
        cap = 1.0 + ess
        weight = torch.minimum(w, cap)  # [B, T]
        score = -weight * batch.advantages.detach()[:, None] * batch.logprobs  # [B, T]
        regulariser = (1.0 - ess) * 0.5 * log_w.pow(2)  # [B, T]
        per_token = score + regulariser
        if self.needs_reference:
            per_token = per_token + cfg.kl_coef * reference_kl(batch.logprobs, batch.ref_logprobs, cfg.kl_estimator)
        loss = aggregate(per_token, batch.mask, cfg.aggregation, batch.max_len)
        stats = {
            "policy/ess": float(ess),
            "policy/ess_cap": float(cap),
            "policy/ess_capped_frac": token_mean((w > cap).to(w.dtype), batch.mask),
            "policy/ratio_mean": token_mean(w, batch.mask),
            "policy/loss": loss.item(),
        }
        return loss, stats
