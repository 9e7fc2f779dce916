"""The Prefect task that logs one iteration to MLflow (a thin adapter over coevo.tracking)."""

from __future__ import annotations

import functools
import json
from pathlib import Path

from prefect import task
from prefect.context import TaskRunContext

from coevo.config import Config
from coevo.io import hash_bytes
from coevo.tracking.mlflow_tracker import Tracker


def _track_key(context, parameters: dict) -> str:
    """Stage times differ between a run and its resumption: key on what was logged, not on the timings."""
    p = parameters
    identity = [p["params"], p["it"], p["checkpoint"], p["coevolver"], p["final"], sorted(p["metrics"]), p.get("data")]
    return "track-" + hash_bytes(json.dumps(identity, sort_keys=True).encode())


@functools.lru_cache(maxsize=1)
def _tracker(params: str, flow_run_id: object) -> Tracker:
    """One Tracker (one MlflowClient) per flow run: building a client costs ~0.15 s, once per
    iteration that was 15% of an iteration. Not kept across flow runs, whose store may have been
    replaced in between. `start` below re-reads the run's state every call."""
    cfg = Config.model_validate_json(params)
    return Tracker(cfg.tracking, Path(cfg.run.out_dir))


@task(name="track", cache_key_fn=_track_key, persist_result=True)
def track(params: str, it: int, metrics: dict, checkpoint: dict | None, coevolver: dict | None, curve: list[dict], final: bool, data: dict | None = None) -> str:
    """MLflow logging of one iteration; cached like the stages, so a resumed flow never logs twice."""
    cfg = Config.model_validate_json(params)
    tracker = _tracker(params, TaskRunContext.get().task_run.flow_run_id)
    run_id = tracker.start(cfg.model_dump(mode="json"), run_name=Path(cfg.run.out_dir).name)
    if data is not None:
        tracker.log_dataset(Path(data["train"]["path"]), Path(data["test"]["path"]), digest=data["dvc_md5"])
    tracker.log_iteration(it, metrics)
    if checkpoint is not None:
        tracker.log_checkpoint(it, Path(checkpoint["path"]), metrics.get("eval/acc"))
    if coevolver is not None:
        tracker.log_coevolver(it, Path(coevolver["path"]))
    if curve:
        tracker.log_curve(curve)
    if final:
        tracker.end("FINISHED")
    return run_id
