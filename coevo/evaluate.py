"""Held-out evaluation: greedy accuracy and sampled pass@k per family, with and without co-evolver context.

pass@k uses exactly k samples per problem, for which the unbiased estimator of Chen et al. (2021)
reduces to "any of the k passed". "With context" (`eval/acc_context`) adds what the co-evolvers retrieve for each
problem (`context_for`) as the prompt format places context (coevo/rollout/prompting.py); the headline `eval/acc` is
always context-free, as the student is deployed. The validation split gets the same greedy accuracy under `val/`
(`validate`): keep-best and the `best` alias read it, never the test split's `eval/acc`. Every completion is judged by
its problem's family verifier (`coevo.verification.stage.score_rows`, the one the verification stage uses): exact match
for math, the sandboxed hidden tests for code. Constraint problems also get `eval/gold_acc`, their gold checks on the
greedy completions (`gold_metrics`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pandas as pd

from coevo.config import Config, SamplingConfig
from coevo.problems.constraints import KINDS as CONSTRAINT_KINDS
from coevo.problems.constraints import score_constraints
from coevo.rollout.engines import with_prompt_format
from coevo.rollout.engines.base import Engine
from coevo.rollout.prompting import prompt_renderer
from coevo.verification.stage import score_rows

VAL = "val"  # namespace of the validation metrics: val/acc, val/acc/<family>


def _per_family(name: str, test: pd.DataFrame, passed: Sequence[bool]) -> dict[str, float]:
    frame = pd.DataFrame({"family": test["family"].to_numpy(), "passed": list(passed)})
    metrics = {f"eval/{name}": float(frame["passed"].mean())}
    metrics.update({f"eval/{name}/{family}": float(g["passed"].mean()) for family, g in frame.groupby("family")})
    return metrics


def greedy_completions(engine: Engine, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
    greedy = SamplingConfig(temperature=0.0, top_p=1.0, max_new_tokens=max_new_tokens)
    return [g[0].text for g in engine.generate(prompts, 1, greedy, seed=0)]


def passed(rows: pd.DataFrame, completions: Sequence[str], cfg: Config) -> list[bool]:
    """Whether each completion passes the verifier of its row's family (problems-table rows)."""
    return [r.passed for r in score_rows(rows, completions, cfg)]


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
    renderer = prompt_renderer(cfg.prompt, with_prompt_format(engine, cfg).tokenizer)
    greedy = greedy_completions(engine, renderer.render_all(val.to_dict("records")), cfg.sampling.max_new_tokens)
    greedy_passed = passed(val, greedy, cfg)
    if verdicts is not None:
        verdicts.update(zip(val["id"].astype(str), map(bool, greedy_passed)))
    return {key.replace("eval/", f"{VAL}/", 1): value for key, value in _per_family("acc", val, greedy_passed).items()}


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
    renderer = prompt_renderer(
        cfg.prompt, with_prompt_format(engine, cfg).tokenizer
    )  # prompt.format (coevo/rollout/prompting.py)
    rows, max_new_tokens, k = test.to_dict("records"), cfg.sampling.max_new_tokens, cfg.eval.pass_k
    questions = renderer.render_all(rows)
    greedy = greedy_completions(engine, questions, max_new_tokens)
    greedy_passed = passed(test, greedy, cfg)
    metrics = _per_family("acc", test, greedy_passed)
    if verdicts is not None:
        verdicts.update(zip(test["id"].astype(str), map(bool, greedy_passed)))
    metrics.update(gold_metrics(test, greedy))
    if context_for is not None:
        prompts = [renderer.render(row, context_for(row)) for row in rows]
        metrics.update(
            _per_family("acc_context", test, passed(test, greedy_completions(engine, prompts, max_new_tokens), cfg))
        )
    samples = engine.generate(questions, k, cfg.sampling, seed)  # [len(test)][k]
    repeated = test.iloc[[i for i in range(len(test)) for _ in range(k)]].reset_index(
        drop=True
    )  # problem-major, as `samples` flattens
    sampled = passed(repeated, [g.text for group in samples for g in group], cfg)
    metrics.update(_per_family(f"pass@{k}", test, [any(sampled[i * k : (i + 1) * k]) for i in range(len(test))]))
    return metrics
