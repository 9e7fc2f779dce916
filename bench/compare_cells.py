"""A comparison's arm against its reference cell by cell: the paired difference on each category's
held-out problems, over every seed both arms ran, with the comparison's own interval (coevo/compare/stats.py:
Student t over the per-seed differences, df = seeds - 1, and its p-value).

Reads only the committed `runs/<arm>-seed<k>/compare_arm.json` of a `coevo compare` results directory
(and of the directories it merged, `--merge`), so it runs from a clean checkout. A test problem's
category is its id without the trailing number (the built-in generator's ids: `t-add-2-000017` is
`add/2`).

    .venv/bin/python bench/compare_cells.py bench/results/compare-smollm2-frontier --arm curriculum --reference grpo
    # writes <results>/cells.json (--out: elsewhere)
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from coevo.compare.runs import read_marker
from coevo.compare.stats import paired_difference
from coevo.io import write_json


def category(problem_id: str) -> str:
    """'t-add-2-000017' -> 'add/2'."""
    return "/".join(problem_id.split("-")[1:-1])


def verdicts_at(results: list[Path], arm: str, iteration: int) -> dict[int, dict[str, bool]]:
    """{seed: {problem id: passed}} of the arm's runs (in any of the `results` directories) at
    `iteration`'s evaluation."""
    out = {}
    for run in sorted(run for directory in results for run in directory.glob(f"runs/{arm}-seed*")):
        if (marker := read_marker(run)) is None:
            continue  # unfinished
        point = next(p for p in marker["record"]["curve"] if p["iteration"] == iteration)
        out[marker["seed"]] = point["verdicts"]
    return out


def by_cell(arm: dict[int, dict[str, bool]], ref: dict[int, dict[str, bool]]) -> dict[str, dict]:
    seeds = sorted(set(arm) & set(ref))
    cells: dict[str, dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    for seed in seeds:
        for pid in ref[seed]:
            cells[category(pid)][seed].append(pid)
    out = {}
    for name in sorted(cells):
        ids = cells[name]
        diff = paired_difference(
            {s: {p: arm[s][p] for p in ids[s]} for s in seeds}, {s: {p: ref[s][p] for p in ids[s]} for s in seeds}
        )
        out[name] = {
            "problems_per_seed": [len(ids[s]) for s in seeds],
            "acc_ref": sum(r["acc_ref"] for r in diff["seeds"]) / len(seeds),
            "acc": sum(r["acc"] for r in diff["seeds"]) / len(seeds),
            "mean_diff": diff["mean_diff"],
            "ci95": diff["ci95"],
            "p_value": diff["p_value"],
            "method": diff["method"],
            "per_seed": [round(r["diff"], 3) for r in diff["seeds"]],
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a `coevo compare --out` directory")
    parser.add_argument("--arm", required=True)
    parser.add_argument("--reference", required=True)
    parser.add_argument("--iteration", type=int, default=None, help="default: the runs' last evaluation")
    parser.add_argument("--merge", type=Path, action="append", default=[], help="another results directory")
    parser.add_argument("--out", type=Path, default=None, help="default: <results>/cells.json")
    args = parser.parse_args()
    directories = [args.results, *args.merge]
    if args.iteration is None:
        first = next(p for d in directories for p in d.glob(f"runs/{args.reference}-seed*/compare_arm.json"))
        args.iteration = json.loads(first.read_text())["record"]["curve"][-1]["iteration"]
    ref = verdicts_at(directories, args.reference, args.iteration)
    cells = by_cell(verdicts_at(directories, args.arm, args.iteration), ref)
    write_json(
        args.out or args.results / "cells.json",
        {"arm": args.arm, "reference": args.reference, "iteration": args.iteration, "cells": cells},
    )
    print(f"{args.arm} - {args.reference} at iteration {args.iteration}, seeds {sorted(ref)}")
    for name, row in cells.items():
        low, high = row["ci95"]
        print(
            f"  {name:8s} {row['acc_ref']:.3f} -> {row['acc']:.3f}  {100 * row['mean_diff']:+.1f} "
            f"[{100 * low:+.1f}, {100 * high:+.1f}] p {row['p_value']:.2g}  per seed {row['per_seed']}  n "
            f"{row['problems_per_seed']}"
        )


if __name__ == "__main__":
    main()
