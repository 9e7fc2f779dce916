"""Held-out evaluation: greedy accuracy and sampled pass@k per family, with and without skills.

pass@k uses exactly k samples per problem, for which the unbiased estimator of Chen et al. (2021)
reduces to "any of the k passed". "With skills" prepends what the co-evolver retrieves for each
problem (`context_for`); the headline `eval/acc` is always skill-free, as the student is deployed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pandas as pd

from coevo.config import SamplingConfig
from coevo.engines.base import Engine
from coevo.problems.verifier import MathVerifier
from coevo.prompting import render_prompt


def _per_family(name: str, test: pd.DataFrame, passed: Sequence[bool]) -> dict[str, float]:
    frame = pd.DataFrame({"family": test["family"].to_numpy(), "passed": list(passed)})
    metrics = {f"eval/{name}": float(frame["passed"].mean())}
    metrics.update({f"eval/{name}/{family}": float(g["passed"].mean()) for family, g in frame.groupby("family")})
    return metrics


def greedy_passed(engine: Engine, prompts: Sequence[str], answers: Sequence[str], max_new_tokens: int) -> list[bool]:
    greedy = SamplingConfig(temperature=0.0, top_p=1.0, max_new_tokens=max_new_tokens)
    completions = [g[0].text for g in engine.generate(prompts, 1, greedy, seed=0)]
    return [r.passed for r in MathVerifier().score(answers, completions)]


def evaluate(
    engine: Engine,
    test: pd.DataFrame,
    sampling: SamplingConfig,
    pass_k: int,
    seed: int,
    context_for: Callable[[dict], list[str]] | None = None,
) -> dict[str, float]:
    """Metrics namespaced eval/: acc, acc_skills (when context_for is given), pass@k; each per family."""
    questions, answers = list(test["prompt"]), list(test["answer"])
    metrics = _per_family("acc", test, greedy_passed(engine, questions, answers, sampling.max_new_tokens))
    if context_for is not None:
        prompts = [render_prompt(row["prompt"], context_for(row)) for row in test.to_dict("records")]
        metrics.update(_per_family("acc_skills", test, greedy_passed(engine, prompts, answers, sampling.max_new_tokens)))
    samples = engine.generate(questions, pass_k, sampling, seed)
    verifier = MathVerifier()
    any_passed = [any(r.passed for r in verifier.score([a] * pass_k, [g.text for g in group])) for a, group in zip(answers, samples)]
    metrics.update(_per_family(f"pass@{pass_k}", test, any_passed))
    return metrics
