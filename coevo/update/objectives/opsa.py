"""On-policy self-adaptation (OPSA): entropy-adaptive negative advantages, no teacher (003 line 2).

Method. The abstract finds on-policy distillation works mostly by suppressing low-probability
tokens, which a single fixed negative advantage does as well as a teacher, and proposes assigning
that negative signal more strongly at high-entropy positions. Per token of the student's sample:

    H_t  = -sum_v p(v) log p(v)            the trainer's entropy at the position (detached)
    a_t  = grpo_weight * A - opsa_coef * H_t / mean(H)

where mean(H) is the mean over the minibatch's masked tokens, so opsa_coef is the negative advantage
of a token of average entropy. a_t goes through GRPO's clipped, TIS-weighted surrogate. Pushing a
sampled token down moves its mass to the other tokens in proportion to their probability, so at a
high-entropy position the tail token sampled loses most and the head tokens share what it loses.

Choices where the abstract is silent: the entropy normaliser is the batch mean (scale-free across
models and temperatures); the outcome advantage is kept beside it by default (grpo_weight = 1; 0
gives the supervision-free method of the paper); zero-variance groups are kept in the batch, since
the entropy term is a signal on them too.
"""

from __future__ import annotations

from torch import Tensor

from coevo.update.objectives.base import PolicyBatch
from coevo.update.objectives.grpo import GRPO, token_mean
from coevo.update.objectives.registry import register_objective


def token_entropy(distributions: Tensor) -> Tensor:
    """Entropy [B, T] of log-distributions [B, T, V], detached."""
    logp = distributions.detach()
    return -(logp.exp() * logp).sum(-1)


@register_objective("opsa")
class OPSA(GRPO):
    needs_distributions = True
    token_signal = True
    shardable = False  # mean(H) is a statistic of the whole minibatch: a rank's share would see its own

    def loss(self, batch: PolicyBatch) -> tuple[Tensor, dict[str, float]]:
        if batch.distributions is None:
            raise ValueError("opsa needs batch.distributions (the trainer's log-distribution per position)")
        entropy = token_entropy(batch.distributions)  # [B, T]
        mean_entropy = (entropy * batch.mask).sum() / batch.mask.sum().clamp(min=1.0)
        negative = self.cfg.opsa_coef * entropy / mean_entropy.clamp(min=1e-8)  # [B, T]
        advantages = self.cfg.grpo_weight * batch.advantages[:, None] - negative  # [B, T]
        loss, stats = self.token_loss(batch, advantages)
        stats.update(
            {
                "policy/entropy": token_mean(entropy, batch.mask),
                "policy/negative_adv_mean": -token_mean(negative, batch.mask),
            }
        )
        return loss, stats
