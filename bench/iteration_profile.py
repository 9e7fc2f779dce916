"""Where an iteration's time goes: seconds per stage, FLOPs, and achieved GFLOP/s against this
machine's measured float32 matmul rate, for arms of one params file, iterations interleaved.

Each arm is a run of `coevo train --plain` in its own directory, grown one iteration per call
(`--continue`), the arms alternating call by call (A B, B A, ...), so load drifting over the sitting
falls on every arm alike. Read per iteration from the run's metrics.jsonl and rollouts table:

  rollout  time/rollout; FLOPs 2 x parameters x (each group's prompt tokens once: the engine's
           prefix cache shares a group's prompt; + every generated token);
  update   time/update; FLOPs c x parameters x tokens trained (the kept groups' completion tokens
           + their prompt tokens: once per group with `policy.shared_prefix` group or minibatch,
           once per row with none), c = 4 with LoRA (forward 2, backward to the activations 2; the
           frozen weights get no gradient) and 6 for full fine-tuning; one forward and one backward
           pass, so a pass the objective adds (reference log-probs for a KL term) is not counted;
  verify, coevolve: seconds only.

"Parameters" counts the base model's weights (LoRA adapters add under 1%). The matmul rate is
measured between calls with 1 thread and with all cores (2048^3 float32), the bound each stage is
read against.

    .venv/bin/python bench/iteration_profile.py --params examples/smollm2.yaml --iterations 5 \\
        --arm "before:" --arm "after:policy.threads=2,engine.cpu_threads=2"
    # writes bench/results/iteration-profile-<params stem>.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.engine_bound import matmul_gflops  # noqa: E402
from coevo.config import load_config, parse_overrides  # noqa: E402

RESULTS = ROOT / "bench" / "results"
CORES = os.cpu_count() or 1


def parse_arm(text: str) -> tuple[str, list[str]]:
    """'name:key=value,key=value' -> (name, ['key=value', ...])."""
    name, _, sets = text.partition(":")
    return name, [s for s in sets.split(",") if s]


def train_one(params: Path, out: Path, sets: list[str], first: bool) -> None:
    command = [sys.executable, "-m", "coevo.cli", "train", "--plain", "--params", str(params)]
    command += ["--set", f"run.out_dir={out}", "--set", "run.iterations=1", "--set", "eval.every=100000"]
    for s in sets:
        command += ["--set", s]
    if not first:
        command.append("--continue")
    subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)


def parameters(checkpoint: Path) -> int:
    from safetensors import safe_open

    total = 0
    for path in checkpoint.glob("*.safetensors"):
        with safe_open(str(path), "pt") as f:
            for key in f.keys():
                if "lora_" not in key:
                    total += math.prod(f.get_slice(key).get_shape())
    return total


def iteration_record(out: Path, it: int, params: int, lora: bool, shared: str, group_size: int) -> dict:
    from schemas.rollouts import read_rollouts

    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    row = next(m for m in metrics if int(m["iteration"]) == it)
    rollouts = read_rollouts(str(out / "rollouts" / f"iter_{it:04d}.parquet"))
    prompt_tokens = int(rollouts.groupby("problem_id")["prompt_ids"].first().map(len).sum())
    completion_tokens = int(rollouts["completion_ids"].map(len).sum())
    kept = row.get("policy/groups_kept", row.get("policy/groups_total", 0)) / max(row.get("policy/groups_total", 1), 1)
    per_row_prompt = int(rollouts["prompt_ids"].map(len).sum())
    trained_prompt = per_row_prompt if shared == "none" else prompt_tokens  # minibatch: once per distinct prompt
    trained = float(kept * (completion_tokens + trained_prompt))
    flops = {
        "rollout": 2 * params * (prompt_tokens + completion_tokens),
        "update": (4 if lora else 6) * params * trained,
    }
    seconds = {stage: row.get(f"time/{stage}", 0.0) for stage in ("rollout", "verify", "coevolve", "update")}
    return {
        "iteration": it,
        "seconds": seconds,
        "iteration_seconds": sum(seconds.values()),
        "flops": flops,
        "gflops_per_s": {k: flops[k] / seconds[k] / 1e9 for k in flops if seconds[k] > 0},
        "tokens": {"prompt_per_group": int(prompt_tokens), "completion": completion_tokens, "trained": trained},
        "groups_kept_share": kept,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--params", type=Path, required=True)
    parser.add_argument("--arm", action="append", required=True, help="'name:key=value,...' (repeat)")
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--work", type=Path, default=Path("/tmp/iteration-profile"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    arms = dict(parse_arm(a) for a in args.arm)
    out_file = args.out or RESULTS / f"iteration-profile-{args.params.stem}.json"
    peaks: list[dict] = []
    records: dict[str, list[dict]] = {name: [] for name in arms}
    for it in range(1, args.iterations + 1):
        order = list(arms) if it % 2 else list(reversed(arms))
        for name in order:
            run = args.work / name
            started = time.perf_counter()
            train_one(args.params, run, arms[name], first=it == 1)
            cfg = load_config(args.params, parse_overrides(arms[name]))
            count = parameters(run / "bootstrap")
            lora = cfg.policy.lora.rank > 0
            record = iteration_record(run, it, count, lora, cfg.policy.shared_prefix, cfg.rollout.group_size)
            record |= {"call_seconds": time.perf_counter() - started, "load_average": os.getloadavg()[0]}
            records[name].append(record)
            print(name, json.dumps(record), flush=True)
        peaks.append(
            {"matmul_gflops_1_thread": matmul_gflops(1), f"matmul_gflops_{CORES}_threads": matmul_gflops(CORES)}
        )
    summary = {}
    for name, rows in records.items():
        summary[name] = {
            "iteration_seconds": _spread([r["iteration_seconds"] for r in rows]),
            "stage_seconds": {s: _spread([r["seconds"][s] for r in rows]) for s in rows[0]["seconds"]},
            "gflops_per_s": {
                s: _spread([r["gflops_per_s"][s] for r in rows if s in r["gflops_per_s"]])
                for s in ("rollout", "update")
            },
        }
    peak = {k: statistics.median(p[k] for p in peaks) for k in peaks[0]}
    result = {"params": str(args.params), "arms": arms, "peak": peak, "summary": summary, "records": records}
    out_file.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({"peak": peak, "summary": summary}, indent=1))


def _spread(values: list[float]) -> dict:
    values = sorted(values)
    return {"median": statistics.median(values), "min": values[0], "max": values[-1], "n": len(values)}


if __name__ == "__main__":
    main()
