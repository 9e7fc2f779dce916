"""The harness co-evolver against a known-bad harness, in three scenarios.

`--scenario temperature` (the tiny policy, default params): sampling at temperature 0.05 collapses
every group (identical completions, no reward variance, no advantage), so GRPO stops learning.

    .venv/bin/python bench/harness.py --seeds 0 1 --iterations 40

`--scenario instruction` (SmolLM2-135M-Instruct, examples/smollm2.yaml: LoRA, the chat format, vLLM
on CPU; `coevo import-model smollm2-135m-instruct` first): the answer-format instruction asks for a
step-by-step explanation, which 16 tokens cut before any answer.

    .venv/bin/python bench/harness.py --scenario instruction --seeds 0 --iterations 6 --eval-every 3

`--scenario shaping` (the tiny policy, default params): the rewards add a length bonus at the
verifier's weight (bench/shaping.py: one point per character), so a longer wrong answer can outrank
a right one.

    .venv/bin/python bench/harness.py --scenario shaping --seeds 0 1 --iterations 40

Arms, each from the same bootstrap per seed (the plain driver):
- `bad`: the injected fault and no co-evolver (undetected);
- `bad+harness`: the same fault with `coevolver.kind: harness` (diagnoses, backtests, fixes);
- `good`: the scenario's own setting and no co-evolver (what the fix should recover).
Records per arm the held-out greedy accuracy curve (asked with the instruction in force),
coevo/zero_var_share per iteration and, for the harness, every backtest (iteration, knob, value,
before/after, accepted). Writes bench/results/harness[-<tag>].json and .md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY_PARAMS = ROOT / "examples" / "tiny.yaml"  # the tiny character-level policy's params (params.yaml trains SmolLM2)
RESULTS = ROOT / "bench" / "results"
BAD_TEMPERATURE = 0.05
BAD_INSTRUCTION = "Explain your reasoning in detail, step by step, before the answer."
SCENARIOS = {
    "temperature": {
        "params": TINY_PARAMS,
        "fault": f"sampling.temperature {BAD_TEMPERATURE}",
        "arms": {
            "bad": {"sampling": {"temperature": BAD_TEMPERATURE}, "coevolver": {"kind": "none"}},
            "bad+harness": {"sampling": {"temperature": BAD_TEMPERATURE}, "coevolver": {"kind": "harness"}},
            "good": {"coevolver": {"kind": "none"}},
        },
    },
    "instruction": {
        "params": ROOT / "examples" / "smollm2.yaml",
        "fault": f"prompt.instruction.math {BAD_INSTRUCTION!r}",
        "arms": {
            "bad": {"prompt": {"instruction": {"math": BAD_INSTRUCTION}}, "coevolver": {"kind": "none"}},
            "bad+harness": {"prompt": {"instruction": {"math": BAD_INSTRUCTION}}, "coevolver": {"kind": "harness"}},
            "good": {"coevolver": {"kind": "none"}},
        },
    },
    "shaping": {
        "params": TINY_PARAMS,
        "fault": "a length bonus at the verifier's weight",
        "arms": {
            "bad": {"coevolver": {"kind": "none"}},
            "bad+harness": {"coevolver": {"kind": "harness"}},
            "good": {"coevolver": {"kind": "none"}, "rewards": [{"function": "verifier"}]},
        },
    },
}


def config(arm: str, seed: int, args: argparse.Namespace, out_dir: Path):
    from coevo.config import deep_merge, load_config

    scenario = SCENARIOS[args.scenario]
    base = {
        "seed": seed,
        "run": {"out_dir": str(out_dir), "iterations": args.iterations, "checkpoint_every": 10**6},
        "problems": {"data_dir": str(RESULTS / args.name / f"seed{seed}" / "data")},
        "policy": {"threads": 1},
        "bootstrap": {"time_budget_s": 10**5},
        "eval": {"every": args.eval_every},
        "tracking": {"mlflow_uri": f"sqlite:///{out_dir / 'mlflow.db'}"},
    }
    if args.scenario == "instruction":
        base["policy"]["checkpoint"] = str(ROOT / "models" / "smollm2-135m-instruct")
        base["run"]["retention"] = {
            "keep_last": 1,
            "keep_every": 10**6,
            "keep_best": False,
        }  # bounded disk: the newest checkpoint only
    if args.scenario == "shaping":
        base["rewards"] = [{"function": "verifier"}, {"function": "bench.shaping:length", "weight": 1.0}]
    return load_config(scenario["params"], deep_merge(base, scenario["arms"][arm]))


def run(arm: str, seed: int, args: argparse.Namespace) -> dict:
    from rich.console import Console

    from coevo.coevolvers.harness import in_force
    from coevo.driver import train
    from coevo.loop import set_threads

    out_dir = RESULTS / args.name / f"seed{seed}" / arm
    shutil.rmtree(out_dir, ignore_errors=True)
    cfg = config(arm, seed, args, out_dir)
    set_threads(cfg)
    summary = train(cfg, Console(quiet=True))
    rows = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
    reports = [
        json.loads((out_dir / "reports" / f"iter_{it:04d}.json").read_text()) for it in range(1, args.iterations + 1)
    ]
    backtests = [r["harness"]["entry"] for r in reports if r.get("harness", {}).get("entry")]
    fixed = next((e["iteration"] for e in backtests if e["accepted"]), None)
    return {
        "arm": arm,
        "seed": seed,
        "initial_acc": summary["initial_eval"]["eval/acc"],
        "final_acc": summary["final_eval"]["eval/acc"],
        "curve": [{"iteration": p["iteration"], "acc": p["eval/acc"]} for p in summary["curve"]],
        "zero_var_share": [row["coevo/zero_var_share"] for row in rows],
        "backtests": [
            {k: e[k] for k in ("iteration", "knob", "from", "value", "before", "after", "accepted")} for e in backtests
        ],
        "fixed_at": fixed,
        "final": reports[-1].get("harness", {}).get("in_force", in_force(cfg)),
        "mean_reward": [row["verify/reward_mean"] for row in rows],
        "pass_rate": [row["verify/pass_rate"] for row in rows],
    }


def markdown(results: list[dict], knob: str) -> str:
    head = (
        f"| arm | seed | initial acc | final acc | zero-var share (mean) | sampled reward / pass rate (last 5 it.) | "
        f"backtests | first fix accepted at iteration | final {knob} |\n"
        "|---|---|---|---|---|---|---|---|---|\n"
    )
    return head + "".join(
        f"| {r['arm']} | {r['seed']} | {r['initial_acc']:.3f} | {r['final_acc']:.3f} | "
        f"{statistics.fmean(r['zero_var_share']):.3f} "
        f"| {statistics.fmean(r['mean_reward'][-5:]):.3f} / {statistics.fmean(r['pass_rate'][-5:]):.3f} "
        f"| {len(r['backtests'])} | {r['fixed_at'] if r['fixed_at'] is not None else '-'} | "
        f"{r['final'].get(knob, '-')} |\n"
        for r in results
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--scenario", default="temperature", choices=list(SCENARIOS))
    parser.add_argument(
        "--arms", nargs="+", default=["bad", "bad+harness", "good"], choices=["bad", "bad+harness", "good"]
    )
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    args.name = "-".join(
        ["harness", *([args.scenario] if args.scenario != "temperature" else []), *([args.tag] if args.tag else [])]
    )
    results = [run(arm, seed, args) for seed in args.seeds for arm in args.arms]
    text = markdown(
        results, {"temperature": "temperature", "instruction": "instruction", "shaping": "weight:length"}[args.scenario]
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps({"args": vars(args), "runs": results}, indent=2))
    (RESULTS / f"{args.name}.md").write_text(
        f"{args.iterations} iterations per arm, injected {SCENARIOS[args.scenario]['fault']}\n\n" + text
    )
    print(text)


if __name__ == "__main__":
    main()
