"""ESS-adaptive objective and OPSA's entropy-adaptive negative advantages, by hand."""

import math

import pytest
import torch
from torch.testing import assert_close

from coevo.config import ObjectiveConfig
from coevo.objectives import (
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
    assert_close(token_entropy(dist), torch.tensor([[math.log(2), -(0.9 * math.log(0.9) + 0.1 * math.log(0.1))]], dtype=F64))


def test_opsa_negative_advantage_scales_with_entropy():
    probs = torch.tensor([[[0.5, 0.5], [0.9, 0.1]]], dtype=F64)
    dist = probs.log().requires_grad_(True)
    logprobs = dist[..., 0]
    batch = PolicyBatch(
        logprobs=logprobs,
        old_logprobs=logprobs.detach(),
        sampling_logprobs=logprobs.detach(),
        advantages=torch.tensor([0.0], dtype=F64),
        mask=torch.ones(1, 2, dtype=F64),
        distributions=dist,
    )
    h = [math.log(2), -(0.9 * math.log(0.9) + 0.1 * math.log(0.1))]
    mean_h = sum(h) / 2
    loss, stats = OPSA(ObjectiveConfig(name="opsa", opsa_coef=0.1, grpo_weight=0.0)).loss(batch)
    loss.backward()
    # a_t = -0.1 * H_t / mean(H); at ratio 1 d pg / d logprob = -a_t, token-mean over 2 tokens
    expected = torch.tensor([[0.1 * h[0] / mean_h, 0.1 * h[1] / mean_h]], dtype=F64) / 2
    assert_close(dist.grad[..., 0], expected)
    assert expected[0, 0] > expected[0, 1]  # the high-entropy position is pushed harder
    assert stats["policy/negative_adv_mean"] == pytest.approx(-0.1)
