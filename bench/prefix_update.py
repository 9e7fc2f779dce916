"""The policy-update stage alone on saved rollouts: shared prefix per minibatch vs per group, and PMD
(opsd with an empty memory) vs GRPO, on the SmolLM2 example's setting.

Setting: examples/smollm2.yaml (SmolLM2-135M-Instruct, LoRA r16 all-linear, chat format, 16 problems
x 8 samples, optim.minibatch_size 64), completions of at most --tokens (24) tokens. The rollouts are
sampled once by the HF engine with the base model and saved (bench/results/prefix_update/); the
update then runs as with the vLLM engine (`engine_is_trainer=False`: the pi_old pass scores every
row). Rewards are the verifier's; `objective.drop_zero_variance` is off so every arm trains all 128
rows (the example's batch, whatever the base model gets right).

Arms (each its own copy of the policy and optimizer; arms interleaved A B C D A B C D ...):
- grpo-minibatch: GRPO, `policy.shared_prefix: minibatch` (the update before this bench existed)
- grpo-group:     GRPO, `policy.shared_prefix: group` (whole groups per minibatch)
- pmd-group:      opsd + an empty procedural memory (teacher prompt = student prompt: the teacher
                  reuses the student's pass), group
- pmd-teacher:    opsd whose teacher context is one empty line, so every row runs the teacher pass
                  (what PMD with an empty memory cost before the reuse), group

    .venv/bin/python bench/prefix_update.py --model models/smollm2-135m-instruct [--steps 5]
        [--tokens 24] [--threads 1] [--arms grpo-minibatch,grpo-group,pmd-group,pmd-teacher]

Also measures this machine's float32 matmul GFLOP/s at --threads and reports each arm's estimated
FLOPs (2 x weights x tokens per forward, LoRA backward ~ one forward: input gradients only).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd
import torch

from bench.engine_bound import matmul_gflops  # noqa: E402
from coevo.coevolvers import ProceduralMemory, build_coevolver
from coevo.config import CoevolverConfig, load_config
from coevo.io import write_json
from coevo.model.checkpoint import load_policy
from coevo.model.lora import apply_lora
from coevo.prepare import prepare_problems
from coevo.rollout.engines.hf import HFEngine
from coevo.rollout.stage import run_rollouts
from coevo.update.objectives import build_objective
from coevo.update.stage import build_optimizer, policy_update
from coevo.update.teacher import teacher_context
from coevo.verification.stage import verify_rollouts

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "prefix_update"
ARMS = {
    "grpo-minibatch": ("grpo", "minibatch", None),
    "grpo-group": ("grpo", "group", None),
    "pmd-group": ("opsd", "group", "empty-memory"),
    "pmd-teacher": ("opsd", "group", "empty-line"),
}


def config(args, objective: str = "grpo", mode: str = "minibatch", data_dir: str = "data"):
    overrides = {
        "policy": {"checkpoint": str(args.model), "shared_prefix": mode, "threads": args.threads},
        "sampling": {"max_new_tokens": args.tokens},
        "objective": {"name": objective, "drop_zero_variance": False, "teacher": {"sources": ["coevolver"]}},
        "problems": {"data_dir": data_dir},
    }
    import yaml

    from coevo.config import deep_merge

    raw = deep_merge(yaml.safe_load((ROOT / "examples" / "smollm2.yaml").read_text()), overrides)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump(raw, f)
    return load_config(f.name)


def saved_rollouts(args) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The example's first batch, sampled once by the HF engine and kept under OUT."""
    rollouts, rewards = OUT / f"rollouts_{args.tokens}.parquet", OUT / f"rewards_{args.tokens}.parquet"
    if rollouts.is_file() and rewards.is_file():
        return pd.read_parquet(rollouts), pd.read_parquet(rewards)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = config(args, data_dir=tmp)
        train, _ = prepare_problems(cfg)
        batch = train.iloc[: cfg.rollout.problems_per_iter]
        policy = load_policy(args.model, "cpu")
        variants = build_coevolver(cfg.coevolver_list[0], cfg.seed).plan(batch, cfg.rollout.group_size)
        frame = run_rollouts(HFEngine(policy), variants, batch, cfg, 1, "v0")
        scored = verify_rollouts(frame, batch, cfg)
    OUT.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(rollouts)
    scored.to_parquet(rewards)
    return frame, scored


class Arm:
    def __init__(self, name: str, args):
        objective, mode, teacher = ARMS[name]
        self.name, self.cfg = name, config(args, objective, mode)
        policy = load_policy(args.model, "cpu")
        policy.model = apply_lora(policy.model, self.cfg.policy.lora, seed=0)
        self.policy, self.optimizer = policy, build_optimizer(policy.model, self.cfg)
        self.objective = build_objective(self.cfg.objective)
        memory = ProceduralMemory(CoevolverConfig(kind="memory"), seed=0)
        empty = teacher_context(["coevolver"], memory)
        self.teacher = {"empty-memory": empty, "empty-line": lambda row: [""]}.get(teacher)
        self.times: list[float] = []
        self.stats: dict = {}

    def step(self, rollouts: pd.DataFrame, rewards: pd.DataFrame, seed: int) -> None:
        start = time.perf_counter()
        self.stats = policy_update(
            self.policy, self.optimizer, self.objective, rollouts, rewards, self.cfg, seed, teacher=self.teacher
        )
        self.times.append(time.perf_counter() - start)


def tokens_of(arm: Arm, rollouts: pd.DataFrame) -> dict:
    """Prompt and completion tokens the arm's update processes (distinct prompts per pass)."""
    from coevo.update.prefix import epoch_minibatches

    prompts = [tuple(p) for p in rollouts.sort_values(["problem_id"], kind="stable")["prompt_ids"]]
    completions = sum(len(c) for c in rollouts["completion_ids"])
    batches = epoch_minibatches(
        len(prompts),
        arm.cfg.rollout.group_size,
        arm.cfg.optim.minibatch_size,
        arm.cfg.policy.shared_prefix,
        torch.Generator().manual_seed(0),
    )
    grad_prompt = sum(len(p) for b in batches for p in {prompts[i] for i in b})
    old_prompt = sum(
        len(p)
        for s in range(0, len(prompts), arm.cfg.optim.minibatch_size)
        for p in set(prompts[s : s + arm.cfg.optim.minibatch_size])
    )
    return {
        "completion": completions,
        "grad_prompt": grad_prompt,
        "old_prompt": old_prompt,
        "distinct_prompts": len(set(prompts)),
        "rows": len(prompts),
    }


def flops(tok: dict, model) -> float:
    """Forward FLOPs 2 x weights x tokens (LM head on completion positions only); pi_old pass, the
    grad pass's forward and its backward (LoRA: input gradients only, ~ one forward)."""
    head = model.get_input_embeddings().weight.numel()
    body = sum(p.numel() for n, p in model.named_parameters() if "lora_" not in n) - head
    forward = lambda prompt: 2 * body * (prompt + tok["completion"]) + 2 * head * tok["completion"]  # noqa: E731
    return forward(tok["old_prompt"]) + 2 * forward(tok["grad_prompt"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", type=Path, default=ROOT / "models" / "smollm2-135m-instruct")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--arms", default=",".join(ARMS))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rollouts, rewards = saved_rollouts(args)
    peak = matmul_gflops(args.threads, size=1024, repeats=20)
    arms = [Arm(name, args) for name in args.arms.split(",")]
    for arm in arms:  # warm-up, untimed
        arm.step(rollouts, rewards, seed=0)
        arm.times.clear()
    for step in range(args.steps):
        for arm in arms:
            arm.step(rollouts, rewards, seed=step + 1)
            print(f"step {step} {arm.name}: {arm.times[-1]:.1f} s", flush=True)
    rows = []
    for arm in arms:
        tok = tokens_of(arm, rollouts)
        median = statistics.median(arm.times)
        rows.append(
            {
                "arm": arm.name,
                "median_s": median,
                "min_s": min(arm.times),
                "max_s": max(arm.times),
                "times": arm.times,
                "tokens": tok,
                "gflop": flops(tok, arm.policy.model) / 1e9,
                "achieved_gflops": flops(tok, arm.policy.model) / 1e9 / median,
                "teacher_reused_frac": arm.stats.get("policy/teacher_reused_frac"),
                "steps": arm.stats.get("policy/steps"),
            }
        )
    result = {"matmul_gflops": peak, "threads": args.threads, "rows": len(rollouts), "arms": rows}
    OUT.mkdir(parents=True, exist_ok=True)
    write_json(OUT / f"result_t{args.threads}.json", result)
    print(f"matmul peak {peak:.1f} GFLOP/s at {args.threads} thread(s)")
    print("| arm | median s | min-max s | GFLOP (est.) | GFLOP/s | teacher reused |")
    for r in rows:
        print(
            f"| {r['arm']} | {r['median_s']:.1f} | {r['min_s']:.1f}-{r['max_s']:.1f} | {r['gflop']:.0f} | "
            f"{r['achieved_gflops']:.1f} | {r['teacher_reused_frac']} |"
        )


if __name__ == "__main__":
    main()
