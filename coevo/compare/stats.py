"""The statistics of a paired comparison: per-seed differences, a nested paired bootstrap, timing ratios.

An arm is compared with the reference arm seed by seed: both ran from the same seed and were judged
on the same held-out problems, so the figure is the per-seed difference
d_s = acc(arm, s) - acc(ref, s) and its mean over seeds, D = mean_s d_s.

The 95% interval of D is a paired bootstrap in two levels, 10,000 draws, 2.5/97.5 percentiles:
  1. resample the seeds with replacement;
  2. within each drawn seed, resample its test problems with replacement, the arm's and the
     reference's verdicts on a problem moving together (the resampled unit is the per-problem
     difference e_i = pass(arm, i) - pass(ref, i), in {-1, 0, 1}).
scipy.stats.bootstrap cannot express the nesting (its resamples are of one level of observations),
so the two-level draw is written out here (`nested_draws`); the per-seed intervals, one level with
paired=True, are scipy's. With one seed, level 1 is a no-op and the interval is the within-seed one.

Timing ratios: each arm's measured training seconds per iteration (>= MIN_STEPS steps), their
median and quartiles, and the ratio of the arm's median to the reference's with a percentile
bootstrap interval (scipy, the two arms' steps resampled independently: steps are not paired).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from scipy import stats as sp

DRAWS = 10_000
LEVEL = 0.95
MIN_STEPS = 5  # timing ratios need at least this many measured steps per arm


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


def paired_difference(
    arm: Mapping[int, Mapping[str, bool]], ref: Mapping[int, Mapping[str, bool]], seed: int = 0
) -> dict:
    """arm vs reference from their verdicts per seed ({seed: {problem id: passed}}): per-seed
    accuracies, differences and intervals, the mean difference and its nested-bootstrap interval."""
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
    mean = float(np.mean([row["diff"] for row in rows]))
    return {"seeds": rows, "mean_diff": mean, "ci95": _percentiles(nested_draws(per_seed, DRAWS, seed)), "draws": DRAWS}


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
