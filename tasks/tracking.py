"""MLflow logging of the train flow, per iteration (a thin adapter over coevo.tracking).

It runs in the flow itself, not as a Prefect task: a task run costs ~9 ms of CPU in the flow
process and ~15 ms in the Prefect server (its three state events) per iteration, for a call that
only talks to MLflow. What the cached task gave is kept: a re-run after a kill logs no iteration
twice. Each iteration's logging is a Prefect transaction on the stage tasks' result storage; its
record is written once the logging has completed, and a re-run skips every iteration that has one.
"""

from __future__ import annotations

import json
from pathlib import Path

from prefect.filesystems import LocalFileSystem
from prefect.results import ResultStore
from prefect.transactions import transaction

from coevo.config import Config
from coevo.io import hash_bytes
from coevo.model.retention import SELECT_BY
from coevo.records import Splits
from coevo.tracking.mlflow_tracker import Tracker


def track_key(
    params: str,
    it: int,
    metrics: dict,
    checkpoint: dict | None,
    coevolver: dict | None,
    final: bool,
    data: Splits | None,
) -> str:
    """Stage times differ between a run and its resumption: key on what is logged, not on the timings."""
    identity = [params, it, checkpoint, coevolver, final, sorted(metrics), None if data is None else data.to_json()]
    return "track-" + hash_bytes(json.dumps(identity, sort_keys=True).encode())


class FlowTracking:
    """MLflow logging for one flow run. The Tracker (one MlflowClient, one `start`, which resumes the
    MLflow run of a killed flow) is made at the first iteration not logged yet, so a fully cached
    re-run does not touch MLflow."""

    def __init__(self, cfg: Config, results: Path):
        self.cfg = cfg
        self.params = cfg.model_dump_json()
        self.store = ResultStore(result_storage=LocalFileSystem(basepath=str(results)))
        self._tracker: Tracker | None = None

    def __call__(
        self,
        it: int,
        metrics: dict,
        checkpoint: dict | None = None,
        coevolver: dict | None = None,
        curve: list[dict] | None = None,
        final: bool = False,
        data: Splits | None = None,
    ) -> None:
        """Log iteration `it` (metrics; checkpoint, co-evolver and learning curve when given; the run
        ends with `final`) unless a previous run of this flow logged it already."""
        with transaction(
            key=track_key(self.params, it, metrics, checkpoint, coevolver, final, data), store=self.store
        ) as txn:
            if txn.is_committed():
                return
            tracker = self._started()
            if data is not None:
                tracker.log_dataset(Path(data.train.path), Path(data.test.path), digest=data.dvc_md5)
            tracker.log_iteration(it, metrics)
            if checkpoint is not None:
                tracker.log_checkpoint(
                    it, Path(checkpoint["path"]), metrics.get(SELECT_BY)
                )  # `best`: validation, never test
            if coevolver is not None:
                tracker.log_coevolver(it, Path(coevolver["path"]))
            if curve:
                tracker.log_curve(curve)
            if final:
                tracker.end("FINISHED")
            txn.stage(tracker.run_id)

    def _started(self) -> Tracker:
        if self._tracker is None:
            self._tracker = Tracker(self.cfg.tracking, Path(self.cfg.run.out_dir))
            self._tracker.start(self.cfg.model_dump(mode="json"), run_name=Path(self.cfg.run.out_dir).name)
        return self._tracker
