"""How often a comparison's 95% interval excludes 0 when the arms do not differ: simulated null experiments.

The model (one experiment): `n_problems` test problems with difficulties b_i ~ N(0, 1.5) on the logit
scale, shared by every run of the experiment (the comparison's one test split). Each run (arm a, seed
s) shifts every problem's logit by its own seed effect u_{a,s} ~ N(0, seed_sd), independent across
runs: a run's whole trajectory, and so its accuracy, depends on its seed. Run (a, s) passes problem i
with probability sigmoid(b_i + u_{a,s}), independently. The two arms are identical in distribution
(swapping them changes nothing), so the true difference is exactly 0, and an interval that excludes
0 is a false positive: at 95% a calibrated method does so in 5% of experiments. seed_sd = 0 leaves
only problem sampling; 0.15 moves one run's accuracy by about 2.7 points (sd) and a per-seed
difference by about 3.8 (before problem sampling's ~2.9 at 400 problems), about the spread of the
committed SmolLM2 frontier runs' per-seed differences (+1.0 / +5.2 / +7.7); 0.3 and 0.6 double it
and double it again.

What an interval method sees is what `coevo compare` sees: per seed, the per-problem differences
pass(arm, i) - pass(ref, i) (`stats.problem_differences`). Methods measured:
  t       `stats.mean_interval`, the table's headline (Student t over the per-seed means);
  nested  the nested paired bootstrap of earlier versions (`stats.nested_draws`, percentiles).

    .venv/bin/python -m coevo.compare.coverage                 # both methods, 3/5/10 seeds x sd 0-0.6
    .venv/bin/python -m coevo.compare.coverage --methods t     # the headline method only (seconds)
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator, Sequence

import numpy as np
from scipy.special import expit

from coevo.compare import stats

SEEDS = (3, 5, 10)
SEED_SDS = (0.0, 0.15, 0.3, 0.6)
DIFFICULTY_SD = 1.5


def null_experiments(
    n_seeds: int, seed_sd: float, reps: int, rng: np.random.Generator, n_problems: int = 400, chunk: int = 100
) -> Iterator[list[np.ndarray]]:
    """`reps` null experiments (see the module docstring), each as its per-seed per-problem differences
    (drawn `chunk` experiments at a time)."""
    for start in range(0, reps, chunk):
        size = min(chunk, reps - start)
        logits = rng.normal(0.0, DIFFICULTY_SD, (size, 1, 1, n_problems))  # [rep, 1, 1, n]
        shift = rng.normal(0.0, seed_sd, (size, 2, n_seeds, 1)) if seed_sd > 0 else np.zeros((size, 2, n_seeds, 1))
        passed = rng.random((size, 2, n_seeds, n_problems)) < expit(logits + shift)  # [rep, arm, S, n]
        diffs = passed[:, 0].astype(np.int64) - passed[:, 1]  # [rep, S, n]
        yield from (list(experiment) for experiment in diffs)


def false_positive_rate(
    interval: Callable[[Sequence[np.ndarray]], Sequence[float]],
    n_seeds: int,
    seed_sd: float,
    reps: int,
    seed: int = 0,
) -> float:
    """The share of `reps` null experiments whose 95% interval (`interval`: per-seed differences ->
    [low, high]) excludes 0."""
    rng = np.random.default_rng([seed, n_seeds, int(round(seed_sd * 1000))])
    hits = 0
    for per_seed in null_experiments(n_seeds, seed_sd, reps, rng):
        low, high = interval(per_seed)
        hits += low > 0 or high < 0
    return hits / reps


def t_method(per_seed: Sequence[np.ndarray]) -> list[float]:
    return stats.mean_interval(per_seed)["ci95"]


def nested_method(per_seed: Sequence[np.ndarray], draws: int = stats.DRAWS) -> list[float]:
    tail = (1 - stats.LEVEL) / 2 * 100
    return [float(v) for v in np.percentile(stats.nested_draws(per_seed, draws, 0), [tail, 100 - tail])]


METHODS = {"t": t_method, "nested": nested_method}


def table(methods: Sequence[str], reps: int, seed: int = 0) -> str:
    """A markdown table: per seed count and seed-effect sd, each method's false-positive rate (%)."""
    head = "| seeds | seed-effect sd (logit) | " + " | ".join(f"{m}: excludes 0, %" for m in methods) + " |"
    lines = [head, "|---" * (2 + len(methods)) + "|"]
    for n_seeds in SEEDS:
        for sd in SEED_SDS:
            rates = [100 * false_positive_rate(METHODS[m], n_seeds, sd, reps, seed) for m in methods]
            lines.append(f"| {n_seeds} | {sd} | " + " | ".join(f"{r:.1f}" for r in rates) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", nargs="+", choices=sorted(METHODS), default=["nested", "t"])
    parser.add_argument("--reps", type=int, default=1000, help="null experiments per cell (default 1000)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(f"{args.reps} null experiments per cell, 400 problems, nominal 5% (coevo/compare/coverage.py)")
    print(table(args.methods, args.reps, args.seed))


if __name__ == "__main__":
    main()
