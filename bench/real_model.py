"""Learning on a real pretrained model: SmolLM2-135M-Instruct, LoRA, the chat format, vLLM on CPU.

Runs `coevo train --plain --params examples/smollm2.yaml` once per seed (each in its own run
directory under bench/results/real_model/, the problems shared), iteration-bounded so every seed
does the same work whatever the machine's load, and reports per seed: held-out greedy accuracy at
the start and at every evaluation (the curve), sampled pass@k, the wall time of training, the mean
time per iteration by phase, and the run directory's size (checkpoint retention on). The model must
have been imported first:

    coevo import-model smollm2-135m-instruct --out models/smollm2-135m-instruct
    .venv/bin/python bench/real_model.py --seeds 0 1 2          # bench/results/real_model/real_model.json
    .venv/bin/python bench/real_model.py --seeds 0 --set run.iterations=10 --set sampling.temperature=0.7
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import RESULTS, console  # noqa: E402
from bench.disk import du  # noqa: E402
from coevo.io import write_json  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = RESULTS / "real_model"
COEVO = Path(sys.executable).with_name("coevo")


def run_seed(seed: int, params: Path, model: Path, overrides: list[str]) -> dict:
    """One training run; returns its curve, times and size (raises with the log's tail on failure)."""
    run_dir = OUT / f"seed{seed}"
    sets = [
        f"seed={seed}",
        f"run.out_dir={run_dir}",
        f"problems.data_dir={OUT / 'data'}",
        f"policy.checkpoint={model}",
        *overrides,
    ]
    command = [str(COEVO), "train", "--plain", "--json", "--params", str(params)] + [
        arg for s in sets for arg in ("--set", s)
    ]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    (OUT / f"seed{seed}.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"seed {seed}: coevo train exited {done.returncode}:\n{done.stderr[-2000:]}")
    summary = json.loads((run_dir / "summary.json").read_text())
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    phases = sorted({k for m in metrics for k in m if k.startswith("time/")})
    return {
        "seed": seed,
        "curve": [
            {k: v for k, v in point.items() if k == "iteration" or k.startswith("eval/")} for point in summary["curve"]
        ],
        "start_acc": summary["initial_eval"]["eval/acc"],
        "final_acc": summary["final_eval"]["eval/acc"],
        "sampled_pass_rate": [round(m["verify/pass_rate"], 3) for m in metrics],
        "train_wall_s": summary["wall_time_s"],
        "process_wall_s": wall,
        "per_iteration_s": {p: statistics.fmean(m.get(p, 0.0) for m in metrics) for p in phases},
        "run_dir_mb": du(run_dir) / 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--params", type=Path, default=ROOT / "examples" / "smollm2.yaml")
    parser.add_argument("--model", type=Path, default=ROOT / "models" / "smollm2-135m-instruct")
    parser.add_argument(
        "--set", action="append", default=[], help="section.key=value for every seed (as coevo train --set)."
    )
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    runs = []
    for seed in args.seeds:
        runs.append(run_seed(seed, args.params.resolve(), args.model.resolve(), args.set))
        write_json(
            OUT / "real_model.json", {"params": str(args.params), "overrides": args.set, "runs": runs}
        )  # after each seed: a kill keeps the finished ones
        r = runs[-1]
        console.print(
            f"seed {seed}: acc {r['start_acc']:.3f} -> {r['final_acc']:.3f}, training {r['train_wall_s']:.0f} s, "
            f"{r['run_dir_mb']:.1f} MB"
        )
    gains = [r["final_acc"] - r["start_acc"] for r in runs]
    console.print(f"mean gain {statistics.fmean(gains):+.3f} over {len(runs)} seed(s); curves:")
    for r in runs:
        console.print(
            f"  seed {r['seed']}: " + "  ".join(f"{int(p['iteration'])}:{p['eval/acc']:.2f}" for p in r["curve"])
        )


if __name__ == "__main__":
    main()
