"""Orchestration overhead: the same config through the Prefect flow and through the plain driver.

Both call the same stage functions (coevo.stages); the flow adds Prefect task runs, result
persistence, cache-key hashing, the DuckDB ingest and MLflow tracking. Reports the mean seconds per
stage per iteration and the overhead of the flow over the driver, per stage and in total.

    .venv/bin/python bench/orchestration.py [--iterations 40] [--out bench/results/orchestration.json]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "orchestration.json")
    args = parser.parse_args()
    quiet_libraries()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("driver", "flow"):
            overrides = {
                "run": {"out_dir": f"{tmp}/{name}/run", "iterations": args.iterations},
                "problems": {"data_dir": f"{tmp}/{name}/data"},
                "eval": {"every": args.iterations},
                "tracking": {"mlflow_uri": f"sqlite:///{tmp}/{name}/mlflow.db"},
            }
            cfg = load_config(ROOT / "params.yaml", overrides)
            start = time.perf_counter()
            train(cfg, Console(quiet=True)) if name == "driver" else train_flow(str(ROOT / "params.yaml"), overrides)
            results[name] = {"wall_s": time.perf_counter() - start, "stage_s": stage_means(cfg.run.out_dir)}
    per_iter = {name: sum(r["stage_s"].get(s, 0.0) for s in STAGES) for name, r in results.items()}
    report = {"iterations": args.iterations, **results, "overhead_per_iteration": per_iter["flow"] / per_iter["driver"] - 1}
    write_json(args.out, report)
    table = Table(title=f"flow vs plain driver, {args.iterations} iterations (mean s per iteration)")
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
