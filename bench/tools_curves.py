"""Per-cell held-out accuracy and the tool-call rate over iterations, of a comparison's run
directories (bench/specs/smollm2_tools.yaml: the calculator arm against single-turn GRPO).

The comparison's table gives each arm's accuracy over all test problems; this reads the runs
themselves (they stay on the machine that made them; only their markers are committed): each
evaluation's verdicts by cell (family x digits, from the run's `data/test.parquet`) and each
iteration's training episodes' tool calls, tool errors and truncated share (`metrics.jsonl`).
Writes `<out>.json` (the curves, mean and per seed) and `<out>.png` (two panels).

    .venv/bin/python bench/tools_curves.py bench/results/compare-smollm2-tools \\
        --out bench/results/compare-smollm2-tools/cells
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import matplotlib
import pandas as pd

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

TRAINING = ("rollout/tool_calls", "rollout/tool_errors", "rollout/truncated_frac")


def cell_curve(run: Path) -> dict[str, dict[int, float]]:
    """{cell: {iteration: held-out accuracy}} of one run, a cell being "<family> <digits>d"."""
    test = pd.read_parquet(run / "data" / "test.parquet")
    cell = {row.id: f"{row.family} {row.level}d" for row in test.itertuples()}
    curves: dict[str, dict[int, float]] = {}
    for path in sorted((run / "evals").glob("iter_*.json")):
        record = json.loads(path.read_text())
        by_cell: dict[str, list[bool]] = {}
        for pid, passed in record["verdicts"].items():
            by_cell.setdefault(cell[pid], []).append(bool(passed))
        for name, verdicts in by_cell.items():
            curves.setdefault(name, {})[record["iteration"]] = sum(verdicts) / len(verdicts)
    return curves


def training_curve(run: Path) -> dict[str, dict[int, float]]:
    """{metric: {iteration: value}} of the training episodes' tool use (absent for one-turn runs)."""
    curves: dict[str, dict[int, float]] = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        for metric in TRAINING:
            if metric in row:
                curves.setdefault(metric, {})[int(row["iteration"])] = row[metric]
    return curves


def mean_over_seeds(curves: list[dict[str, dict[int, float]]]) -> dict[str, dict[int, float]]:
    """The mean over runs of each curve at the iterations every run has."""
    names = set.intersection(*(set(c) for c in curves)) if curves else set()
    out = {}
    for name in sorted(names):
        shared = set.intersection(*(set(c[name]) for c in curves))
        out[name] = {i: statistics.fmean(c[name][i] for c in curves) for i in sorted(shared)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a comparison's results directory (runs/<arm>-seed<k>/)")
    parser.add_argument("--out", type=Path, required=True, help="path without suffix for .json and .png")
    args = parser.parse_args()
    runs = sorted(p for p in (args.results / "runs").iterdir() if (p / "evals").is_dir())
    arms = sorted({run.name.rsplit("-seed", 1)[0] for run in runs})
    found = {}
    for arm in arms:
        mine = [run for run in runs if run.name.rsplit("-seed", 1)[0] == arm]
        cells, training = [cell_curve(run) for run in mine], [training_curve(run) for run in mine]
        found[arm] = {
            "seeds": [run.name.rsplit("-seed", 1)[1] for run in mine],
            "cells": mean_over_seeds(cells),
            "training": mean_over_seeds(training),
            "per_seed": {run.name: {"cells": c, "training": t} for run, c, t in zip(mine, cells, training)},
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(found, indent=1) + "\n")
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for arm, data in found.items():
        for cell, curve in data["cells"].items():
            left.plot(list(curve), list(curve.values()), marker="o", label=f"{arm}: {cell}")
        if "rollout/tool_calls" in data["training"]:
            calls = data["training"]["rollout/tool_calls"]
            right.plot(list(calls), list(calls.values()), label=f"{arm}: tool calls per episode")
            truncated = data["training"]["rollout/truncated_frac"]
            right.plot(list(truncated), list(truncated.values()), linestyle="--", label=f"{arm}: truncated share")
    left.set(xlabel="iteration", ylabel="held-out accuracy (greedy)", ylim=(-0.02, 1.02))
    left.set_title("by cell, mean over seeds")
    right.set(xlabel="iteration", title="training episodes, mean over seeds")
    left.legend(fontsize=7)
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.out.with_suffix(".png"), dpi=110)
    print(json.dumps({arm: {"seeds": d["seeds"], "cells": d["cells"]} for arm, d in found.items()}, indent=1))


if __name__ == "__main__":
    main()
