"""The `coevo-compare` Prefect flow: the arms x seeds of a spec as ordinary coevo runs, then the table.

Each arm run is the `coevo-train` flow (a subflow) in `<out>/runs/<arm>-seed<k>/`, with its own
MLflow run nested under the comparison's parent run and its lineage as usual. Runs go in
`coevo.compare.results.interleaved` order. When a run finishes, its record is written beside it
(`compare_arm.json`, coevo/compare/runs.py); a rerun of a killed comparison restores those runs
without touching them and runs the rest (an interrupted arm run resumes from its cached stages).
The table (coevo/compare/table.py) covers every finished run in `out` and the `merge` directories;
it and the figure are logged to the parent run. `nightly_deployment` serves the flow on a cron
schedule, each night in a fresh dated directory, so the comparison is measured on that day's code.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from prefect import flow, get_run_logger

from coevo import progress
from coevo.compare.results import ParentRun, finished_runs, interleaved, sitting_seeds
from coevo.compare.runs import cell_dir, finish, read_marker
from coevo.compare.spec import Spec, arm_config, arm_overrides, identities, identity, load_spec
from coevo.compare.table import build_table, write_outputs
from coevo.errors import InputError
from coevo.faults import pause_point
from coevo.runlock import run_lock
from flows.train import train_flow


def results_dir(spec: Spec, out: str | None, dated: bool, now: datetime | None = None) -> Path:
    """`out` (default runs/compare/<name>), with a subdirectory of the UTC date when `dated`."""
    root = Path(out) if out else Path("runs") / "compare" / spec.name
    return root / (now or datetime.now(timezone.utc)).strftime("%Y-%m-%d") if dated else root


def arm_run(spec: Spec, arm: str, seed: int, root: Path) -> tuple[dict, bool]:
    """(the finished run's marker, whether it was restored rather than trained here)."""
    run_dir = cell_dir(root, arm, seed)
    cfg = arm_config(spec, spec.arm(arm), seed, run_dir)
    ident = identity(cfg)
    marker = read_marker(run_dir)
    if marker is not None:
        if marker["identity"] not in identities(cfg):
            raise InputError(
                f"{run_dir}: finished with other params than {spec.path} now gives arm {arm!r}; remove it or "
                f"compare into another --out"
            )
        return marker, True
    train_flow(str(spec.arm(arm).params), arm_overrides(spec, spec.arm(arm), seed, run_dir))
    return finish(cfg, arm, seed, ident, spec.sha256), False


@flow(name="coevo-compare")
def compare_flow(
    spec_file: str,
    out: str | None = None,
    seeds: list[int] | None = None,
    merge: list[str] | None = None,
    dated: bool = False,
) -> dict:
    """Run (or restore) the spec's arm runs for `seeds` (default: all) in `out`, then write and log
    the table of every finished run in `out` and `merge`. `dated`: `out` gets a subdirectory of
    today's date (UTC), as the nightly deployment runs it."""
    spec = load_spec(spec_file)
    root = results_dir(spec, out, dated)
    seeds = sitting_seeds(spec, seeds)
    merged = [Path(m) for m in merge or []]
    elsewhere = finished_runs(spec, merged)  # a bad merge directory stops the comparison before anything runs
    log = get_run_logger()
    with run_lock(root, f"prefect flow coevo-compare {spec_file}", log=log.warning):
        parent = ParentRun(spec, root)
        todo = [cell for cell in interleaved(spec, seeds) if cell not in elsewhere]
        for done, (arm, seed) in enumerate(todo):
            progress.update("compare runs", done, len(todo))
            with progress.task(f"{arm} seed {seed} ({done + 1} of {len(todo)})"):
                _, restored = arm_run(spec, arm, seed, root)
            nested = parent.nest(cell_dir(root, arm, seed), arm, seed)
            log.info(
                f"{arm} seed {seed}: "
                f"{'restored' if restored else 'trained'}"
                f"{'' if nested else ' (its MLflow run is in another store: not nested)'}"
            )
            pause_point("compare-arm", f"{arm}-seed{seed}")
        table = build_table(spec, list(finished_runs(spec, [root, *merged]).values()))
        files = write_outputs(table, root)
        parent.finish(table, files)
    return {
        "out": str(root),
        "files": {k: str(v) for k, v in files.items()},
        "parent_run_id": parent.run_id,
        "complete": table["complete"],
        "table": table,
    }


def nightly_deployment(spec_file: str, out: str | None, cron: str, name: str):
    """`coevo compare SPEC --serve`: the comparison every night at `cron`, each in <out>/<date>."""
    return compare_flow.to_deployment(
        name=name, cron=cron, parameters={"spec_file": spec_file, "out": out, "dated": True}
    )
