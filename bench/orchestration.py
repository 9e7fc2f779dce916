"""Orchestration overhead: the same config through the Prefect flow and through the plain driver.

Both call the same stage functions (coevo.stages); the flow adds Prefect task runs, result
persistence, cache-key hashing, the DuckDB ingest and MLflow tracking. Runs alternate (driver,
flow, flow, driver, ...) so both see the same machine; each run starts from the same cached
bootstrap in its own directory (MLflow keeps one database engine per tracking URI in a process, so
a store must not be deleted and recreated under the same path). Reports, per arm, the median over rounds of
  - the mean seconds per stage per iteration (the stage timers both loops write to metrics.jsonl), and
  - the wall seconds per iteration: the time between the starts of consecutive rollout stages, so it
    also holds what runs between stages (Prefect task-run machinery, MLflow tracking, artifacts,
    the catalog ingest); the first iteration (warm-up) is left out,
and the overhead of the flow over the driver on both.

    .venv/bin/python bench/orchestration.py [--iterations 30] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console

from bench.common import (
    RESULTS,
    ROOT,
    PhaseClock,
    add_output_args,
    alternate,
    prepared_config,
    publish,
    spread,
    table,
)
from coevo import stages
from coevo.cli import quiet_libraries

STAGES = ("rollout", "verify", "coevolve", "update", "ingest")


def stage_means(run_dir: Path) -> dict[str, float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    keys = sorted({k for row in rows for k in row if k.startswith("time/")})
    return {k[5:]: statistics.fmean(row.get(k, 0.0) for row in rows) for k in keys}


def run_arm(arm: str, run_dir: Path, iterations: int, extra: dict | None = None) -> dict:
    """One run of the driver or the flow; stage means and wall seconds per iteration (rollout-start intervals)."""
    from coevo.driver import train
    from flows.train import train_flow

    cfg, overrides = prepared_config(run_dir, iterations, extra)
    clock = PhaseClock()
    start = time.perf_counter()
    with clock.timing(stages, "rollout_stage", "rollout", mark=True), clock.timing(stages, "evaluate_stage", "eval"):
        train(cfg, Console(quiet=True)) if arm == "driver" else train_flow(str(ROOT / "params.yaml"), overrides)
    return {
        "wall_s": time.perf_counter() - start,
        "iteration_wall_s": clock.per_step("rollout")["step"],  # iterations 2 .. n-1: no warm-up, no final eval
        "stage_s": stage_means(cfg.run.out_dir),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    add_output_args(parser, "orchestration")
    args = parser.parse_args()
    quiet_libraries()
    runs = alternate(["driver", "flow"], args.rounds, lambda arm, rep: run_arm(arm, RESULTS / "tmp" / f"orchestration-{arm}-{rep}", args.iterations))
    stage_names = sorted({s for arm in runs.values() for run in arm for s in run["stage_s"]})
    summary = {
        arm: {
            "stage_s": {s: spread([run["stage_s"].get(s, 0.0) for run in arm_runs]) for s in stage_names},
            "stages_total_s": spread([sum(run["stage_s"].get(s, 0.0) for s in STAGES) for run in arm_runs]),
            "iteration_wall_s": spread([run["iteration_wall_s"] for run in arm_runs]),
        }
        for arm, arm_runs in runs.items()
    }
    d, f = summary["driver"], summary["flow"]
    overhead = {
        "stages": f["stages_total_s"]["median"] / d["stages_total_s"]["median"] - 1,
        "iteration_wall": f["iteration_wall_s"]["median"] / d["iteration_wall_s"]["median"] - 1,
        "per_round_iteration_wall": [fr["iteration_wall_s"] / dr["iteration_wall_s"] - 1 for dr, fr in zip(runs["driver"], runs["flow"])],
    }
    rows = []
    for stage in (*STAGES, "eval"):
        ds, fs = d["stage_s"].get(stage, {"median": 0.0}), f["stage_s"].get(stage, {"median": 0.0})
        change = f"{(fs['median'] / ds['median'] - 1) * 100:+.0f}%" if ds["median"] else "flow only"
        rows.append([stage, f"{ds['median']:.3f}", f"{fs['median']:.3f}", change])
    rows.append(["all stages", f"{d['stages_total_s']['median']:.3f}", f"{f['stages_total_s']['median']:.3f}", f"{overhead['stages'] * 100:+.1f}%"])
    rows.append(["wall per iteration", f"{d['iteration_wall_s']['median']:.3f}", f"{f['iteration_wall_s']['median']:.3f}", f"{overhead['iteration_wall'] * 100:+.1f}%"])
    per_round = ", ".join(f"{o * 100:+.1f}%" for o in overhead["per_round_iteration_wall"])
    title = f"flow vs plain driver, {args.iterations} iterations x {args.rounds} rounds (median s per iteration; per round: {per_round})"
    report = {"iterations": args.iterations, "rounds": args.rounds, "runs": runs, "summary": summary, "overhead": overhead}
    publish("orchestration", args.out, report, table(title, ["stage", "driver", "flow", "overhead"], rows), lambda png: plot(png, runs), args.mlflow)


def plot(png: Path, runs: dict[str, list[dict]]) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for index, (arm, arm_runs) in enumerate(runs.items()):
        bottom = [0.0] * len(arm_runs)
        for stage in STAGES:
            heights = [run["stage_s"].get(stage, 0.0) for run in arm_runs]
            xs = [r * 3 + index for r in range(len(arm_runs))]
            ax.bar(xs, heights, bottom=bottom, color=f"C{STAGES.index(stage)}", label=stage if index == 0 else None)
            bottom = [b + h for b, h in zip(bottom, heights)]
        ax.scatter([r * 3 + index for r in range(len(arm_runs))], [run["iteration_wall_s"] for run in arm_runs], color="k", marker="_", s=200, label="wall" if index == 0 else None)
    ax.set_xticks([r * 3 + i for r in range(len(runs["driver"])) for i in range(2)], [f"{arm[0]}{r + 1}" for r in range(len(runs["driver"])) for arm in runs])
    ax.set_ylabel("s per iteration")
    ax.set_title("driver (d) vs flow (f) per round")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=120)


if __name__ == "__main__":
    main()
