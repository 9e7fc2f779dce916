"""The statistics of a paired comparison: per-seed differences, a seed-level interval of their mean,
timing ratios.

An arm is compared with the reference arm seed by seed: both ran from the same seed and were judged
on the same held-out problems, so the figure is the per-seed difference
d_s = acc(arm, s) - acc(ref, s) and its mean over seeds, D = mean_s d_s.

The 95% interval of D (`mean_interval`, S seeds, S >= 2) is Student's t over the S per-seed
differences: D +- t_{0.975, S-1} * sd(d_s) / sqrt(S), with the two-sided p-value of a one-sample
t-test of D = 0 (scipy.special.stdtr / stdtrit: the t distribution's cdf and quantile). Each d_s
already carries its seed's problem-sampling noise, so the t-interval covers both sources of
variation; it treats the d_s as independent draws from one normal distribution, which is what it
assumes and all it assumes. The interval is clipped to [-1, 1], the range of a difference of two
accuracies (clipping moves no interval that covers a possible value off it).

Why not a bootstrap: resampling S seeds with replacement understates the between-seed variance by
(S-1)/S and its percentiles take no account of estimating that variance from S values, so at 3-5
seeds it is too narrow. Measured by simulated null experiments (coevo/compare/coverage.py, `python
-m coevo.compare.coverage`, 1,000 experiments a cell): with a seed effect it excluded 0 in 10-22%
of experiments at 3 seeds and 5-15% at 5, at a nominal 5%; the t-interval in 3.5-5.8% in every cell
(3, 5, 10 seeds). The nested paired bootstrap of earlier versions (`nested_draws`: seeds resampled,
then problems within each drawn seed with both arms' verdicts moving together) is kept as a
secondary figure only where S >= NESTED_MIN_SEEDS; even there it measured 1-8%, above 5% with large
seed effects.

With one seed there is no between-seed variance to estimate: the interval is the within-seed one
(below), covering problem sampling only, and the result says so (`method`); its p-value is the exact
McNemar test on the discordant problems (scipy.stats.binomtest).

Per-seed intervals: the 95% percentile interval of one seed's mean difference, the test problems
resampled with the arm's and the reference's verdicts on a problem moving together
(scipy.stats.bootstrap, paired=True, 10,000 resamples).

Timing ratios: each arm's measured training seconds per iteration (>= MIN_STEPS steps), their
median and quartiles, and the ratio of the arm's median to the reference's with a percentile
bootstrap interval (scipy, the two arms' steps resampled independently: steps are not paired).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from scipy import stats as sp
from scipy.special import stdtr, stdtrit

DRAWS = 10_000
LEVEL = 0.95
MIN_STEPS = 5  # timing ratios need at least this many measured steps per arm
NESTED_MIN_SEEDS = 10  # the nested bootstrap is shown (as a secondary figure) from this many seeds
T_OVER_SEEDS = "t over seeds"  # `method` of a mean over S >= 2 seeds
ONE_SEED = "one seed: within-seed paired bootstrap, problems only"  # `method` with S = 1


def _percentiles(values: np.ndarray) -> list[float]:
    tail = (1.0 - LEVEL) / 2 * 100
    low, high = np.percentile(values, [tail, 100 - tail])
    return [float(low), float(high)]


def problem_differences(arm: Mapping[str, bool], ref: Mapping[str, bool]) -> np.ndarray:
    """The per-problem differences pass(arm) - pass(ref) over the problems both were judged on (sorted
    ids); ValueError when the two verdict sets name different problems (not a paired comparison)."""
    if set(arm) != set(ref):
        only = sorted(set(arm) ^ set(ref))
        raise ValueError(
            f"the arms were judged on different held-out problems ({len(only)} not shared, e.g. {only[:3]}); a "
            f"paired comparison needs the same split"
        )
    ids = sorted(ref)
    return np.array([int(bool(arm[i])) - int(bool(ref[i])) for i in ids], dtype=np.int64)  # [n]


def resampled_means(values: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """`size` bootstrap means of `values` ([n], few distinct values: here -1, 0, 1): a resample with
    replacement of n values is, in distribution, multinomial counts of the distinct values with
    their observed shares, so it is drawn as counts (exact, and O(size * distinct) not O(size * n))."""
    distinct, counts = np.unique(values, return_counts=True)  # [u], [u]
    drawn = rng.multinomial(len(values), counts / len(values), size=size)  # [size, u]
    return drawn @ distinct.astype(float) / len(values)  # [size]


def nested_draws(per_seed: Sequence[np.ndarray], draws: int = DRAWS, seed: int = 0) -> np.ndarray:
    """`draws` bootstrap values of the mean over seeds of the mean per-problem difference: seeds
    resampled, then problems within each drawn seed (each drawn copy of a seed resampled afresh)."""
    rng = np.random.default_rng(seed)
    n_seeds = len(per_seed)
    chosen = rng.integers(n_seeds, size=(draws, n_seeds))  # [draws, S]: the seeds of each draw
    total = np.zeros(draws)  # [draws]
    for slot in range(n_seeds):
        for s in range(n_seeds):
            rows = np.flatnonzero(chosen[:, slot] == s)  # draws whose slot `slot` drew seed s
            if rows.size:
                total[rows] += resampled_means(per_seed[s], rows.size, rng)
    return total / n_seeds


def seed_interval(diffs: np.ndarray, seed: int = 0) -> list[float]:
    """The 95% percentile interval of one seed's mean difference (scipy, paired=True: the arm's and
    the reference's verdicts on a problem resampled together). `diffs` = pass(arm) - pass(ref), [n]."""
    if np.all(diffs == diffs[0]):  # every resample has the same mean: the interval is that point
        return [float(diffs[0]), float(diffs[0])]
    arm, ref = (diffs > 0).astype(float), (diffs < 0).astype(float)  # [n], [n]: same differences as the verdicts

    def mean_difference(a, r, axis=-1):
        return np.mean(a - r, axis=axis)

    result = sp.bootstrap(
        (arm, ref),
        mean_difference,
        paired=True,
        n_resamples=DRAWS,
        confidence_level=LEVEL,
        method="percentile",
        random_state=np.random.default_rng(seed),
        vectorized=True,
    )
    return [float(result.confidence_interval.low), float(result.confidence_interval.high)]


def t_interval(diffs: np.ndarray) -> dict:
    """The mean of per-seed differences `diffs` ([S], S >= 2) with its Student-t 95% interval (df =
    S - 1) and two-sided p-value against 0. Equal differences have no spread: the interval is the
    point, and p is 1 where that point is 0, else 0 (the limit of the test as the spread vanishes)."""
    mean, n = float(np.mean(diffs)), len(diffs)
    spread = float(np.std(diffs, ddof=1))
    if spread == 0.0:
        return {"mean_diff": mean, "ci95": [mean, mean], "p_value": 1.0 if mean == 0 else 0.0}
    se = spread / np.sqrt(n)
    # Student t's quantile and tail by scipy.special (= scipy.stats.t.ppf and 2 * t.sf, i.e. ttest_1samp's
    # p-value, without their per-call overhead: the coverage simulation calls this thousands of times)
    half = float(stdtrit(n - 1, 0.5 + LEVEL / 2)) * se
    p = float(2 * stdtr(n - 1, -abs(mean) / se))
    return {"mean_diff": mean, "ci95": [float(max(mean - half, -1.0)), float(min(mean + half, 1.0))], "p_value": p}


def mean_interval(per_seed: Sequence[np.ndarray]) -> dict:
    """The headline interval of the mean over S >= 2 seeds of the per-problem differences
    (`per_seed`: one [n_s] array of pass(arm) - pass(ref) per seed): Student t over the per-seed means."""
    return t_interval(np.array([float(e.mean()) for e in per_seed]))


def mcnemar_p(diffs: np.ndarray) -> float:
    """Exact two-sided McNemar p-value of one seed's per-problem differences: under no difference the
    problems only the arm passed are Binomial(discordant, 1/2)."""
    plus, minus = int(np.sum(diffs > 0)), int(np.sum(diffs < 0))
    return 1.0 if plus + minus == 0 else float(sp.binomtest(plus, plus + minus, 0.5).pvalue)


def paired_difference(
    arm: Mapping[int, Mapping[str, bool]], ref: Mapping[int, Mapping[str, bool]], seed: int = 0
) -> dict:
    """arm vs reference from their verdicts per seed ({seed: {problem id: passed}}): per-seed
    accuracies, differences and intervals, the mean difference with its seed-level interval and
    p-value, the `method` that gave them and the seed count (and, from NESTED_MIN_SEEDS seeds, the
    nested bootstrap's interval as a secondary figure)."""
    seeds = sorted(ref)
    if sorted(arm) != seeds:
        raise ValueError(
            f"the arm ran seeds {sorted(arm)}, the reference {seeds}: a paired comparison needs the same seeds"
        )
    per_seed = [problem_differences(arm[s], ref[s]) for s in seeds]
    rows = [
        {
            "seed": s,
            "n": len(d),
            "acc": float(np.mean([bool(v) for v in arm[s].values()])),
            "acc_ref": float(np.mean([bool(v) for v in ref[s].values()])),
            "diff": float(d.mean()),
            "ci95": seed_interval(d, seed),
        }
        for s, d in zip(seeds, per_seed)
    ]
    if len(seeds) == 1:
        only = rows[0]
        head = {"mean_diff": only["diff"], "ci95": only["ci95"], "p_value": mcnemar_p(per_seed[0]), "method": ONE_SEED}
    else:
        mean = float(np.mean([r["diff"] for r in rows]))
        head = mean_interval(per_seed) | {"mean_diff": mean, "method": T_OVER_SEEDS}
    out = {"seeds": rows, **head, "n_seeds": len(seeds)}
    if len(seeds) >= NESTED_MIN_SEEDS:
        out["nested_bootstrap"] = {"ci95": _percentiles(nested_draws(per_seed, DRAWS, seed)), "draws": DRAWS}
    return out


def run_half_width(acc: float, n: int) -> float:
    """Half-width of one run's 95% normal interval: 1.96 * sqrt(p (1 - p) / n)."""
    return float(1.96 * np.sqrt(acc * (1 - acc) / n))


def step_summary(seconds: Sequence[float]) -> dict:
    """Median and quartiles of measured step seconds."""
    values = np.asarray(seconds, dtype=float)
    q25, median, q75 = np.percentile(values, [25, 50, 75])
    return {"steps": int(values.size), "median_s": float(median), "q25_s": float(q25), "q75_s": float(q75)}


def timing_ratio(arm: Sequence[float], ref: Sequence[float], seed: int = 0) -> dict:
    """median(arm step seconds) / median(ref step seconds) with a 95% percentile interval (scipy,
    independent resamples of each arm's steps); {"ratio": None, "why": ...} with fewer than MIN_STEPS."""
    if min(len(arm), len(ref)) < MIN_STEPS:
        return {
            "ratio": None,
            "ci95": None,
            "why": f"fewer than {MIN_STEPS} measured steps (arm {len(arm)}, reference {len(ref)})",
        }
    a, r = np.asarray(arm, dtype=float), np.asarray(ref, dtype=float)

    def ratio(x, y, axis=-1):
        return np.median(x, axis=axis) / np.median(y, axis=axis)

    result = sp.bootstrap(
        (a, r),
        ratio,
        n_resamples=DRAWS,
        confidence_level=LEVEL,
        method="percentile",
        random_state=np.random.default_rng(seed),
        vectorized=True,
    )
    interval = [float(result.confidence_interval.low), float(result.confidence_interval.high)]
    return {"ratio": float(ratio(a, r)), "ci95": interval}
