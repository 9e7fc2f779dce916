"""Orchestration overhead: the same config through the Prefect flow and through the plain driver.

Both call the same stage functions (coevo.stages); the flow adds Prefect task runs, result
persistence, cache-key hashing, the DuckDB ingest and MLflow tracking. Runs alternate (driver,
flow, driver, flow, ...) so both see the same machine; reports the median over rounds of the mean
seconds per stage per iteration, and the overhead of the flow over the driver, per stage and in total.

    .venv/bin/python bench/orchestration.py [--iterations 30] [--rounds 3] [--out bench/results/orchestration.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from coevo.cli import quiet_libraries
from coevo.config import load_config
from coevo.driver import train
from coevo.io import write_json
from flows.train import train_flow

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("rollout", "verify", "coevolve", "update", "ingest")


def stage_means(run_dir: Path) -> dict[str, float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    keys = sorted({k for row in rows for k in row if k.startswith("time/")})
    return {k[5:]: statistics.fmean(row.get(k, 0.0) for row in rows) for k in keys}


def run_once(name: str, directory: Path, iterations: int) -> dict:
    overrides = {
        "run": {"out_dir": str(directory / "run"), "iterations": iterations},
        "problems": {"data_dir": str(directory / "data")},
        "eval": {"every": iterations},
        "tracking": {"mlflow_uri": f"sqlite:///{directory / 'mlflow.db'}"},
    }
    cfg = load_config(ROOT / "params.yaml", overrides)
    start = time.perf_counter()
    train(cfg, Console(quiet=True)) if name == "driver" else train_flow(str(ROOT / "params.yaml"), overrides)
    return {"wall_s": time.perf_counter() - start, "stage_s": stage_means(cfg.run.out_dir)}


def median_round(runs: list[dict]) -> dict:
    stages = sorted({s for run in runs for s in run["stage_s"]})
    return {
        "wall_s": statistics.median(run["wall_s"] for run in runs),
        "stage_s": {s: statistics.median(run["stage_s"].get(s, 0.0) for run in runs) for s in stages},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "orchestration.json")
    args = parser.parse_args()
    quiet_libraries()
    rounds: dict[str, list[dict]] = {"driver": [], "flow": []}
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(args.rounds):
            for name in ("driver", "flow"):
                rounds[name].append(run_once(name, Path(tmp) / f"{name}-{index}", args.iterations))
    results = {name: median_round(runs) for name, runs in rounds.items()}
    per_iter = {name: sum(r["stage_s"].get(s, 0.0) for s in STAGES) for name, r in results.items()}
    report = {"iterations": args.iterations, "rounds": rounds, **results, "overhead_per_iteration": per_iter["flow"] / per_iter["driver"] - 1}
    write_json(args.out, report)
    table = Table(title=f"flow vs plain driver, {args.iterations} iterations x {args.rounds} rounds (median of mean s per iteration)")
    for column in ("stage", "driver", "flow", "overhead"):
        table.add_column(column, justify="right")
    for stage in (*STAGES, "eval"):
        d, f = results["driver"]["stage_s"].get(stage, 0.0), results["flow"]["stage_s"].get(stage, 0.0)
        table.add_row(stage, f"{d:.3f}", f"{f:.3f}", f"{(f / d - 1) * 100:+.0f}%" if d else "flow only")
    table.add_row("all stages", f"{per_iter['driver']:.3f}", f"{per_iter['flow']:.3f}", f"{report['overhead_per_iteration'] * 100:+.1f}%")
    table.add_row("wall (incl. setup)", f"{results['driver']['wall_s']:.1f}", f"{results['flow']['wall_s']:.1f}", "")
    Console().print(table)


if __name__ == "__main__":
    main()
