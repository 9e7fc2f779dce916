"""CURE rewards against a pass table computed by hand (coevo/code/cure.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from coevo.code.cure import cure_rewards, z_normalise
from coevo.update.objectives import group_advantages

# 4 sampled solutions, 2 ground-truth tests (B*), 3 generated tests (B).
TRUTH = [[1, 1], [1, 1], [1, 0], [0, 0]]  # correct = [T, T, F, F]; pass rates [1, 1, 0.5, 0]
TABLE = [
    # t0 t1 t2
    [1, 1, 1],  # s0 (correct)
    [1, 0, 1],  # s1 (correct)
    [0, 1, 1],  # s2 (wrong)
    [0, 1, 0],  # s3 (wrong)
]
# t0: both correct pass -> accurate; rejects s2, s3 -> +(1 + 2) = 3
# t1: s1 (correct) fails -> inaccurate; lets through s2, s3 -> -(1 + 2) = -3
# t2: accurate; rejects s3 only -> +(1 + 1) = 2


def test_rewards_match_the_hand_computed_table():
    r = cure_rewards(np.array(TABLE), np.array(TRUTH))
    assert r.correct.tolist() == [True, True, False, False]
    assert r.solution.tolist() == [1.0, 1.0, 0.5, 0.0]
    assert r.accurate.tolist() == [True, False, True]
    assert r.rejected_wrong.tolist() == [2, 0, 1]
    assert r.test.tolist() == [3.0, -3.0, 2.0]
    assert r.decidable


def test_binary_variant():
    r = cure_rewards(np.array(TABLE), np.array(TRUTH), binary=True)
    assert r.solution.tolist() == [1.0, 1.0, 0.0, 0.0]
    assert r.test.tolist() == [1.0, 0.0, 1.0]


def test_z_normalisation_by_hand_and_equal_to_the_grpo_advantage():
    # [3, -3, 2]: mean 2/3, deviations 7/3, -11/3, 4/3; unbiased var (49 + 121 + 16) / 9 / 2 = 10.333..
    z = z_normalise([3.0, -3.0, 2.0], eps=0.0)
    std = np.sqrt(186 / 18)
    assert z == pytest.approx([7 / 3 / std, -11 / 3 / std, 4 / 3 / std])
    assert z == pytest.approx([0.72587, -1.14065, 0.41478], abs=1e-5)
    grpo = group_advantages(torch.tensor([[3.0, -3.0, 2.0]], dtype=torch.float64), True, 0.0)[0]
    assert grpo.tolist() == pytest.approx(z.tolist())


def test_no_correct_solution_is_undecidable_and_gives_valid_tests_no_signal():
    r = cure_rewards(np.array(TABLE), np.zeros((4, 2)), valid=np.array([True, True, False]))
    assert not r.decidable and r.accurate.tolist() == [True, True, False]  # vacuous for the valid ones
    assert r.rejected_wrong.tolist() == [2, 1, 1]  # every solution is wrong now
    assert r.test.tolist() == [0.0, 0.0, -5.0]  # the test that does not compile: -(1 + 4 wrong)
    assert cure_rewards(np.array(TABLE), np.zeros((4, 2)), binary=True).test.tolist() == [0.0, 0.0, 0.0]


def test_a_test_that_does_not_compile_is_inaccurate_and_worst():
    r = cure_rewards(np.array(TABLE), np.array(TRUTH), valid=np.array([True, True, False]))
    assert r.accurate.tolist() == [True, False, False]
    assert r.test.tolist() == [3.0, -3.0, -3.0]  # -(1 + 2 wrong)


def test_accurate_and_inaccurate_stay_apart_with_no_wrong_solution():
    r = cure_rewards(np.array([[1, 0], [1, 1]]), np.ones((2, 1)))
    assert r.test.tolist() == [1.0, -1.0]  # the paper's form would give 0 to both


def test_shape_errors():
    with pytest.raises(ValueError, match=r"with the same n; got \(3, 2\) and \(2, 2\)"):
        cure_rewards(np.ones((3, 2)), np.ones((2, 2)))
    with pytest.raises(ValueError, match=r"B\* \[n, t>0\] with the same n; got \(3, 2\) and \(3, 0\)"):
        cure_rewards(np.ones((3, 2)), np.ones((3, 0)))
