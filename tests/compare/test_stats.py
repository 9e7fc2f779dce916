"""The comparison's statistics on numbers derived by hand (coevo/compare/stats.py)."""

from __future__ import annotations

import numpy as np
import pytest

from coevo.compare import stats


def _verdicts(passes: list[int]) -> dict[str, bool]:
    return {f"p{i:03d}": bool(v) for i, v in enumerate(passes)}


def test_identical_arms_differ_by_zero_with_zero_inside_the_interval():
    rng = np.random.default_rng(3)
    ref = {s: _verdicts(list(rng.integers(0, 2, 200))) for s in (0, 1, 2)}
    result = stats.paired_difference(ref, ref)
    # every per-problem difference is 0, so every resample's mean is 0: the interval is [0, 0]
    assert result["mean_diff"] == 0.0
    assert result["ci95"] == [0.0, 0.0]
    assert [row["diff"] for row in result["seeds"]] == [0.0, 0.0, 0.0]


def test_a_known_shift_is_the_mean_difference_and_the_interval_has_its_hand_width():
    # one seed, 400 problems: the arm passes 120 the reference fails, the reference 40 the arm fails,
    # both agree on 240. Per-problem differences e: +1 x120, -1 x40, 0 x240.
    # mean = (120 - 40) / 400 = 0.2; E[e^2] = 160/400 = 0.4, var = 0.4 - 0.04 = 0.36, sd = 0.6,
    # se = 0.6 / sqrt(400) = 0.03, 95% half-width ~ 1.96 * 0.03 = 0.0588 -> about [0.141, 0.259]
    arm = [1] * 120 + [0] * 40 + [1] * 100 + [0] * 140
    ref = [0] * 120 + [1] * 40 + [1] * 100 + [0] * 140
    result = stats.paired_difference({0: _verdicts(arm)}, {0: _verdicts(ref)})
    assert result["mean_diff"] == pytest.approx(0.2)
    low, high = result["ci95"]
    assert low == pytest.approx(0.2 - 0.0588, abs=0.006) and high == pytest.approx(0.2 + 0.0588, abs=0.006)
    # a single seed: the headline interval is the within-seed (scipy, paired) interval
    s_low, s_high = result["seeds"][0]["ci95"]
    assert s_low == pytest.approx(low, abs=0.006) and s_high == pytest.approx(high, abs=0.006)
    assert (result["seeds"][0]["acc"], result["seeds"][0]["acc_ref"]) == (220 / 400, 140 / 400)


def test_verdicts_are_paired_by_problem_id_not_by_position():
    # the same verdicts listed in another order are the same arm: every e = 0, interval [0, 0]
    # (pairing by position would pair p000 with p049 and see differences)
    ref = _verdicts([1, 0] * 25)
    arm = dict(reversed(list(ref.items())))
    assert stats.paired_difference({0: arm}, {0: ref})["ci95"] == [0.0, 0.0]
    # the arm passes everything, the reference nothing: every e = +1, exactly 1 with interval [1, 1]
    result = stats.paired_difference(
        {0: _verdicts([1] * 50), 1: _verdicts([1] * 50)}, {0: _verdicts([0] * 50), 1: _verdicts([0] * 50)}
    )
    assert result["mean_diff"] == 1.0 and result["ci95"] == [1.0, 1.0]
    with pytest.raises(ValueError, match="different held-out problems"):
        stats.paired_difference({0: _verdicts([1] * 49)}, {0: _verdicts([0] * 50)})


def _seeds_with_differences(passes_by_seed: list[int], n: int = 1000) -> tuple[dict, dict]:
    """Verdicts whose seed s has exactly passes_by_seed[s] problems only the arm passed (no others
    differ): d_s = passes_by_seed[s] / n, with no problem-level disagreement beyond it."""
    arm = {s: _verdicts([1] * k + [0] * (n - k)) for s, k in enumerate(passes_by_seed)}
    ref = {s: _verdicts([0] * n) for s in range(len(passes_by_seed))}
    return arm, ref


def test_the_mean_over_seeds_has_the_t_interval_derived_by_hand():
    # the committed frontier runs' per-seed differences: d = 1.0, 5.2, 7.7 points (1000 problems: 10,
    # 52, 77 problems only the arm passed). mean = 13.9 / 3 = 4.633; deviations -3.633, +0.567, +3.067;
    # squares 13.201 + 0.321 + 9.404 = 22.927, / (3 - 1) = 11.463, sd = 3.386, se = 3.386 / sqrt(3) =
    # 1.955; t(0.975, df 2) = 4.303, half-width 8.411 -> [-3.78, +13.04]; t = 4.633 / 1.955 = 2.370,
    # two-sided p with df 2 = 0.141
    result = stats.paired_difference(*_seeds_with_differences([10, 52, 77]))
    assert result["mean_diff"] == pytest.approx(0.04633, abs=1e-5)
    assert result["ci95"] == pytest.approx([-0.0378, 0.1304], abs=2e-4)
    assert result["p_value"] == pytest.approx(0.141, abs=0.001)
    assert (result["method"], result["n_seeds"]) == (stats.T_OVER_SEEDS, 3) and "nested_bootstrap" not in result
    # two seeds that disagree (d = 1 and 0): mean 0.5, sd 0.707, se 0.5, t(0.975, df 1) = 12.71: half-width
    # 6.35, clipped to the range of a difference of accuracies, [-1, 1]
    two = stats.paired_difference(
        {0: _verdicts([1] * 100), 1: _verdicts([0] * 100)}, {0: _verdicts([0] * 100), 1: _verdicts([0] * 100)}
    )
    assert two["mean_diff"] == 0.5 and two["ci95"] == [-1.0, 1.0] and two["p_value"] == pytest.approx(0.5)


def test_one_seed_is_marked_and_ten_seeds_add_the_nested_bootstrap_as_a_second_figure():
    # one seed: the within-seed interval is all there is; p is McNemar's exact test on the 120 + 40
    # discordant problems (Binomial(160, 1/2) at 120: z = (120 - 80) / sqrt(40) = 6.3, p ~ 3e-10)
    arm = [1] * 120 + [0] * 40 + [1] * 100 + [0] * 140
    ref = [0] * 120 + [1] * 40 + [1] * 100 + [0] * 140
    one = stats.paired_difference({0: _verdicts(arm)}, {0: _verdicts(ref)})
    assert one["method"] == stats.ONE_SEED and one["ci95"] == one["seeds"][0]["ci95"] and one["p_value"] < 1e-8
    ten = stats.paired_difference(*_seeds_with_differences([40, 60] * 5, n=100))
    assert ten["method"] == stats.T_OVER_SEEDS and ten["n_seeds"] == 10
    # the nested bootstrap resamples seeds (d = 0.4 or 0.6, half each) then problems (none disagree
    # beyond d): its draws are means of 10 draws from {0.4, 0.6}, centred on 0.5
    low, high = ten["nested_bootstrap"]["ci95"]
    assert 0.4 < low < 0.5 < high < 0.6


def test_the_nested_bootstrap_resamples_seeds():
    # seed 0 every e = +1 (d = 1), seed 1 every e = 0 (d = 0): resampling only seeds gives {0, 0.5, 1}
    # with probabilities 1/4, 1/2, 1/4; a resampler that kept the seeds fixed would give only 0.5
    draws = stats.nested_draws([np.ones(100), np.zeros(100)], 10_000, seed=0)
    assert set(np.unique(draws)) == {0.0, 0.5, 1.0}
    assert np.mean(draws == 0.5) == pytest.approx(0.5, abs=0.02)


def test_the_same_inputs_give_the_same_interval():
    rng = np.random.default_rng(7)
    arm = {s: _verdicts(list(rng.integers(0, 2, 80))) for s in (0, 1)}
    ref = {s: _verdicts(list(rng.integers(0, 2, 80))) for s in (0, 1)}
    assert stats.paired_difference(arm, ref) == stats.paired_difference(arm, ref)


def test_timing_ratio_needs_five_steps_and_is_the_ratio_of_medians():
    short = stats.timing_ratio([1.0] * 4, [2.0] * 10)
    assert short["ratio"] is None and "fewer than 5" in short["why"]
    # medians 1.0 and 2.0 -> 0.5; constant steps give a point interval
    assert stats.timing_ratio([1.0] * 5, [2.0] * 5) == {"ratio": 0.5, "ci95": [0.5, 0.5]}
    spread = stats.timing_ratio([0.9, 1.0, 1.0, 1.1, 1.2, 1.0], [2.0, 1.9, 2.1, 2.0, 2.2, 2.0])
    assert spread["ratio"] == pytest.approx(0.5) and spread["ci95"][0] < 0.5 < spread["ci95"][1]
    assert stats.step_summary([1, 2, 3, 4, 5]) == {"steps": 5, "median_s": 3.0, "q25_s": 2.0, "q75_s": 4.0}


def test_the_per_seed_interval_resamples_problems_paired():
    # 400 problems, every one discordant: 200 only the arm passed (e = +1), 200 only the reference (e = -1).
    # Paired (a problem's two verdicts move together): e has mean 0 and variance 1, se = 1 / sqrt(400) =
    # 0.05, half-width ~ 1.96 * 0.05 = 0.098. Unpaired (the arm's passes and the reference's resampled
    # independently): variance 0.25 + 0.25 = 0.5, se = 0.035, half-width ~ 0.069: too narrow by 30%.
    arm, ref = [1, 0] * 200, [0, 1] * 200
    result = stats.paired_difference({0: _verdicts(arm)}, {0: _verdicts(ref)})
    low, high = result["seeds"][0]["ci95"]
    assert result["mean_diff"] == 0.0
    assert low == pytest.approx(-0.098, abs=0.01) and high == pytest.approx(0.098, abs=0.01)
