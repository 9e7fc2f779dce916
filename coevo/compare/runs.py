"""One arm run of a comparison, as the comparison reads it: where it lives and what it measured.

An arm run is an ordinary coevo run in `<comparison>/runs/<arm>-seed<k>/`. When it has finished, the
comparison writes `compare_arm.json` beside its outputs: the arm, the seed, the run's `identity`
(coevo/compare/spec.py: what it computes, whatever its directory), `spec_sha256` (the sha256 of the
spec file's bytes when the sitting that ran it started: the seeds were fixed in that file; markers
from before it was kept lack it) and its `record`:
  curve       every evaluation: iteration, cumulative measured training seconds, eval/acc, and the
              greedy verdict of each test problem (evals/iter_NNNN.json); where the run has a
              validation split, val/acc and each validation problem's verdict as well
  steps       per iteration: measured seconds of rollout, verify, coevolve, update (and eval when due)
              and coevo/zero_var_share
A comparison rerun finds the marker and reads the record instead of training again; a results
directory made on another day or machine merges through the same markers.

Measured seconds are the ones MLflow logged for the iteration (tracking logs an iteration once,
when it first completes), so a run killed and resumed keeps its first measurement of each iteration
instead of the time its restored stages took; metrics.jsonl is the fallback.
"""

from __future__ import annotations

import json
from pathlib import Path

from coevo.config import Config
from coevo.io import write_json

MARKER = "compare_arm.json"
TRAIN_PHASES = ("rollout", "verify", "coevolve", "update")  # measured training seconds: these four
STAGES = (*TRAIN_PHASES, "eval")


def cell_dir(root: Path, arm: str, seed: int) -> Path:
    return Path(root) / "runs" / f"{arm}-seed{seed}"


def read_marker(run_dir: Path) -> dict | None:
    path = Path(run_dir) / MARKER
    return json.loads(path.read_text()) if path.is_file() else None


def mlflow_seconds(cfg: Config) -> dict[int, dict[str, float]]:
    """{iteration: {stage: seconds}} as the run's MLflow run logged them; {} when it cannot be read."""
    from mlflow import MlflowClient

    from coevo.tracking.mlflow_tracker import RUN_FILE, resolve_tracking_uri

    try:
        run_id = json.loads((Path(cfg.run.out_dir) / RUN_FILE).read_text())["run_id"]
        uri, _ = resolve_tracking_uri(cfg.tracking.mlflow_uri)
        client = MlflowClient(tracking_uri=uri)
        found: dict[int, dict[str, float]] = {}
        for stage in STAGES:
            for point in client.get_metric_history(run_id, f"time/{stage}"):
                found.setdefault(int(point.step), {})[stage] = float(point.value)
        return found
    except (OSError, KeyError, ValueError):
        return {}


def steps_of(cfg: Config) -> list[dict]:
    """Per iteration: the measured stage seconds (MLflow's, else metrics.jsonl's) and the zero-variance share
    (under dynamic sampling, of the groups the update trained on; the drawn groups' share beside it)."""
    rows = [
        json.loads(line) for line in (Path(cfg.run.out_dir) / "metrics.jsonl").read_text().splitlines() if line.strip()
    ]
    logged = mlflow_seconds(cfg)
    steps = []
    for row in rows:
        it = int(row["iteration"])
        seconds = {stage: logged.get(it, {}).get(stage, row.get(f"time/{stage}", 0.0)) for stage in STAGES}
        step = {"iteration": it, "seconds": seconds, "zero_var_share": row.get("coevo/zero_var_share")}
        if "rollout/ds_zero_var_share_kept" in row:  # dynamic sampling: the trained batch's share, and the drawn one
            step |= {
                "zero_var_share": row["rollout/ds_zero_var_share_kept"],
                "zero_var_share_drawn": row["rollout/ds_zero_var_share_drawn"],
                "ds_rounds": row["rollout/ds_rounds"],
            }
        steps.append(step)
    return sorted(steps, key=lambda s: s["iteration"])


def curve_of(cfg: Config, steps: list[dict]) -> list[dict]:
    """Every evaluation of the run with its cumulative measured training seconds and verdicts."""
    evals, clock, elapsed = (
        Path(cfg.run.out_dir) / "evals",
        {0: 0.0},
        0.0,
    )  # coevo.stages.RunLayout.evals (not imported: it loads torch)
    for step in steps:
        elapsed += sum(step["seconds"][phase] for phase in TRAIN_PHASES)
        clock[step["iteration"]] = elapsed
    curve = []
    for path in sorted(evals.glob("iter_*.json")):
        record = json.loads(path.read_text())
        it = int(record["iteration"])
        if "verdicts" not in record:
            raise ValueError(
                f"{path}: no per-problem verdicts (written before `coevo compare` existed?); rerun the arm in a "
                f"fresh directory"
            )
        point = {
            "iteration": it,
            "train_seconds": clock.get(it, elapsed),
            "acc": record["metrics"]["eval/acc"],
            "verdicts": record["verdicts"],
        }
        if "val_verdicts" in record:  # evaluations written before validation verdicts were kept have none
            point |= {"val_acc": record["metrics"]["val/acc"], "val_verdicts": record["val_verdicts"]}
        curve.append(point)
    return curve


def finish(cfg: Config, arm: str, seed: int, ident: str, spec_sha256: str | None = None) -> dict:
    """Write the finished run's marker (atomically) and return it. `spec_sha256`: the hash of the spec
    file the sitting that ran it read (its seeds fixed before the run); markers written before it was
    kept have none and load as `None`."""
    steps = steps_of(cfg)
    marker = {"arm": arm, "seed": seed, "identity": ident, "record": {"steps": steps, "curve": curve_of(cfg, steps)}}
    if spec_sha256:
        marker["spec_sha256"] = spec_sha256
    write_json(Path(cfg.run.out_dir) / MARKER, marker)
    return marker
