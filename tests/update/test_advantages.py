"""Group advantages and the zero-variance filter, checked against hand-derived numbers."""

import math

import pytest
import torch
from torch.testing import assert_close

from coevo.update.objectives import group_advantages, nonzero_variance_groups

# Two groups of G = 4:
#   row 0: [1, 0, 0, 1]  mean 0.5, deviations [.5, -.5, -.5, .5]
#          unbiased var = 4 * 0.25 / (4 - 1) = 1/3, std = sqrt(1/3) = 0.57735
#          normalised: ±0.5 / 0.57735 = ±0.86603
#   row 1: [0, 0, 0, 3]  mean 0.75, deviations [-.75, -.75, -.75, 2.25]
#          unbiased var = (3 * 0.5625 + 5.0625) / 3 = 6.75 / 3 = 2.25, std = 1.5
#          normalised: [-0.5, -0.5, -0.5, 1.5]
REWARDS = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 3.0]], dtype=torch.float64)


def test_std_normalised_uses_unbiased_std():
    s = 0.5 / math.sqrt(1 / 3)  # 0.86603
    expected = torch.tensor([[s, -s, -s, s], [-0.5, -0.5, -0.5, 1.5]], dtype=torch.float64)
    assert_close(group_advantages(REWARDS, std_normalize=True, eps=0.0), expected)


def test_eps_is_added_to_std():
    # row 1 with eps = 0.5: deviations / (1.5 + 0.5) = [-0.375, -0.375, -0.375, 1.125]
    adv = group_advantages(REWARDS, std_normalize=True, eps=0.5)
    assert_close(adv[1], torch.tensor([-0.375, -0.375, -0.375, 1.125], dtype=torch.float64))


def test_mean_only_dr_grpo():
    # std_normalize=False: the deviations themselves
    expected = torch.tensor([[0.5, -0.5, -0.5, 0.5], [-0.75, -0.75, -0.75, 2.25]], dtype=torch.float64)
    assert_close(group_advantages(REWARDS, std_normalize=False, eps=1e-6), expected)


def test_all_equal_group_gives_zeros_and_is_flagged():
    # row 1 all 1.0: deviations 0, std 0 -> 0 / (0 + eps) = 0 (no NaN); row 0 has signal
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]], dtype=torch.float64)
    for std_normalize in (True, False):
        adv = group_advantages(rewards, std_normalize=std_normalize, eps=1e-6)
        assert_close(adv[1], torch.zeros(4, dtype=torch.float64))
    assert nonzero_variance_groups(rewards).tolist() == [True, False]


def test_nonzero_variance_flags_any_difference():
    # all-zero and all-0.5 groups are flagged False; a group differing only in its last entry is True
    rewards = torch.tensor([[0.0, 0.0, 0.0], [0.5, 0.5, 0.5], [1.0, 1.0, 0.0]], dtype=torch.float64)
    assert nonzero_variance_groups(rewards).tolist() == [False, False, True]


def test_integer_rewards_are_accepted():
    # bool/int pass flags become float: [1, 0] -> mean .5, unbiased std sqrt(0.5) = 0.70711 -> ±0.70711
    adv = group_advantages(torch.tensor([[1, 0]]), std_normalize=True, eps=0.0)
    assert_close(adv, torch.tensor([[0.70711, -0.70711]]), atol=1e-5, rtol=0)


def test_std_normalised_needs_two_samples():
    with pytest.raises(ValueError, match="group size"):
        group_advantages(torch.ones(3, 1, dtype=torch.float64), std_normalize=True, eps=1e-6)
