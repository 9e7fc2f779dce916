"""Disk used by a run, with and without checkpoint retention (run.retention), and the bound it obeys.

Runs the tiny policy's params (examples/tiny.yaml) with the plain driver for --iterations, twice: with
retention off (run.retention.keep_last null: every checkpoint keeps its weights) and with the
defaults (keep_last 2, keep_every 50, keep_best), held-out evaluation every eval.every (25) as in
examples/tiny.yaml. Reports each run directory's size by part and the per-iteration costs, and
extrapolates both to --extrapolate iterations (default 300, the tiny policy's run) with the bound of
docs/benchmarks/disk.md "Disk":
  bytes <= (keep_last + ceil(I / keep_every) + keep_best + 1) * (checkpoint + co-evolver version)
           + min(2, keep_last) * optimizer state
           + I * (pruned-checkpoint metadata + pruned co-evolver version + rollouts/rewards shards + report + eval)
The measured retained run is checked against the bound at its own length.

    .venv/bin/python bench/disk.py --iterations 50    # bench/results/disk/disk.json
    .venv/bin/python bench/disk.py --measure /tmp/d300/run --extra /tmp/d300/mlflow.db   # an existing run, by part
    .venv/bin/python bench/disk.py --cost examples/tiny.yaml --out /tmp/cost --set run.iterations=10
        # disk and time per iteration of any params file (examples/smollm2.yaml too), written to OUT/cost.json (`cost`)

`--cost` runs a params file (with --set overrides) with the plain driver and reports what each
checkpoint adds to the disk (blocks allocated, an inode counted once however many names it has, so a
hard-linked file of an older version of coevo costs nothing and a copy costs its size), the user
model's bytes shared by the bootstrap, the seconds per iteration (the loop's phase timers; the
checkpoint is written in `update`) and the fsyncs of a durable publish (coevo/io.py: their number and
seconds per iteration, where the tree measured has them).

Co-evolver versions are pruned with their checkpoints (manifest.json + pruned.json stay), so the
co-evolver term splits like the checkpoints' into kept versions and pruned ones. A bootstrap whose
weights are hard-linked to the user's model (coevo/model/checkpoint.py) is counted apart
("bootstrap_linked": on disk once, in the user's model directory).
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import RESULTS, console, prepared_config  # noqa: E402
from coevo.io import write_json  # noqa: E402
from coevo.model.checkpoint import PRUNED, TRAINER_STATE  # noqa: E402
from coevo.model.retention import disk_bound_checkpoints  # noqa: E402

MB = 1e6


def du(path: Path) -> int:
    """Bytes of the regular files under `path` (or of the file)."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


def linked(path: Path) -> int:
    """Bytes of the files under `path` that have other hard links (a bootstrap linked to the user's model)."""
    return (
        sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and p.stat().st_nlink > 1) if path.is_dir() else 0
    )


def allocated(paths: list[Path], seen: set[tuple[int, int]]) -> int:
    """Bytes allocated (st_blocks) to the files under `paths` whose inode is not in `seen` (then added)."""
    total = 0
    for path in paths:
        for file in [path] if path.is_file() else path.rglob("*"):
            st = file.stat()
            if file.is_file() and (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def cost(params: Path, out: Path, sets: list[str], bootstrap_from: Path | None = None) -> dict:
    """Disk per checkpoint and seconds per iteration of one plain-driver run of `params` (module docstring)."""
    import json

    from coevo import io
    from coevo.config import deep_merge, load_config, parse_overrides
    from coevo.driver import train

    if out.exists():
        shutil.rmtree(out)
    overrides = deep_merge(
        {"run": {"out_dir": str(out / "run")}, "problems": {"data_dir": str(out / "data")}},
        {**parse_overrides(sets), "tracking": {"mlflow_uri": f"sqlite:///{out / 'mlflow.db'}"}},
    )
    cfg = load_config(params, overrides)
    if bootstrap_from is not None:  # the same checkpoint 0 for the arms compared (kept: same key, intact files)
        shutil.copytree(bootstrap_from, cfg.bootstrap_dir)
    calls, seconds, start = getattr(io, "fsync_calls", 0), getattr(io, "fsync_seconds", 0.0), time.perf_counter()
    train(cfg)
    wall = time.perf_counter() - start
    root, seen = out / "run", set()
    source = [Path(cfg.policy.checkpoint)] if cfg.policy.checkpoint else []
    user = allocated(source, seen)
    boot = allocated([root / "bootstrap"], seen)
    ckpts = sorted((root / "checkpoints").glob("iter_*"))
    each = {c.name: allocated([c], seen) for c in ckpts}
    lines = [json.loads(line) for line in (root / "metrics.jsonl").read_text().splitlines()]
    times = [sum(v for k, v in m.items() if k.startswith("time/")) for m in lines]
    n = len(lines)
    return {
        "params": str(params),
        "set": sets,
        "iterations": n,
        "wall_s": wall,
        "user_model_bytes": user,
        "bootstrap_bytes_beyond_user_model": boot,
        "checkpoint_bytes": each,
        "mean_checkpoint_bytes": sum(each.values()) / max(len(each), 1),
        "unchanged_checkpoints": sum(1 for c in ckpts if '"unchanged_from"' in (c / "coevo.json").read_text()),
        "pruned_checkpoints": sum(1 for c in ckpts if (c / PRUNED).is_file()),
        "run_dir_bytes": allocated([root], set()),
        "seconds_per_iteration": sum(times) / max(n, 1),
        "update_seconds_per_iteration": sum(m.get("time/update", 0.0) for m in lines) / max(n, 1),
        "fsyncs_per_iteration": (getattr(io, "fsync_calls", 0) - calls) / max(n, 1)
        if hasattr(io, "fsync_calls")
        else None,
        "fsync_seconds_per_iteration": (getattr(io, "fsync_seconds", 0.0) - seconds) / max(n, 1)
        if hasattr(io, "fsync_seconds")
        else None,
    }


def breakdown(root: Path) -> dict[str, float]:
    """A run directory's bytes by part; checkpoints and co-evolver versions split into kept and pruned (metadata)."""
    ckpts = sorted((root / "checkpoints").glob("iter_*"))
    pruned = [c for c in ckpts if (c / PRUNED).is_file()]
    kept = [c for c in ckpts if c not in pruned]
    versions = sorted((root / "coevolver").glob("iter_*"))
    pruned_versions = [v for v in versions if (v / PRUNED).is_file()]
    parts = {
        "bootstrap": du(root / "bootstrap"),
        "bootstrap_linked": linked(root / "bootstrap"),
        "coevolver_kept": sum(du(v) for v in versions if v not in pruned_versions),
        "coevolver_pruned": sum(du(v) for v in pruned_versions),
        "checkpoints_kept": sum(du(c) for c in kept),
        "checkpoints_pruned": sum(du(c) for c in pruned),
        "optimizer_state": sum(du(c / TRAINER_STATE) for c in ckpts),
        "coevolver": du(root / "coevolver"),  # kept + pruned
        "shards": du(root / "rollouts") + du(root / "rewards"),
        "reports_evals": du(root / "reports") + du(root / "evals"),
        "other": sum(
            du(p)
            for p in root.iterdir()
            if p.name not in {"bootstrap", "checkpoints", "coevolver", "rollouts", "rewards", "reports", "evals"}
        ),
    }
    total = du(root)
    counts = {
        "n_kept": len(kept),
        "n_pruned": len(pruned),
        "n_coevolver_kept": len(versions) - len(pruned_versions),
        "n_coevolver_pruned": len(pruned_versions),
    }
    return {**parts, "total": total, **counts}


def run_arm(name: str, iterations: int, retention: dict) -> tuple[dict, Path]:
    from coevo.driver import train

    run_dir = RESULTS / "disk" / name
    cfg, _ = prepared_config(run_dir, iterations, {"eval": {"every": 25}, "run": {"retention": retention}})
    start = time.perf_counter()
    train(cfg)
    console.print(f"{name}: {iterations} iterations in {time.perf_counter() - start:.0f} s")
    return breakdown(run_dir), run_dir


def per_iteration(parts: dict, root: Path, iterations: int) -> dict[str, float]:
    """Bytes per iteration of what grows with every iteration, and the size of one full checkpoint."""
    ckpts = sorted((root / "checkpoints").glob("iter_*"))
    pruned = [c for c in ckpts if (c / PRUNED).is_file()]
    full = [c for c in ckpts if not (c / PRUNED).is_file()]
    versions = sorted((root / "coevolver").glob("iter_*"))
    pruned_versions = parts["n_coevolver_pruned"]
    return {
        "checkpoint": max(du(c) - du(c / TRAINER_STATE) for c in full),  # weights + config + tokenizer + coevo.json
        "optimizer_state": max(du(c / TRAINER_STATE) for c in full),
        "pruned_metadata": (sum(du(c) for c in pruned) / len(pruned)) if pruned else 0.0,
        "shards": parts["shards"] / iterations,
        # a kept co-evolver version (the largest: it grows with the skills the bank has seen) and a pruned one
        "coevolver_version": max((du(v) for v in versions if not (v / PRUNED).is_file()), default=0),
        "coevolver": (parts["coevolver_pruned"] / pruned_versions)
        if pruned_versions
        else parts["coevolver"] / (iterations + 1),
        "reports_evals": parts["reports_evals"] / iterations,
        "other": parts["other"] / iterations,  # metrics.jsonl, summary.json
    }


def bound(iterations: int, unit: dict, keep_last: int, keep_every: int, keep_best: bool) -> float:
    kept = disk_bound_checkpoints(iterations, keep_last, keep_every, keep_best)
    growing = unit["pruned_metadata"] + unit["shards"] + unit["coevolver"] + unit["reports_evals"] + unit["other"]
    return (
        kept * (unit["checkpoint"] + unit["coevolver_version"])
        + min(2, keep_last) * unit["optimizer_state"]
        + iterations * growing
    )


def measure(root: Path, extra: list[Path]) -> dict:
    """An existing run directory by part (MB), and the extra paths given (catalog, MLflow store)."""
    parts = breakdown(root)
    sizes = {k: (v if k.startswith("n_") else round(v / MB, 3)) for k, v in parts.items()}
    sizes |= {str(p): round(du(p) / MB, 3) for p in extra}
    versions = sorted((root / "coevolver").glob("iter_*"))
    newest = max((v for v in versions if not (v / PRUNED).is_file()), default=None)
    if newest is not None:  # the newest whole version, file by file (kB): what a kept version costs now
        sizes["newest_coevolver_kB"] = {newest.name: {p.name: round(du(p) / 1e3, 1) for p in sorted(newest.iterdir())}}
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=50)
    parser.add_argument("--extrapolate", type=int, default=300)
    parser.add_argument(
        "--measure", type=Path, default=None, help="Only measure this existing run directory (MB by part)."
    )
    parser.add_argument(
        "--extra",
        type=Path,
        nargs="*",
        default=[],
        help="With --measure: further paths to size (catalog, MLflow store).",
    )
    parser.add_argument(
        "--cost", type=Path, default=None, help="Measure one run of this params file (see --out, --set)."
    )
    parser.add_argument(
        "--out", type=Path, default=RESULTS / "disk" / "cost", help="With --cost: the directory to run in."
    )
    parser.add_argument("--set", dest="sets", action="append", default=[], help="With --cost: section.key=value.")
    parser.add_argument(
        "--bootstrap-from",
        type=Path,
        default=None,
        help="With --cost: copy this checkpoint 0 in.",
    )
    args = parser.parse_args()
    if args.cost is not None:
        result = cost(args.cost, args.out, args.sets, args.bootstrap_from)
        write_json(args.out / "cost.json", result)
        console.print_json(data=result)
        return
    if args.measure is not None:
        console.print_json(data=measure(args.measure, args.extra))
        return
    n, big = args.iterations, args.extrapolate
    off, off_dir = run_arm("off", n, {"keep_last": None})
    on, on_dir = run_arm("on", n, {"keep_last": 2, "keep_every": 50, "keep_best": True})
    unit = per_iteration(on, on_dir, n)
    unit_off = per_iteration(off, off_dir, n)
    growing_off = (
        unit_off["checkpoint"]
        + unit_off["shards"]
        + unit_off["coevolver"]
        + unit_off["reports_evals"]
        + unit_off["other"]
    )
    result = {
        "iterations": n,
        "off": off,
        "on": on,
        "per_iteration_bytes": unit,
        "bound_on_bytes": bound(n, unit, 2, 50, True)
        - unit["checkpoint"]
        + on["bootstrap"],  # the bound's +1 is the bootstrap
        "extrapolated": {
            "iterations": big,
            "off_bytes": off["bootstrap"] + big * growing_off + 2 * unit_off["optimizer_state"],
            "on_bound_bytes": on["bootstrap"] + bound(big, unit, 2, 50, True) - unit["checkpoint"],
        },
    }
    write_json(RESULTS / "disk" / "disk.json", result)
    assert on["total"] <= result["bound_on_bytes"], "the retained run exceeds its bound"
    console.print(
        f"{n} iterations: retention off {off['total'] / MB:.1f} MB ({off['n_kept']} full checkpoints), "
        f"on {on['total'] / MB:.1f} MB ({on['n_kept']} kept, {on['n_pruned']} pruned)"
    )
    console.print({k: round(v / 1e3, 1) for k, v in unit.items()}, "kB per unit")
    ext = result["extrapolated"]
    console.print(
        f"extrapolated to {big} iterations: off {ext['off_bytes'] / MB:.1f} MB, on <= "
        f"{ext['on_bound_bytes'] / MB:.1f} MB "
        f"({disk_bound_checkpoints(big, 2, 50, True)} checkpoints incl. the bootstrap, ceil({big}/50) = "
        f"{math.ceil(big / 50)})"
    )


if __name__ == "__main__":
    main()
