"""Admission power on SmolLM2: can the skill bank's test admit a helpful entry within ~10 iterations,
and does a signal that needs no extra sampling (the log-probability gain) do better?

Setting: SmolLM2-135M-Instruct (a local checkpoint), the SmolLM2 example's chat prompt, held-out
problems of the frontier mix (add, sub, mul; 1-3 digit operands; words). For each held-out problem,
three candidate entries, each put in the prompt's context as a co-evolver would:

  helpful   a correct worked example of the same family and level, from the training split
            (`question + \\boxed{answer}`, the worked-example writer's layout);
  wrong     the same worked example with its answer off by one: an entry known to mislead;
  unrelated a sentence with no arithmetic in it, of similar length: an entry expected to do nothing.

Measured per (problem, entry), all on the same vLLM engine:

  pass rates   `--samples` completions without and with the entry (temperature 1): the reward gap
               p_with - p_without, the quantity the matched-halves test estimates;
  logprob gain the log-probability of the problem's own verified completions (sampled without the
               entry, the iteration's rollouts) with the entry in context minus without, per token,
               averaged over the problem's passed completions: no extra sampling, one scoring pass;
               and the same for the reference answer `\\boxed{answer}` (defined on every problem), over
               all its tokens and over the number's tokens only (the format tokens `\\boxed{`, `}` are
               raised by any entry written in that format, right or wrong).

Power, by simulation from the measured pass rates (problems resampled with replacement): the skill
bank's sequential test (`admission: sequential`, the defaults of SkillBankConfig: matched halves of
4 + 4, the stratified permutation statistic, Pocock alpha spending, futility), fed `--groups-per-iter`
matched groups per iteration for 10 iterations; the share of entries admitted. Against it, a one-sided
sign-free test on the log-probability gain: admit when the t statistic of the per-problem gains over
the same number of groups exceeds the one-sided normal quantile of `alpha`.

    .venv/bin/python bench/admission_power.py --model models/smollm2-135m-instruct [--problems 45]
    # writes bench/results/admission-power.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from coevo.coevolvers.skill_bank import Skill, SkillBank, permutation_moments  # noqa: E402
from coevo.config import CoevolverConfig, EngineConfig, SamplingConfig, load_config  # noqa: E402
from coevo.problems.arithmetic import arithmetic_splits  # noqa: E402
from coevo.problems.math_verifier import check_stated_number  # noqa: E402
from coevo.rollout.engines.vllm import VLLMEngine  # noqa: E402
from coevo.rollout.prompting import encode_prompts, prompt_renderer  # noqa: E402

RESULTS = ROOT / "bench" / "results"
FAMILIES, LEVELS = ["add", "sub", "mul"], [1, 2, 3]
UNRELATED = "Paris is the capital of France, on the river Seine."
KINDS = ("helpful", "wrong", "unrelated")
HALF = 4  # a matched group's halves: the default group of 8 split 4 + 4


def entries(problem: dict, train) -> dict[str, str]:
    """The three candidate entries for a held-out problem."""
    same = train[(train["family"] == problem["family"]) & (train["level"] == problem["level"])]
    example = same.iloc[int(problem["index"]) % len(same)]
    answer = int(example["answer"])
    return {
        "helpful": f"{example['prompt']} \\boxed{{{answer}}}",
        "wrong": f"{example['prompt']} \\boxed{{{answer + 1}}}",
        "unrelated": UNRELATED,
    }


def per_token_gain(engine, with_ids, without_ids, completions, span: slice = slice(None)) -> list[float]:
    """Mean per-token log-probability of each completion (its `span` of tokens) with the entry minus without."""
    gains = []
    scored_with = engine.score([with_ids] * len(completions), completions)
    scored_without = engine.score([without_ids] * len(completions), completions)
    for a, b in zip(scored_with, scored_without):
        a, b = a[span], b[span]
        gains.append((sum(a) - sum(b)) / max(len(a), 1))
    return gains


def answer_span(tokenizer, answer_ids: list[int]) -> slice:
    """The tokens of the number inside `\\boxed{N}`: after the tokens of `\\boxed{`, before the last."""
    opening = tokenizer("\\boxed{", add_special_tokens=False)["input_ids"]
    if answer_ids[: len(opening)] != opening:
        raise ValueError(f"`\\boxed{{` does not tokenise as a prefix of {tokenizer.decode(answer_ids)!r}")
    return slice(len(opening), len(answer_ids) - 1)


def measure(model: str, n_problems: int, samples: int, seed: int) -> list[dict]:
    example = load_config(ROOT / "examples" / "smollm2.yaml")
    splits = arithmetic_splits(FAMILIES, LEVELS, 90, n_problems, 0, seed, "words")
    train, test = splits["train"], splits["test"].reset_index(drop=True)
    engine = VLLMEngine(model, EngineConfig(kind="vllm", batch_size=256, max_model_len=512), seed=seed)
    renderer = prompt_renderer(example.prompt, engine.tokenizer, model)
    engine.add_special_tokens = renderer.add_special_tokens
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=24)
    problems = [dict(row) | {"index": i} for i, row in test.iterrows()]
    contexts = [[()] + [(text,) for text in entries(p, train).values()] for p in problems]
    texts = [renderer.render(p, ctx) for p, variants in zip(problems, contexts) for ctx in variants]
    outputs = engine.generate(texts, samples, sampling, seed)
    ids = encode_prompts(engine.tokenizer, texts, renderer.add_special_tokens)
    answer_ids = [
        engine.tokenizer(f"\\boxed{{{p['answer']}}}", add_special_tokens=False)["input_ids"] for p in problems
    ]
    rows = []
    width = len(KINDS) + 1
    for i, problem in enumerate(problems):
        block = outputs[i * width : (i + 1) * width]
        passed = [[check_stated_number(g.text, str(problem["answer"])).passed for g in group] for group in block]
        verified = [g.token_ids for g, ok in zip(block[0], passed[0]) if ok]
        base_ids = ids[i * width]
        for k, kind in enumerate(KINDS, start=1):
            entry_ids = ids[i * width + k]
            own = per_token_gain(engine, entry_ids, base_ids, verified) if verified else []
            reference = per_token_gain(engine, entry_ids, base_ids, [answer_ids[i]])[0]
            number = per_token_gain(
                engine, entry_ids, base_ids, [answer_ids[i]], answer_span(engine.tokenizer, answer_ids[i])
            )[0]
            rows.append(
                {
                    "problem": problem["id"],
                    "family": problem["family"],
                    "level": int(problem["level"]),
                    "kind": kind,
                    "p_without": float(np.mean(passed[0])),
                    "p_with": float(np.mean(passed[k])),
                    "own_gain": statistics.fmean(own) if own else None,
                    "reference_gain": reference,
                    "number_gain": number,
                }
            )
    engine.close()
    return rows


def reward_test_admits(groups: list[tuple[float, float]], iterations: int, per_iter: int, rng) -> bool:
    """The skill bank's sequential test on simulated matched groups (p_without, p_with per group)."""
    bank = SkillBank(CoevolverConfig(kind="skill_bank"), 0)
    skill = Skill(id="s", text="", family="", key="", source="")
    report = {"admitted": [], "rejected": []}
    for it in range(iterations):
        for p0, p1 in groups[it * per_iter : (it + 1) * per_iter]:
            base = pd.Series(rng.random(HALF) < p0, dtype=float)
            probe = pd.Series(rng.random(HALF) < p1, dtype=float)
            skill.record(
                float(probe.mean() - base.mean()), bank.params.utility_decay, *permutation_moments(base, probe)
            )
        bank._judge(skill, it, report)
        if skill.status != "trial":
            return skill.status == "active"
    return False


def gain_test_admits(gains: list[float], alpha: float) -> bool:
    """One-sided t test of the mean per-problem log-probability gain > 0 (normal quantile)."""
    if len(gains) < 2 or statistics.stdev(gains) == 0:
        return False
    t = statistics.fmean(gains) / (statistics.stdev(gains) / math.sqrt(len(gains)))
    return t > statistics.NormalDist().inv_cdf(1 - alpha)


def power(rows: list[dict], iterations: int, per_iter: int, trials: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    alpha = SkillBank(CoevolverConfig(kind="skill_bank"), 0).params.alpha
    out = {}
    n = iterations * per_iter
    for kind in KINDS:
        mine = [r for r in rows if r["kind"] == kind]
        own = [r for r in mine if r["own_gain"] is not None]
        reward = gain_own = gain_ref = gain_number = 0
        for _ in range(trials):
            drawn = [mine[j] for j in rng.integers(len(mine), size=n)]
            reward += reward_test_admits([(r["p_without"], r["p_with"]) for r in drawn], iterations, per_iter, rng)
            gain_ref += gain_test_admits([r["reference_gain"] for r in drawn], alpha)
            gain_number += gain_test_admits([r["number_gain"] for r in drawn], alpha)
            if own:
                gain_own += gain_test_admits([own[j]["own_gain"] for j in rng.integers(len(own), size=n)], alpha)
        out[kind] = {
            "reward_test": reward / trials,
            "own_gain_test": gain_own / trials if own else None,
            "reference_gain_test": gain_ref / trials,
            "number_gain_test": gain_number / trials,
        }
    return out


def summary(rows: list[dict]) -> dict:
    from scipy import stats

    out = {}
    for kind in KINDS:
        mine = [r for r in rows if r["kind"] == kind]
        gaps = [r["p_with"] - r["p_without"] for r in mine]
        own = [r["own_gain"] for r in mine if r["own_gain"] is not None]
        paired = [(r["own_gain"], r["p_with"] - r["p_without"]) for r in mine if r["own_gain"] is not None]
        out[kind] = {
            "problems": len(mine),
            "p_without": statistics.fmean(r["p_without"] for r in mine),
            "p_with": statistics.fmean(r["p_with"] for r in mine),
            "reward_gap": _mean_ci(gaps),
            "own_gain": _mean_ci(own) if len(own) > 1 else None,
            "problems_with_a_verified_completion": len(own),
            "reference_gain": _mean_ci([r["reference_gain"] for r in mine]),
            "number_gain": _mean_ci([r["number_gain"] for r in mine]),
            "spearman_own_gain_vs_reward_gap": (
                float(stats.spearmanr(*zip(*paired)).statistic) if len(paired) > 2 else None
            ),
        }
    return out


def _mean_ci(values: list[float]) -> dict:
    from scipy import stats

    mean = statistics.fmean(values)
    half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return {"mean": mean, "ci95": [mean - half, mean + half]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="a local Hugging Face checkpoint (coevo import-model)")
    parser.add_argument("--problems", type=int, default=45, help="held-out problems (spread over the 9 cells)")
    parser.add_argument("--samples", type=int, default=16, help="completions per problem and entry")
    parser.add_argument(
        "--groups-per-iter", type=int, default=2, help="matched groups a trial entry gets per iteration"
    )
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--trials", type=int, default=2000, help="simulated admission runs per entry kind")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS / "admission-power.json")
    args = parser.parse_args()
    rows = measure(args.model, args.problems, args.samples, args.seed)
    result = {
        "settings": vars(args) | {"out": str(args.out)},
        "summary": summary(rows),
        "power_within_iterations": power(rows, args.iterations, args.groups_per_iter, args.trials, args.seed),
        "rows": rows,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("summary", "power_within_iterations")}, indent=1))


if __name__ == "__main__":
    main()
