"""Held-out evaluation: greedy accuracy and sampled pass@k per family, with and without co-evolver context.

pass@k uses exactly k samples per problem, for which the unbiased estimator of Chen et al. (2021)
reduces to "any of the k passed". The pass@k curve (`sampled_pass_curve`, `coevo eval --pass-curve N`,
off by default: it costs N samples per problem) draws N >= 16 samples per problem and gives k = 1..16
by the same estimator in full, 1 - C(N - c, k) / C(N, k) for a problem with c of N correct (the mean
over problems), each k with a 95% percentile interval over problems resampled (scipy.stats.bootstrap);
it covers problem sampling only, one checkpoint and one sampling seed. `curve_difference` pairs two
checkpoints' curves problem by problem (trained - base), the per-problem differences resampled.

"With context" (`eval/acc_context`) adds what the co-evolvers retrieve for each
problem (`context_for`) as the prompt format places context (coevo/rollout/prompting.py); the headline `eval/acc` is
always context-free, as the student is deployed. The validation split gets the same greedy accuracy under `val/`
(`validate`): keep-best and the `best` alias read it, never the test split's `eval/acc`. Every completion is judged by
its problem's family verifier (`coevo.verification.stage.score_rows`, the one the verification stage uses): exact match
for math, the sandboxed hidden tests for code. Constraint problems also get `eval/gold_acc`, their gold checks on the
greedy completions (`gold_metrics`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats as sp

from coevo import progress
from coevo.config import Config, SamplingConfig
from coevo.problems.constraints import KINDS as CONSTRAINT_KINDS
from coevo.problems.constraints import score_constraints
from coevo.rollout.engines.base import Engine
from coevo.rollout.episodes import sample
from coevo.seeding import derive_seed
from coevo.types import Generation
from coevo.verification.reward_calls import Episodes
from coevo.verification.stage import score_rows

VAL = "val"  # namespace of the validation metrics: val/acc, val/acc/<family>
CURVE_K = 16  # the pass@k curve's largest k (k = 1..CURVE_K); it needs at least as many samples per problem
DRAWS = 10_000  # bootstrap resamples of each pass@k interval


def _per_family(name: str, test: pd.DataFrame, passed: Sequence[bool]) -> dict[str, float]:
    frame = pd.DataFrame({"family": test["family"].to_numpy(), "passed": list(passed)})
    metrics = {f"eval/{name}": float(frame["passed"].mean())}
    metrics.update({f"eval/{name}/{family}": float(g["passed"].mean()) for family, g in frame.groupby("family")})
    return metrics


def greedy_completions(engine: Engine, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
    """Greedy completions of rendered prompts, one engine call (no episodes: see `greedy_answers`)."""
    greedy = SamplingConfig(temperature=0.0, top_p=1.0, max_new_tokens=max_new_tokens)
    return [g[0].text for g in engine.generate(prompts, 1, greedy, seed=0)]


def greedy_answers(
    engine: Engine, cfg: Config, rows: Sequence[dict], contexts: Sequence[Sequence[str]] | None = None
) -> list[Generation]:
    """The greedy sample of each problem row (an episode, when the run has tools: its text is the last turn)."""
    greedy = SamplingConfig(temperature=0.0, top_p=1.0, max_new_tokens=cfg.sampling.max_new_tokens)
    return [g[0] for g in sample(engine, cfg, rows, contexts, 1, greedy, seed=0)]


def passed(rows: pd.DataFrame, completions: Sequence[str], cfg: Config, episodes: Episodes | None = None) -> list[bool]:
    """Whether each completion passes the verifier of its row's family (problems-table rows)."""
    return [r.passed for r in score_rows(rows, completions, cfg, episodes=episodes)]


def judged(rows: pd.DataFrame, samples: Sequence[Generation], cfg: Config) -> list[bool]:
    """`passed` of samples: their texts, and for episodes their turns and environments (reward plugins read them)."""
    episodes = Episodes([s.messages for s in samples], [s.environment for s in samples]) if cfg.episodes else None
    return passed(rows, [s.text for s in samples], cfg, episodes)


def gold_metrics(test: pd.DataFrame, completions: Sequence[str]) -> dict[str, float]:
    """eval/gold_acc (and per family): the hidden gold checks of the constraint problems on the greedy
    completions, whatever `rewards:` trains on (a rubric-trained run is measured by them); {} when the
    split holds no constraint problem."""
    is_gold = test["family"].isin(list(CONSTRAINT_KINDS)).to_numpy()
    if not is_gold.any():
        return {}
    rows = test[is_gold].reset_index(drop=True)
    verdicts = score_constraints(rows, [c for c, g in zip(completions, is_gold) if g])
    return _per_family("gold_acc", rows, [v.passed for v in verdicts])


def validate(
    engine: Engine, val: pd.DataFrame, cfg: Config, verdicts: dict[str, bool] | None = None
) -> dict[str, float]:
    """val/acc and val/acc/<family>: context-free greedy accuracy on the validation split, the figure
    every choice made by looking at results reads (keep-best retention, the `best` alias, a
    comparison's choice between arms), so the test split's eval/acc stays untouched by them.
    `verdicts`, when given, is filled with each validation problem id's greedy verdict."""
    with progress.task(f"greedy answers to {len(val)} validation problems"):
        greedy = greedy_answers(engine, cfg, val.to_dict("records"))
    greedy_passed = judged(val, greedy, cfg)
    if verdicts is not None:
        verdicts.update(zip(val["id"].astype(str), map(bool, greedy_passed)))
    return {key.replace("eval/", f"{VAL}/", 1): value for key, value in _per_family("acc", val, greedy_passed).items()}


def eval_seed(seed: int, iteration: int) -> int:
    """The sampling seed of the held-out evaluation of checkpoint `iteration` (0: the bootstrap) under
    params' `seed`: the same in training (`coevo.stages.evaluate.evaluate_stage`) and in `coevo eval`, which reads
    the iteration from the checkpoint's coevo.json (0 for a directory without one), so one checkpoint
    gets one pass@k wherever it is evaluated (docs/evaluation.md)."""
    return derive_seed(seed, iteration, "eval")


def evaluate(
    engine: Engine,
    test: pd.DataFrame,
    cfg: Config,
    seed: int,
    context_for: Callable[[dict], list[str]] | None = None,
    verdicts: dict[str, bool] | None = None,
) -> dict[str, float]:
    """Metrics namespaced eval/: acc, acc_context (when context_for is given), pass@k (k =
    eval.pass_k samples under `sampling`); each per family. `test` is a problems-table split.
    `verdicts`, when given, is filled with each problem id's greedy verdict (True = passed): the
    per-problem outcomes behind eval/acc that a paired comparison pairs across arms."""
    rows, k = test.to_dict("records"), cfg.eval.pass_k
    with progress.task(f"greedy answers to {len(rows)} problems"):
        greedy = greedy_answers(engine, cfg, rows)
    greedy_passed = judged(test, greedy, cfg)
    metrics = _per_family("acc", test, greedy_passed)
    if verdicts is not None:
        verdicts.update(zip(test["id"].astype(str), map(bool, greedy_passed)))
    metrics.update(gold_metrics(test, [g.text for g in greedy]))
    if context_for is not None:
        with progress.task(f"greedy answers with the co-evolvers' context to {len(rows)} problems"):
            completions = greedy_answers(engine, cfg, rows, [context_for(row) for row in rows])
        metrics.update(_per_family("acc_context", test, judged(test, completions, cfg)))
    with progress.task(f"{k} samples of each of {len(rows)} problems (pass@{k})"):
        samples = sample(engine, cfg, rows, None, k, cfg.sampling, seed)  # [len(test)][k]
    repeated = test.iloc[[i for i in range(len(test)) for _ in range(k)]].reset_index(
        drop=True
    )  # problem-major, as `samples` flattens
    sampled = judged(repeated, [g for group in samples for g in group], cfg)
    metrics.update(_per_family(f"pass@{k}", test, [any(sampled[i * k : (i + 1) * k]) for i in range(len(test))]))
    return metrics


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one problem with c of n samples correct (Chen et al. 2021): 1 - C(n-c, k)
    / C(n, k), the chance that k samples drawn without replacement from the n include a correct one,
    computed as 1 - prod_{i = n-c+1..n} (1 - k / i) (the same number without huge binomials)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:  # every k-subset holds a correct sample
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def mean_interval(values: np.ndarray, seed: int = 0) -> list[float]:
    """The 95% percentile interval of the mean of `values` ([P], one per problem), problems resampled
    (scipy.stats.bootstrap); the point itself when every value is equal (no resample differs)."""
    if np.all(values == values[0]):
        return [float(values[0]), float(values[0])]
    result = sp.bootstrap(
        (values,),
        np.mean,
        n_resamples=DRAWS,
        confidence_level=0.95,
        method="percentile",
        random_state=np.random.default_rng(seed),
        vectorized=True,
    )
    return [float(result.confidence_interval.low), float(result.confidence_interval.high)]


def _curve_values(correct: Sequence[int], n: int) -> np.ndarray:
    """[P, CURVE_K]: each problem's pass@k for k = 1..CURVE_K."""
    if n < CURVE_K:
        raise ValueError(f"a pass@k curve to k={CURVE_K} needs at least {CURVE_K} samples per problem, got {n}")
    return np.array([[pass_at_k(n, int(c), k) for k in range(1, CURVE_K + 1)] for c in correct])


def pass_curve(correct: Mapping[str, int], n: int, seed: int = 0) -> dict:
    """pass@k for k = 1..CURVE_K from each problem's count of correct samples out of n ({id: c}), the
    mean over problems with its 95% interval per k, and the counts themselves."""
    values = _curve_values(list(correct.values()), n)  # [P, K]
    return {
        "samples_per_problem": n,
        "problems": len(correct),
        "k": list(range(1, CURVE_K + 1)),
        "pass_at_k": [float(v) for v in values.mean(axis=0)],
        "ci95": [mean_interval(values[:, j], seed) for j in range(CURVE_K)],
        "correct": dict(correct),
    }


def curve_difference(trained: dict, base: dict, seed: int = 0) -> dict:
    """trained - base pass@k per k, paired problem by problem (two `pass_curve` results on the same
    problems and sample count): the mean difference with the 95% interval of the per-problem
    differences resampled; ValueError when the problems or sample counts differ."""
    if set(trained["correct"]) != set(base["correct"]) or trained["samples_per_problem"] != base["samples_per_problem"]:
        raise ValueError("a paired pass@k difference needs both curves on the same problems with the same samples")
    ids, n = sorted(base["correct"]), base["samples_per_problem"]
    diffs = _curve_values([trained["correct"][i] for i in ids], n) - _curve_values([base["correct"][i] for i in ids], n)
    return {
        "k": list(range(1, CURVE_K + 1)),
        "diff": [float(v) for v in diffs.mean(axis=0)],
        "ci95": [mean_interval(diffs[:, j], seed) for j in range(CURVE_K)],
    }


def sampled_pass_curve(engine: Engine, test: pd.DataFrame, cfg: Config, n: int, seed: int) -> dict:
    """The pass@k curve of the engine's policy on `test`: n samples per problem under `sampling`
    (context-free prompts, as eval/acc), each judged by its family's verifier."""
    if n < CURVE_K:
        raise ValueError(f"--pass-curve {n}: the curve to pass@{CURVE_K} needs at least {CURVE_K} samples per problem")
    samples = sample(engine, cfg, test.to_dict("records"), None, n, cfg.sampling, seed)  # [P][n]
    repeated = test.iloc[[i for i in range(len(test)) for _ in range(n)]].reset_index(drop=True)  # problem-major
    verdicts = judged(repeated, [g for group in samples for g in group], cfg)
    counts = {str(pid): int(sum(verdicts[i * n : (i + 1) * n])) for i, pid in enumerate(test["id"])}
    return pass_curve(counts, n, seed)


def curve_markdown(curves: Mapping[str, dict], difference: dict | None = None) -> str:
    """A table of pass@k per k for each named curve (e.g. base, trained), and their paired difference."""
    names = list(curves)
    head = (
        "| k | "
        + " | ".join(f"{name} pass@k [95% CI]" for name in names)
        + (" | difference, points [95% CI] |" if difference else " |")
    )
    lines = [head, "|---" * (1 + len(names) + bool(difference)) + "|"]
    for j, k in enumerate(range(1, CURVE_K + 1)):
        cells = [f"{c['pass_at_k'][j]:.3f} [{c['ci95'][j][0]:.3f}, {c['ci95'][j][1]:.3f}]" for c in curves.values()]
        if difference:
            low, high = difference["ci95"][j]
            cells.append(f"{100 * difference['diff'][j]:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}]")
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
