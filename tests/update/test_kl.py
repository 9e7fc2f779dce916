"""KL estimators and loss aggregation, checked against hand-derived numbers."""

import math

import pytest
import torch
from torch.testing import assert_close

from coevo.update.objectives import aggregate, kl_per_token

LN2 = math.log(2.0)
# logprobs log(.25), log(.25); ref log(.5), log(.125) -> log_r = ref - logprobs = [ln 2, -ln 2]
LOGPROBS = torch.log(torch.tensor([[0.25, 0.25]], dtype=torch.float64))
REF = torch.log(torch.tensor([[0.5, 0.125]], dtype=torch.float64))


@pytest.mark.parametrize(
    ("estimator", "expected"),
    [
        # k1 = -log_r:                    [-ln 2, ln 2] = [-0.69315, 0.69315]
        ("k1", [-LN2, LN2]),
        # k2 = 0.5 log_r^2:               0.5 * 0.48045 = 0.24023 for both signs
        ("k2", [0.5 * LN2**2, 0.5 * LN2**2]),
        # k3 = exp(log_r) - 1 - log_r:    2 - 1 - ln 2 = 0.30685 ; 0.5 - 1 + ln 2 = 0.19315
        ("k3", [1.0 - LN2, -0.5 + LN2]),
    ],
)
def test_estimators_on_known_log_ratios(estimator, expected):
    got = kl_per_token(LOGPROBS, REF, estimator)
    assert_close(got, torch.tensor([expected], dtype=torch.float64))


def test_estimators_zero_when_policies_agree():
    x = torch.log(torch.tensor([[0.3, 0.7]], dtype=torch.float64))
    for estimator in ("k1", "k2", "k3"):
        assert_close(kl_per_token(x, x, estimator), torch.zeros(1, 2, dtype=torch.float64))


def test_k1_and_k3_are_unbiased_in_expectation():
    # pi = [.5, .5], ref = [.25, .75]. KL(pi || ref) = .5 ln(.5/.25) + .5 ln(.5/.75) = .5 ln(4/3) = 0.14384.
    # Exact expectation under pi: sum_x pi(x) k(x). k1: by definition. k3: sum pi (ref/pi) - 1 + KL = KL.
    pi = torch.tensor([[0.5, 0.5]], dtype=torch.float64)
    ref = torch.tensor([[0.25, 0.75]], dtype=torch.float64)
    kl = torch.tensor(0.5 * math.log(4 / 3), dtype=torch.float64)
    for estimator in ("k1", "k3"):
        expectation = (pi * kl_per_token(pi.log(), ref.log(), estimator)).sum()
        assert_close(expectation, kl)
    # k2 is biased: .5 * (.5 ln(1/2)^2 + .5 ln(3/2)^2) = .25 * (0.48045 + 0.16440) = 0.16121 != 0.14384
    k2 = (pi * kl_per_token(pi.log(), ref.log(), "k2")).sum()
    assert_close(k2, torch.tensor(0.25 * (math.log(2) ** 2 + math.log(1.5) ** 2), dtype=torch.float64))


def test_unknown_estimator():
    with pytest.raises(ValueError, match="k4"):
        kl_per_token(LOGPROBS, REF, "k4")


# Uneven masks: seq 0 has 3 tokens, seq 1 has 1, seq 2 has none (B = 3, T = 4).
PER_TOKEN = torch.tensor([[1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0], [100.0] * 4], dtype=torch.float64)
MASK = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.0] * 4], dtype=torch.float64)
# masked sum = 1 + 2 + 3 + 10 = 16 over 4 tokens


@pytest.mark.parametrize(
    ("mode", "max_len", "expected"),
    [
        # token-mean: 16 / 4 tokens = 4.0
        ("token-mean", None, 4.0),
        # seq-mean-token-mean: seq 0 -> 6/3 = 2, seq 1 -> 10/1 = 10, seq 2 skipped -> (2 + 10) / 2 = 6.0
        ("seq-mean-token-mean", None, 6.0),
        # seq-mean-token-sum-norm: 16 / (B=3 * T=4) = 1.33333
        ("seq-mean-token-sum-norm", None, 16 / 12),
        # ... with max_len = 8: 16 / (3 * 8) = 0.66667
        ("seq-mean-token-sum-norm", 8, 16 / 24),
    ],
)
def test_aggregation_modes_differ_on_uneven_masks(mode, max_len, expected):
    got = aggregate(PER_TOKEN, MASK, mode, max_len)
    assert_close(got, torch.tensor(expected, dtype=torch.float64))


def test_aggregation_gradients():
    # d/dx of token-mean: mask / 4 -> [.25, .25, .25, 0] / [.25, 0, 0, 0] / zeros
    # d/dx of seq-mean-token-mean: mask / len / n_seq -> seq 0: 1/3/2 = 1/6 ; seq 1: 1/1/2 = 1/2
    x = PER_TOKEN.clone().requires_grad_(True)
    aggregate(x, MASK, "token-mean").backward()
    assert_close(x.grad, MASK / 4)
    x.grad = None
    aggregate(x, MASK, "seq-mean-token-mean").backward()
    expected = torch.tensor([[1 / 6] * 3 + [0.0], [0.5, 0.0, 0.0, 0.0], [0.0] * 4], dtype=torch.float64)
    assert_close(x.grad, expected)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_empty_mask_gives_zero_not_nan(mode):
    got = aggregate(PER_TOKEN, torch.zeros_like(MASK), mode)
    assert_close(got, torch.tensor(0.0, dtype=torch.float64))


def test_unknown_aggregation():
    with pytest.raises(ValueError, match="token-sum"):
        aggregate(PER_TOKEN, MASK, "token-sum")
