"""GRPO-family policy loss: clipped surrogate with DAPO clip-higher, Dr.GRPO options and truncated IS.

Method. Each problem's G completions share one outcome reward each; `group_advantages` turns them
into one advantage A per sequence (group mean subtracted, optionally divided by the group std). The
per-token loss is PPO's clipped surrogate with asymmetric bounds, weighted by a truncated importance
weight between the engine that sampled and the trainer, plus an optional KL penalty to a frozen
reference:

    tis   = min(pi_old / pi_sampler, tis_cap)                  (detached)
    ratio = pi_theta / pi_old
    pg    = -min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A) * tis
    loss  = aggregate(pg + kl_coef * KL_est(pi_theta || pi_ref), mask)

Sources.
- GRPO: Shao et al. 2024, "DeepSeekMath: Pushing the limits of mathematical reasoning in open
  language models" (group-relative advantages, no value model, k3 KL penalty in the loss).
- DAPO: Yu et al. 2025, "DAPO: An open-source LLM reinforcement learning system at scale"
  (clip-higher: clip_high > clip_low; token-level loss; dynamic sampling of informative groups).
- Dr.GRPO: Liu et al. 2025, "Understanding R1-Zero-like training: a critical perspective"
  (no std normalisation, no per-sequence length normalisation: divide by a constant max length).
- TIS: Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy RL training"
  (truncated importance weight min(pi_trainer / pi_sampler, C) per token).
- KL estimators: Schulman 2020, "Approximating KL divergence" (k1, k2, k3; see kl.py).

Zero-variance groups (all G rewards equal) carry no signal. This objective does NOT filter them: the
caller drops them with `nonzero_variance_groups(rewards)` before building the PolicyBatch (when
`cfg.drop_zero_variance`). Their advantages are zero anyway, so left in they only dilute the mean.

Departures from the papers.
1. Defaults follow DAPO rather than GRPO: token-mean aggregation and kl_coef = 0 (no reference model).
   GRPO's per-sequence mean is `aggregation="seq-mean-token-mean"`, its KL is `kl_coef > 0, "k3"`.
2. DAPO's dynamic sampling re-samples until the batch is full of informative groups; that is the
   rollout stage's `rollout.dynamic_sampling` (coevo/rollout/dynamic.py). Without it the caller only
   drops zero-variance groups, so the batch shrinks instead.
3. Dr.GRPO divides by the generation budget; we use `batch.max_len` and fall back to the padded
   length T of the batch when it is None (then the normaliser varies between batches).
4. The TIS weight uses pi_old (the trainer before this iteration's first step) as the trainer side,
   so it is constant across the epochs/minibatches of one iteration. Besides engine numerics it also
   absorbs the context shift when rollouts sampled with skills in the prompt are trained without
   them (`coevolver.update_context="strip"`), a use the TIS paper does not consider. It is capped
   above only, as in the paper; tokens the sampler liked much more than the trainer are down-weighted.
5. The KL term is neither clipped nor TIS-weighted, and its estimators assume samples from pi_theta
   while the tokens come from the sampler; with several optimizer steps per batch it is therefore a
   slightly biased estimate (as in GRPO's own multi-step implementation).
6. Only outcome rewards: one advantage per sequence, broadcast over its tokens (GRPO's process
   supervision variant is not implemented).
"""

from __future__ import annotations

import torch
from torch import Tensor

from coevo.config import ObjectiveConfig
from coevo.update.objectives.base import PolicyBatch
from coevo.update.objectives.kl import aggregate, reference_kl
from coevo.update.objectives.registry import register_objective


@register_objective("grpo")
class GRPO:
    """GRPO / DAPO / Dr.GRPO loss with truncated importance sampling; variants are config values.

    `token_loss` takes per-token advantages, so objectives that reshape the advantage token by token
    (rlsd, opsa) reuse the same clipped, TIS-weighted surrogate and KL penalty.
    """

    name: str
    needs_distributions = False
    needs_teacher = False
    token_signal = False
    # one aggregate over the minibatch: ranks holding shares of it scale their losses exactly (kl.shard_weight)
    shardable = True

    def __init__(self, cfg: ObjectiveConfig) -> None:
        self.cfg = cfg
        self.needs_reference = cfg.kl_coef > 0

    def loss(self, batch: PolicyBatch) -> tuple[Tensor, dict[str, float]]:
        """Aggregated per-token loss (grad through batch.logprobs only) and `policy/` stats."""
        return self.token_loss(batch, batch.advantages[:, None].expand_as(batch.logprobs))

    def token_loss(self, batch: PolicyBatch, advantages: Tensor) -> tuple[Tensor, dict[str, float]]:
        """The clipped surrogate with per-token `advantages` [B, T] (detached here) plus the KL penalty."""
        cfg = self.cfg
        raw_tis = torch.exp(batch.old_logprobs - batch.sampling_logprobs).detach()  # [B, T]
        tis = raw_tis.clamp(max=cfg.tis_cap)  # [B, T]
        ratio = torch.exp(batch.logprobs - batch.old_logprobs.detach())  # [B, T]
        adv = advantages.detach()  # [B, T]
        clipped = ratio.clamp(1.0 - cfg.clip_low, 1.0 + cfg.clip_high)  # [B, T]
        pg = -torch.minimum(ratio * adv, clipped * adv) * tis  # [B, T]

        kl = (
            reference_kl(batch.logprobs, batch.ref_logprobs, cfg.kl_estimator)
            if self.needs_reference
            else torch.zeros_like(pg)
        )  # [B, T]

        pg_loss = aggregate(pg, batch.mask, cfg.aggregation, batch.max_len)
        kl_loss = aggregate(kl, batch.mask, cfg.aggregation, batch.max_len)
        loss = pg_loss + cfg.kl_coef * kl_loss  # == aggregate(pg + kl_coef * kl): aggregation is linear
        stats = self._stats(batch, ratio, adv, raw_tis, tis)
        stats.update({"policy/pg_loss": pg_loss.item(), "policy/kl": kl_loss.item(), "policy/loss": loss.item()})
        return loss, stats

    @torch.no_grad()
    def _stats(self, batch: PolicyBatch, ratio: Tensor, adv: Tensor, raw_tis: Tensor, tis: Tensor) -> dict[str, float]:
        """Shares and means over the masked tokens (token-mean, whatever the loss aggregation)."""
        cfg = self.cfg
        clip_low = ((adv < 0) & (ratio < 1.0 - cfg.clip_low)).to(ratio.dtype)  # [B, T] grad zeroed below
        clip_high = ((adv > 0) & (ratio > 1.0 + cfg.clip_high)).to(ratio.dtype)  # [B, T] grad zeroed above
        tis_clipped = (raw_tis > cfg.tis_cap).to(ratio.dtype)  # [B, T]
        return {
            "policy/ratio_mean": token_mean(ratio, batch.mask),
            "policy/clip_frac_low": token_mean(clip_low, batch.mask),
            "policy/clip_frac_high": token_mean(clip_high, batch.mask),
            "policy/tis_mean": token_mean(tis, batch.mask),
            "policy/tis_clipped_frac": token_mean(tis_clipped, batch.mask),
        }


def token_mean(values: Tensor, mask: Tensor) -> float:
    """Mean of `values` [B, T] over the masked tokens, as a float for stats."""
    return aggregate(values.detach(), mask, "token-mean").item()
