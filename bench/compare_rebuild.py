"""Rebuild committed comparison tables from their records, nothing rerun: table.json and table.md of
each `bench/results/compare-*` directory, with the statistics of today's coevo/compare.

A directory's spec is the one in bench/specs whose `name` its table.json carries. Its runs are its
own `runs/*/compare_arm.json` and those of the other committed directories that enter its comparison
(`coevo compare --merge`: arm and seed in the spec, identity one the spec's arm gives; the check is
coevo.compare.results.finished_runs, the merge path's own). Before writing, every run row and every
per-seed difference of the rebuilt table is checked against the committed table: a rebuild reads
the same records at the same readouts, and only the intervals change. The figure is left as it is
(it draws the curves, which do not change).

    .venv/bin/python bench/compare_rebuild.py                                   # every committed table
    .venv/bin/python bench/compare_rebuild.py bench/results/compare-smollm2-frontier --check   # compare only
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from coevo.compare.results import finished_runs
from coevo.compare.runs import MARKER, read_marker
from coevo.compare.spec import Spec, load_spec
from coevo.compare.table import build_table, markdown
from coevo.errors import InputError
from coevo.io import write_text

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
SKIP = {"compare-smollm2-frontier-settle"}  # a comparison still running: its table is its own sitting's


def runs_of(spec: Spec, directory: Path) -> list[Path]:
    """`directory` and every other committed results directory holding runs of `spec` (what it merged)."""
    dirs = [directory]
    for other in sorted(RESULTS.glob("compare-*")):
        if other == directory or not other.is_dir():
            continue
        markers = [read_marker(p.parent) for p in sorted(other.glob(f"runs/*/{MARKER}"))]
        ours = [m for m in markers if m["arm"] in {a.name for a in spec.arms} and m["seed"] in spec.seeds]
        if not ours:
            continue
        try:
            finished_runs(spec, [other])
        except InputError:
            continue  # runs of another comparison with the same arm names
        dirs.append(other)
    return dirs


def same_readouts(old: dict, new: dict) -> list[str]:
    """What differs between the committed table and the rebuilt one besides the intervals ([] = nothing)."""
    problems = []
    keys = ("arm", "seed", "readout_iteration", "final_acc", "n_test", "val_acc")
    if [{k: r.get(k) for k in keys} for r in old["runs"]] != [{k: r.get(k) for k in keys} for r in new["runs"]]:
        problems.append("the runs or their readouts differ")
    for before, after in zip(old["arms"], new["arms"]):
        for field in ("vs_reference", "gain", "val_vs_reference"):
            a, b = before.get(field), after.get(field)
            if (a is None) != (b is None):
                problems.append(f"{after['arm']} {field}: present in one table only")
            elif a is not None and [r["diff"] for r in a["seeds"]] != [r["diff"] for r in b["seeds"]]:
                problems.append(f"{after['arm']} {field}: per-seed differences differ")
    return problems


def rebuild(directory: Path, specs: dict[str, Spec], check: bool) -> None:
    old = json.loads((directory / "table.json").read_text())
    spec = specs[old["name"]]
    dirs = runs_of(spec, directory)
    table = build_table(spec, list(finished_runs(spec, dirs).values()))
    problems = same_readouts(old, table)
    if problems:
        raise SystemExit(f"{directory}: the rebuilt table does not read the committed one's runs: {problems}")
    merged = ", ".join(d.name for d in dirs[1:]) or "none"
    print(f"{directory.name}: spec {spec.path.name}, merged {merged}: same runs and readouts")
    if not check:
        write_text(directory / "table.json", json.dumps(table, indent=2, sort_keys=True) + "\n")
        write_text(directory / "table.md", markdown(table))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="*", type=Path, help="results directories (default: every committed one)")
    parser.add_argument("--check", action="store_true", help="compare with the committed tables, write nothing")
    args = parser.parse_args()
    specs = {s.name: s for s in map(load_spec, sorted((ROOT / "bench" / "specs").glob("*.yaml")))}
    dirs = args.dirs or [d for d in sorted(RESULTS.glob("compare-*")) if d.name not in SKIP]
    for directory in dirs:
        rebuild(directory.resolve(), specs, args.check)


if __name__ == "__main__":
    main()
