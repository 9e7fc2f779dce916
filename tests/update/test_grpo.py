"""The GRPO-family loss, its gradient and its stats, checked against hand-derived numbers.

Convention in these tests: logprobs = log(ratio) and old_logprobs = 0, so ratio = exp(logprobs - old)
is the number written; sampling_logprobs = 0 unless TIS is under test, so tis = exp(0 - 0) = 1.
"""

import math

import pytest
import torch
from torch.testing import assert_close

from coevo.config import ObjectiveConfig
from coevo.update.objectives import GRPO, PolicyBatch

F64 = torch.float64


def make_batch(ratios, advantages, mask=None, sampling=None, ref=None, max_len=None):
    ratios = torch.tensor(ratios, dtype=F64)
    logprobs = ratios.log().requires_grad_(True)
    zeros = torch.zeros_like(ratios)
    return PolicyBatch(
        logprobs=logprobs,
        old_logprobs=zeros,
        sampling_logprobs=zeros if sampling is None else torch.tensor(sampling, dtype=F64),
        advantages=torch.tensor(advantages, dtype=F64),
        mask=torch.ones_like(ratios) if mask is None else torch.tensor(mask, dtype=F64),
        ref_logprobs=ref,
        max_len=max_len,
    )


# clip_low = 0.2 (lower bound 0.8) != clip_high = 0.28 (upper bound 1.28)
CFG = ObjectiveConfig(clip_low=0.2, clip_high=0.28, tis_cap=2.0, aggregation="token-mean")

# Two sequences of four tokens. Per token pg = -min(r*A, clip(r, .8, 1.28)*A) and, where unclipped,
# d pg / d logprob = -r*A (since d r / d logprob = r); where the clipped branch wins the gradient is 0.
# row 0, A = +1:
#   r=1.10 inside           -> min(1.10, 1.10) = 1.10 -> pg -1.10, grad -1.10
#   r=1.50 above 1.28       -> min(1.50, 1.28) = 1.28 -> pg -1.28, grad 0      (clipped high)
#   r=0.50 below 0.8, A>0   -> min(0.50, 0.80) = 0.50 -> pg -0.50, grad -0.50  (unclipped)
#   r=1.25 in (1.2, 1.28]   -> min(1.25, 1.25) = 1.25 -> pg -1.25, grad -1.25  (a symmetric 0.2 would clip)
# row 1, A = -1:
#   r=0.90 inside           -> min(-0.90, -0.90) = -0.90 -> pg 0.90, grad 0.90
#   r=1.50 above 1.28, A<0  -> min(-1.50, -1.28) = -1.50 -> pg 1.50, grad 1.50 (unclipped)
#   r=0.50 below 0.8        -> min(-0.50, -0.80) = -0.80 -> pg 0.80, grad 0    (clipped low)
#   r=0.75 in [0.72, 0.8)   -> min(-0.75, -0.80) = -0.80 -> pg 0.80, grad 0    (a clip_low of 0.28 would not clip)
RATIOS = [[1.10, 1.50, 0.50, 1.25], [0.90, 1.50, 0.50, 0.75]]
ADV = [1.0, -1.0]


def test_clipped_loss_value_and_gradient():
    batch = make_batch(RATIOS, ADV)
    loss, _ = GRPO(CFG).loss(batch)
    # token-mean over 8 tokens: (-1.10 - 1.28 - 0.50 - 1.25 + 0.90 + 1.50 + 0.80 + 0.80) / 8 = -0.13 / 8
    assert_close(loss, torch.tensor(-0.13 / 8, dtype=F64))
    loss.backward()
    # per-token grads from the table above, each divided by the 8 tokens of the token-mean
    expected = torch.tensor([[-1.10, 0.0, -0.50, -1.25], [0.90, 1.50, 0.0, 0.0]], dtype=F64) / 8
    assert_close(batch.logprobs.grad, expected)


def test_stats_of_the_clipped_loss():
    _, stats = GRPO(CFG).loss(make_batch(RATIOS, ADV))
    assert all(isinstance(v, float) for v in stats.values())
    expected = {
        "policy/pg_loss": -0.13 / 8,
        "policy/kl": 0.0,  # kl_coef = 0
        # (1.1 + 1.5 + 0.5 + 1.25 + 0.9 + 1.5 + 0.5 + 0.75) / 8 = 8 / 8
        "policy/ratio_mean": 1.0,
        # A<0 and r<0.8: row 1 tokens r=0.50, r=0.75 -> 2 / 8
        "policy/clip_frac_low": 0.25,
        # A>0 and r>1.28: row 0 token r=1.50 -> 1 / 8
        "policy/clip_frac_high": 0.125,
        "policy/tis_mean": 1.0,
        "policy/tis_clipped_frac": 0.0,
        "policy/loss": -0.13 / 8,
    }
    assert stats.keys() == expected.keys()
    for key, value in expected.items():
        assert stats[key] == pytest.approx(value, abs=1e-12), key


def test_masked_tokens_do_not_count():
    # Mask out row 0's r=1.50 and row 1's r=0.50: the clipped tokens of each side.
    # Remaining pg: -1.10 - 0.50 - 1.25 + 0.90 + 1.50 + 0.80 = 0.35 over 6 tokens.
    mask = [[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 0.0, 1.0]]
    batch = make_batch(RATIOS, ADV, mask=mask)
    loss, stats = GRPO(CFG).loss(batch)
    assert_close(loss, torch.tensor(0.35 / 6, dtype=F64))
    # only row 1's r=0.75 is still clipped: 1/6 low, 0/6 high
    assert stats["policy/clip_frac_low"] == pytest.approx(1 / 6)
    assert stats["policy/clip_frac_high"] == 0.0
    loss.backward()
    assert batch.logprobs.grad[0, 1] == 0.0 and batch.logprobs.grad[1, 2] == 0.0


def test_truncated_importance_weight():
    # ratio 1, A = +1; sampling_logprobs = -log(w) so tis = exp(0 - sampling) = w = [0.5, 1.5, 3.0, 4.0]
    # capped at tis_cap = 2: [0.5, 1.5, 2.0, 2.0]; pg = -1 * 1 * tis; token-mean = -(6.0) / 4 = -1.5
    w = [0.5, 1.5, 3.0, 4.0]
    batch = make_batch([[1.0] * 4], [1.0], sampling=[[-math.log(x) for x in w]])
    batch.old_logprobs.requires_grad_(True)  # must receive no gradient: tis and ratio's pi_old are detached
    loss, stats = GRPO(CFG).loss(batch)
    assert_close(loss, torch.tensor(-1.5, dtype=F64))
    assert stats["policy/tis_mean"] == pytest.approx(6.0 / 4)  # 1.5
    assert stats["policy/tis_clipped_frac"] == pytest.approx(2 / 4)  # 3.0 and 4.0 exceed the cap
    loss.backward()
    # d pg / d logprob = -r * A * tis = -tis (tis is a constant), / 4 tokens
    assert_close(batch.logprobs.grad, -torch.tensor([[0.5, 1.5, 2.0, 2.0]], dtype=F64) / 4)
    assert batch.old_logprobs.grad is None


# kl_coef = 0.5, k3. logprobs = old = sampling = log .25 (ratio 1, tis 1), A = +1 -> pg = -1 per token.
# ref = [log .5, log .125] -> log_r = [ln 2, -ln 2] -> k3 = [1 - ln 2, -0.5 + ln 2] = [0.30685, 0.19315]
# k3 token-mean = (1 - ln 2 - 0.5 + ln 2) / 2 = 0.25 ; loss = -1 + 0.5 * 0.25 = -0.875
def kl_batch(with_ref=True):
    logprobs = torch.log(torch.tensor([[0.25, 0.25]], dtype=F64)).requires_grad_(True)
    fixed = logprobs.detach().clone()
    ref = torch.log(torch.tensor([[0.5, 0.125]], dtype=F64)) if with_ref else None
    adv = torch.tensor([1.0], dtype=F64)
    return PolicyBatch(logprobs, fixed, fixed, adv, torch.ones(1, 2, dtype=F64), ref_logprobs=ref)


def test_kl_term_added_with_coefficient():
    objective = GRPO(ObjectiveConfig(kl_coef=0.5, kl_estimator="k3"))
    assert objective.needs_reference
    batch = kl_batch()
    loss, stats = objective.loss(batch)
    assert_close(loss, torch.tensor(-0.875, dtype=F64))
    assert stats["policy/pg_loss"] == pytest.approx(-1.0)
    assert stats["policy/kl"] == pytest.approx(0.25)  # the estimate itself, without the coefficient
    assert stats["policy/loss"] == pytest.approx(-0.875)
    loss.backward()
    # d k3 / d logprob = d/dlp [exp(ref - lp) - 1 - (ref - lp)] = 1 - exp(log_r) = [1 - 2, 1 - 0.5] = [-1, 0.5]
    # per token: (d pg = -1) + 0.5 * d k3, / 2 tokens -> [(-1 - 0.5) / 2, (-1 + 0.25) / 2] = [-0.75, -0.375]
    assert_close(batch.logprobs.grad, torch.tensor([[-0.75, -0.375]], dtype=F64))


def test_kl_estimator_is_configurable():
    # k1 = -log_r = [-ln 2, ln 2], token-mean 0 -> loss = pg = -1
    loss, stats = GRPO(ObjectiveConfig(kl_coef=0.5, kl_estimator="k1")).loss(kl_batch())
    assert_close(loss, torch.tensor(-1.0, dtype=F64))
    assert stats["policy/kl"] == pytest.approx(0.0, abs=1e-12)


def test_kl_requires_reference_logprobs():
    with pytest.raises(ValueError, match="ref_logprobs"):
        GRPO(ObjectiveConfig(kl_coef=0.5)).loss(kl_batch(with_ref=False))


def test_no_reference_needed_without_kl():
    objective = GRPO(ObjectiveConfig(kl_coef=0.0))
    assert not objective.needs_reference
    loss, stats = objective.loss(kl_batch(with_ref=False))
    assert_close(loss, torch.tensor(-1.0, dtype=F64))
    assert stats["policy/kl"] == 0.0


@pytest.mark.parametrize(
    ("aggregation", "expected"),
    [
        # ratio 1, tis 1 -> pg = -A per token: row 0 (A=1) 3 tokens of -1, row 1 (A=-2) 1 token of +2
        ("token-mean", (-3 + 2) / 4),  # -0.25
        ("seq-mean-token-mean", (-1 + 2) / 2),  # row means -1 and 2 -> 0.5
        ("seq-mean-token-sum-norm", (-3 + 2) / (2 * 5)),  # B=2, max_len=5 -> -0.1
    ],
)
def test_aggregation_follows_config(aggregation, expected):
    batch = make_batch([[1.0] * 3] * 2, [1.0, -2.0], mask=[[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]], max_len=5)
    loss, stats = GRPO(ObjectiveConfig(aggregation=aggregation)).loss(batch)
    assert_close(loss, torch.tensor(expected, dtype=F64))
    assert stats["policy/pg_loss"] == pytest.approx(expected)


def test_batch_shape_mismatch_is_rejected():
    with pytest.raises(ValueError, match="advantages"):
        make_batch([[1.0, 1.0]], [1.0, 1.0])
