"""The comparison's headline interval is calibrated: measured on simulated null experiments
(coevo/compare/coverage.py), it excludes 0 in at most 6.5% of them at a nominal 5%.

What is simulated: 400 test problems with logit difficulties N(0, 1.5) shared by every run of an
experiment; each run (arm, seed) shifts every problem's logit by its own seed effect N(0, sd); a run
passes a problem with probability sigmoid(difficulty + shift). Both arms are identical in
distribution, so the true difference is 0 and every interval that excludes 0 is a false positive.
Cells: 3, 5 and 10 seeds x seed-effect sd 0, 0.15, 0.3 and 0.6; 1,000 experiments each, fixed RNG.
6.5% leaves about two binomial standard errors (0.7 points at 1,000 experiments) above 5%.

The nested paired bootstrap the table used before (seeds resampled, then problems) fails this: at 3
seeds with seed effects it excluded 0 in 10-22% of null experiments, at 5 seeds in 5-15%
(tests/mutations.py, `compare-interval-nested-bootstrap`, puts it back; `python -m
coevo.compare.coverage` prints both methods' table).
"""

from __future__ import annotations

import pytest

from coevo.compare import coverage, stats

LIMIT = 0.065


@pytest.mark.parametrize("n_seeds", coverage.SEEDS)
def test_the_headline_interval_excludes_zero_in_at_most_6_5_percent_of_null_experiments(n_seeds):
    rates = {sd: coverage.false_positive_rate(coverage.t_method, n_seeds, sd, 1000) for sd in coverage.SEED_SDS}
    assert all(rate <= LIMIT for rate in rates.values()), f"{n_seeds} seeds: false-positive rate by seed sd {rates}"


def test_the_simulation_is_null_and_its_seed_effects_spread_the_per_seed_differences():
    """The simulator itself: the mean per-seed difference is 0 on average, and a seed effect widens
    the spread of the per-seed differences well beyond problem sampling's (else the cells with sd > 0
    would test nothing a 0-sd cell does not)."""
    import numpy as np

    spreads = {}
    for sd in (0.0, 0.3):
        rng = np.random.default_rng(1)
        means = np.array([[e.mean() for e in exp] for exp in coverage.null_experiments(3, sd, 300, rng)])  # [rep, S]
        assert abs(means.mean()) < 0.01
        spreads[sd] = means.std()
    # problem sampling alone: sd of a mean of 400 differences in {-1, 0, 1}, about 0.03; sd 0.3 adds ~0.07
    assert spreads[0.0] == pytest.approx(0.03, abs=0.008) and spreads[0.3] > 2 * spreads[0.0]


def test_the_table_uses_the_measured_interval():
    """paired_difference's headline interval is mean_interval's (the one measured above)."""
    import numpy as np

    rng = np.random.default_rng(4)
    per_seed = next(coverage.null_experiments(3, 0.3, 1, rng, n_problems=50))
    arm = {s: {f"p{i:02d}": bool(e > 0) for i, e in enumerate(d)} for s, d in enumerate(per_seed)}
    ref = {s: {f"p{i:02d}": bool(e < 0) for i, e in enumerate(d)} for s, d in enumerate(per_seed)}
    result = stats.paired_difference(arm, ref)
    assert result["ci95"] == stats.mean_interval(per_seed)["ci95"] and result["method"] == stats.T_OVER_SEEDS
