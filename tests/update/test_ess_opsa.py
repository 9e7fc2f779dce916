"""ESS-adaptive objective and OPSA's entropy-adaptive negative advantages, by hand."""

import math

import pytest
import torch
from torch.testing import assert_close

from coevo.config import ObjectiveConfig
from coevo.update.objectives import (
    GRPO,
    OPSA,
    ESSAdaptive,
    PolicyBatch,
    effective_sample_size,
    token_entropy,
)

F64 = torch.float64


# ---- ESS ----
def test_ess_of_uniform_ratios_is_one_whatever_their_value():
    mask = torch.ones(2, 2, dtype=F64)
    assert effective_sample_size(torch.full((2, 2), 2.0, dtype=F64), mask).item() == pytest.approx(1.0)
    assert effective_sample_size(torch.full((2, 2), 0.3, dtype=F64), mask).item() == pytest.approx(1.0)


def test_ess_falls_as_ratios_concentrate():
    mask = torch.ones(1, 4, dtype=F64)
    # [1, 1, 1, 5]: (8)^2 / (4 * 28) = 4/7; [1, 0, 0, 0]: 1 / (4 * 1) = 1/4 = 1/N, the floor
    spread = effective_sample_size(torch.tensor([[1.0, 1.0, 1.0, 5.0]], dtype=F64), mask).item()
    peaked = effective_sample_size(torch.tensor([[1.0, 0.0, 0.0, 0.0]], dtype=F64), mask).item()
    assert spread == pytest.approx(4 / 7) and peaked == pytest.approx(0.25)
    assert 1.0 > spread > peaked


def test_ess_ignores_padding():
    mask = torch.tensor([[1.0, 1.0, 0.0]], dtype=F64)
    assert effective_sample_size(torch.tensor([[2.0, 2.0, 100.0]], dtype=F64), mask).item() == pytest.approx(1.0)


def ess_batch(ratios, advantages):
    """logprobs = 0 (with grad) and sampling = -log w, so pi_theta / mu = w exactly."""
    w = torch.tensor(ratios, dtype=F64)
    logprobs = torch.zeros_like(w, requires_grad=True)
    return PolicyBatch(
        logprobs=logprobs,
        old_logprobs=torch.zeros_like(w),
        sampling_logprobs=-w.log(),
        advantages=torch.tensor(advantages, dtype=F64),
        mask=torch.ones_like(w),
    )


def test_ess_cap_follows_and_regulariser_strength_is_one_minus_ess():
    batch = ess_batch([[1.0, 1.0, 1.0, 5.0]], [1.0])
    loss, stats = ESSAdaptive(ObjectiveConfig(name="ess")).loss(batch)
    ess = 4 / 7
    cap = 1 + ess
    assert stats["policy/ess"] == pytest.approx(ess) and stats["policy/ess_cap"] == pytest.approx(cap)
    assert stats["policy/ess_capped_frac"] == pytest.approx(0.25)
    loss.backward()
    # per token: score -min(w, cap) * A * logp  -> grad -min(w, cap) * A
    #            regulariser (1 - ess) * 0.5 * (logp - log mu)^2 -> grad (1 - ess) * log w
    weights = torch.tensor([[1.0, 1.0, 1.0, cap]], dtype=F64)
    log_w = torch.tensor([[0.0, 0.0, 0.0, math.log(5.0)]], dtype=F64)
    assert_close(batch.logprobs.grad, (-weights + (1 - ess) * log_w) / 4)


def test_ess_on_policy_is_the_plain_score_function():
    batch = ess_batch([[1.0, 1.0]], [-2.0])
    loss, stats = ESSAdaptive(ObjectiveConfig(name="ess")).loss(batch)
    loss.backward()
    assert stats["policy/ess"] == pytest.approx(1.0)
    assert_close(batch.logprobs.grad, torch.tensor([[2.0, 2.0]], dtype=F64) / 2)  # -w * A / N, no regulariser


# ---- OPSA ----
def test_token_entropy_by_hand():
    dist = torch.tensor([[[0.5, 0.5], [0.9, 0.1]]], dtype=F64).log()
    assert_close(
        token_entropy(dist), torch.tensor([[math.log(2), -(0.9 * math.log(0.9) + 0.1 * math.log(0.1))]], dtype=F64)
    )


def test_opsa_negative_advantage_scales_with_entropy():
    """Against an independent computation: with grpo_weight = 0, OPSA's gradient equals plain GRPO's
    on the same tokens, each made its own sequence with advantage -coef * H_t / mean(H), where H comes
    from torch.distributions and the mean is over the unpadded tokens only. Then the properties the
    method names: the push grows with entropy, and a token of average entropy gets exactly -coef."""
    torch.manual_seed(0)
    logits = (
        torch.randn(2, 3, 4, dtype=F64) * torch.tensor([0.2, 1.0, 3.0], dtype=F64)[None, :, None]
    )  # [B, T, V] flat to peaked
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=F64)  # one padded position
    dist = logits.log_softmax(-1).requires_grad_(True)  # [B, T, V]
    logprobs = dist[..., 0]  # [B, T] the sampled token is token 0
    batch = PolicyBatch(logprobs=logprobs, old_logprobs=logprobs.detach(), sampling_logprobs=logprobs.detach(),
                        advantages=torch.tensor([5.0, -5.0], dtype=F64), mask=mask, distributions=dist)  # fmt: skip
    loss, stats = OPSA(ObjectiveConfig(name="opsa", opsa_coef=0.3, grpo_weight=0.0)).loss(batch)
    (opsa_grad,) = torch.autograd.grad(loss, logprobs)  # [B, T]

    valid = mask.bool()
    h = torch.distributions.Categorical(logits=logits[valid]).entropy()  # [N] entropies of the 5 real tokens
    flat = logits[valid].log_softmax(-1)[:, :1].requires_grad_(True)  # [N, 1] one token per sequence
    reference = PolicyBatch(logprobs=flat, old_logprobs=flat.detach(), sampling_logprobs=flat.detach(),
                            advantages=-0.3 * h / h.mean(), mask=torch.ones_like(flat))  # fmt: skip
    grpo_loss, _ = GRPO(ObjectiveConfig(name="grpo")).loss(reference)
    (grpo_grad,) = torch.autograd.grad(grpo_loss, flat)  # [N, 1]
    assert_close(opsa_grad[valid], grpo_grad[:, 0])
    assert opsa_grad[1, 2] == 0  # padding gets no push

    push = opsa_grad[valid]  # [N] d loss / d logprob = how hard each sampled token is pushed down
    assert (push > 0).all()
    order = h.argsort()
    assert (push[order].diff() > 0).all()  # strictly more push at every higher-entropy position
    assert stats["policy/negative_adv_mean"] == pytest.approx(-0.3)  # a token of average entropy: -opsa_coef
    assert push.sum().item() == pytest.approx(0.3)  # sum_t coef * H_t / mean(H) = coef * N, token-mean divides by N
