"""MLflow tracking of one flow run: params, metrics, problem data, checkpoints, co-evolvers, plots.

Everything goes through an `MlflowClient` bound to `tracking.mlflow_uri` (tracking and registry)
with an explicit run id: no fluent active run and no global `mlflow.set_tracking_uri`, so any thread
or process that builds a `Tracker` on the same `run_dir` logs to the same run.

What is logged where
  run        one MLflow run per flow run, in experiment `tracking.experiment`; its id is kept in
             `<run_dir>/mlflow_run.json` (written atomically). A new experiment on a SQLite store
             keeps its artifacts in `mlartifacts/` beside the database file (MLflow's own default
             would be `./mlruns` under the working directory).
  params     the flattened config: dotted keys ("optim.lr"), values as strings (lists as JSON),
             cut to MLflow's 6000 characters with a "...[truncated]" marker.
  metrics    step = iteration; names keep their namespace (rollout/, verify/, coevo/, policy/, eval/,
             time/). MLflow accepts only letters, digits and `_ - . / : space`, so "@" becomes
             "_at_" (eval/pass@4 -> eval/pass_at_4) and any other character "_".
  inputs     the problem dataset: the train split (input tag mlflow.data.context=train) under `name`
             and the test split (context=test) under `<name>-test`, both with digest = the DVC hash
             (MLflow caps a digest at 36 characters: a DVC md5 or "<md5>.dir" fits).
  artifacts  checkpoints/iter_NNNN/   the HF checkpoint files and coevo.json (no trainer_state.pt)
             coevolver/iter_NNNN/     the co-evolver directory with its manifest.json
             plots/learning_curve.png the learning curve, replaced at each call
  registry   model `tracking.model_name`: one version per distinct weights hash, source
             `runs:/<run_id>/checkpoints/iter_NNNN`, tags coevo.iteration, coevo.weights_sha256,
             coevo.checkpoint_path, coevo.val_acc. Alias "best" = the version with the highest
             coevo.val_acc (set here): the validation split's accuracy, never the test split's. "latest" is MLflow's
             built-in alias, which cannot be set (reserved) but resolves to the highest version number:
             `models:/<name>@latest` and `get_model_version_by_alias(name, "latest")` give the newest registered
             checkpoint, since versions are created in logging order and never twice for the same weights.

Resume and idempotency
  - `start` resumes the run named in mlflow_run.json when it still exists in the experiment, is not
    deleted and is not FINISHED (RUNNING, FAILED or KILLED: a crashed flow); it is set back to
    RUNNING. A FINISHED run is never reopened: the next flow run gets a new MLflow run.
  - On resume only params the run lacks are logged; a changed value keeps the logged one (MLflow
    params are immutable) and is reported in a warning.
  - `log_dataset` is skipped when the run already has an input with that digest.
  - `log_checkpoint` looks the weights hash up in the registry first: an existing version is
    returned (val_acc tag updated, "best" re-checked) without logging or registering again.
    A crash between logging and registering re-logs to the same artifact path (no orphan copy).
  - `log_coevolver` and `log_curve` write to fixed artifact paths, so re-logging overwrites.
  - Metrics are logged once per iteration: every batch that logs an iteration's metrics carries a
    marker metric coevo.metrics_chunk (step = iteration, value = the batch's index), and
    `log_iteration` skips the batches whose marker is there. The marker is a metric, not a tag,
    because MLflow's SQL store commits a batch's metrics in one transaction and its tags in another:
    a process killed between the two would leave the metrics without the marker, and the rerun would
    log the step twice. Runs logged before the marker existed are judged by their run tag
    coevo.metrics_step (an iteration at or below it is skipped). A flow that died between its
    metrics and its checkpoint (e.g. the tracking server went away) logs the rest on the rerun
    without a second point at that step.

Lineage
  `coevo lineage` and `coevo evaluate models:/<name>@<alias>` find a registered version's local
  checkpoint directory through the tag coevo.checkpoint_path (absolute path;
  `coevo.store.lineage.resolve_checkpoint`); coevo.weights_sha256 names the weights it holds.
"""

from __future__ import annotations

import json
import logging
import re
import time
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from urllib.parse import unquote

import mlflow.data
import pandas as pd
from mlflow import MlflowClient
from mlflow.data.dataset_source_registry import get_dataset_source_from_json
from mlflow.entities import DatasetInput, InputTag, Metric, Param, Run, RunStatus
from mlflow.entities.lifecycle_stage import LifecycleStage
from mlflow.entities.model_registry import ModelVersion
from mlflow.exceptions import MlflowException
from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT
from mlflow.utils.validation import MAX_METRICS_PER_BATCH, MAX_PARAM_VAL_LENGTH, MAX_PARAMS_TAGS_PER_BATCH

from coevo.config import TrackingConfig
from coevo.io import write_json
from coevo.model.checkpoint import TRAINER_STATE, policy_version
from coevo.tracking.plots import learning_curve

log = logging.getLogger(__name__)

RUN_FILE = "mlflow_run.json"
CURVE_FILE = "learning_curve.png"
TAG_ITERATION = "coevo.iteration"
TAG_WEIGHTS = "coevo.weights_sha256"
TAG_PATH = "coevo.checkpoint_path"
TAG_EVAL = "coevo.val_acc"  # the validation accuracy (val/acc) the checkpoint was logged with
TAG_METRICS_STEP = "coevo.metrics_step"  # read only: the de-dup marker of runs logged before METRICS_MARKER
METRICS_MARKER = "coevo.metrics_chunk"  # step = iteration, value = batch index; committed with the batch's metrics
ALIAS_BEST = "best"
TRUNCATED = "...[truncated]"
_BAD_METRIC_CHARS = re.compile(r"[^\w./\- ]")


def flatten_params(params: Mapping, prefix: str = "") -> dict[str, str]:
    """Nested mappings -> {"a.b.c": "value"}; lists as JSON, values cut to MLflow's length cap."""
    flat: dict[str, str] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_params(value, f"{name}."))
            continue
        text = json.dumps(value, default=str) if isinstance(value, (list, tuple)) else str(value)
        if len(text) > MAX_PARAM_VAL_LENGTH:
            text = text[: MAX_PARAM_VAL_LENGTH - len(TRUNCATED)] + TRUNCATED
        flat[name] = text
    return flat


def metric_name(key: str) -> str:
    """`key` with the characters MLflow rejects replaced: "@" -> "_at_", others -> "_"."""
    return _BAD_METRIC_CHARS.sub("_", key.replace("@", "_at_"))


def resolve_tracking_uri(uri: str) -> tuple[str, str | None]:
    """(uri with a SQLite path made absolute, artifact root for new experiments or None)."""
    prefix = "sqlite:///"
    if not uri.startswith(prefix):
        return uri, None
    db = Path(unquote(uri[len(prefix) :])).expanduser().resolve()
    db.parent.mkdir(parents=True, exist_ok=True)
    return f"{prefix}{db}", (db.parent / "mlartifacts").as_uri()


def _chunks(items: list, size: int) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class Tracker:
    """One MLflow run per flow run; see the module docstring for the layout and the resume rules."""

    def __init__(self, cfg: TrackingConfig, run_dir: Path):
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.uri, self._artifact_root = resolve_tracking_uri(cfg.mlflow_uri)
        self.client = MlflowClient(tracking_uri=self.uri, registry_uri=self.uri)
        self._run_id: str | None = None

    @property
    def run_id(self) -> str:
        if self._run_id is None:
            raise RuntimeError("Tracker.start() has not been called")
        return self._run_id

    # ---- run ----
    def start(self, params: dict, run_name: str) -> str:
        """Resume the unfinished run named in mlflow_run.json, else create one; return its id."""
        experiment_id = self._experiment_id()
        flat = flatten_params(params)
        resumable = self._resumable_run(experiment_id)
        if resumable is not None:
            self._run_id = resumable.info.run_id
            self.client.update_run(self._run_id, status=RunStatus.to_string(RunStatus.RUNNING))
            self._log_missing_params(flat, resumable.data.params)
            log.info("resumed MLflow run %s", self._run_id)
            return self._run_id
        run = self.client.create_run(experiment_id, run_name=run_name)
        self._run_id = run.info.run_id
        self._log_params(flat)
        write_json(
            self.run_dir / RUN_FILE, {"run_id": self._run_id, "experiment_id": experiment_id, "tracking_uri": self.uri}
        )
        return self._run_id

    def end(self, status: str = "FINISHED") -> None:
        """Terminate the run with `status` (FINISHED, FAILED or KILLED)."""
        self.client.set_terminated(self.run_id, status=status)

    def _experiment_id(self) -> str:
        experiment = self.client.get_experiment_by_name(self.cfg.experiment)
        if experiment is not None:
            return experiment.experiment_id
        return self.client.create_experiment(self.cfg.experiment, artifact_location=self._artifact_root)

    def _resumable_run(self, experiment_id: str) -> Run | None:
        """The run recorded in run_dir when it exists in `experiment_id` and is not finished."""
        path = self.run_dir / RUN_FILE
        if not path.is_file():
            return None
        try:
            run = self.client.get_run(json.loads(path.read_text())["run_id"])
        except (MlflowException, OSError, KeyError, ValueError):
            return None
        info = run.info
        if info.experiment_id != experiment_id or info.lifecycle_stage == LifecycleStage.DELETED:
            return None
        return None if info.status == RunStatus.to_string(RunStatus.FINISHED) else run

    def _log_params(self, flat: dict[str, str]) -> None:
        params = [Param(key, value) for key, value in flat.items()]
        for chunk in _chunks(params, MAX_PARAMS_TAGS_PER_BATCH):
            self.client.log_batch(self.run_id, params=chunk)

    def _log_missing_params(self, flat: dict[str, str], logged: Mapping[str, str]) -> None:
        changed = sorted(key for key, value in flat.items() if key in logged and logged[key] != value)
        if changed:
            log.warning("MLflow run %s keeps its logged values of changed params %s", self.run_id, changed)
        self._log_params({key: value for key, value in flat.items() if key not in logged})

    # ---- metrics and data ----
    def log_iteration(self, iteration: int, metrics: dict[str, float]) -> None:
        """Log `metrics` at step `iteration` (names sanitised by `metric_name`), once: each batch
        carries the marker metric METRICS_MARKER, committed in the same transaction as the batch's
        metrics, and a batch whose marker is already logged is not logged again."""
        if int(self.client.get_run(self.run_id).data.tags.get(TAG_METRICS_STEP, -1)) >= iteration:
            return  # logged in full by a version that marked steps with a tag
        done = {
            int(m.value)
            for m in self.client.get_metric_history(self.run_id, METRICS_MARKER)
            if m.step == int(iteration)
        }
        now = int(time.time() * 1000)
        batch = [Metric(metric_name(key), float(value), now, int(iteration)) for key, value in metrics.items()]
        for i, chunk in enumerate(list(_chunks(batch, MAX_METRICS_PER_BATCH - 1)) or [[]]):
            if i not in done:
                self.client.log_batch(
                    self.run_id, metrics=[*chunk, Metric(METRICS_MARKER, float(i), now, int(iteration))]
                )

    def log_dataset(self, train: Path, test: Path, digest: str, name: str = "problems") -> None:
        """Record the train and test splits as run inputs with the DVC hash as digest, once per run."""
        run = self.client.get_run(self.run_id)
        if any(item.dataset.digest == digest for item in run.inputs.dataset_inputs):
            return
        inputs = [
            self._dataset_input(train, digest, name, "train"),
            self._dataset_input(test, digest, f"{name}-test", "test"),
        ]
        self.client.log_inputs(self.run_id, datasets=inputs)

    @staticmethod
    def _dataset_input(path: Path, digest: str, name: str, context: str) -> DatasetInput:
        source = get_dataset_source_from_json(json.dumps({"uri": str(Path(path).resolve())}), source_type="local")
        # no model schema is inferred from the problems table: mlflow's hint about its integer columns is noise
        with warnings.catch_warnings():
            warnings.filterwarnings(
                "ignore", message="Hint: Inferred schema contains integer column", category=UserWarning
            )
            dataset = mlflow.data.from_pandas(pd.read_parquet(path), source=source, name=name, digest=digest)
            entity = dataset._to_mlflow_entity()  # where the schema is inferred
        return DatasetInput(dataset=entity, tags=[InputTag(key=MLFLOW_DATASET_CONTEXT, value=context)])

    # ---- artifacts and registry ----
    def log_checkpoint(self, iteration: int, checkpoint: Path, eval_acc: float | None) -> str:
        """Log and register the checkpoint (once per weights hash), update "best"; return the version."""
        checkpoint = Path(checkpoint).resolve()
        weights = policy_version(checkpoint)
        version = self._version_with_weights(weights)
        if version is None:
            artifact_path = f"checkpoints/iter_{iteration:04d}"
            for file in sorted(p for p in checkpoint.rglob("*") if p.is_file() and p.name != TRAINER_STATE):
                parent = file.relative_to(checkpoint).parent.as_posix()
                self.client.log_artifact(
                    self.run_id, str(file), artifact_path if parent == "." else f"{artifact_path}/{parent}"
                )
            version = self._register(f"runs:/{self.run_id}/{artifact_path}", iteration, weights, checkpoint, eval_acc)
        elif eval_acc is not None:
            self.client.set_model_version_tag(self.cfg.model_name, version.version, TAG_EVAL, str(float(eval_acc)))
        if eval_acc is not None:
            self._update_best(version.version, float(eval_acc))
        return str(version.version)

    def _version_with_weights(self, weights: str) -> ModelVersion | None:
        query = f"name = '{self.cfg.model_name}' and tags.`{TAG_WEIGHTS}` = '{weights}'"
        found = self.client.search_model_versions(query)
        return found[0] if found else None

    def _register(
        self, source: str, iteration: int, weights: str, checkpoint: Path, eval_acc: float | None
    ) -> ModelVersion:
        try:
            self.client.create_registered_model(self.cfg.model_name)
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
        tags = {TAG_ITERATION: str(iteration), TAG_WEIGHTS: weights, TAG_PATH: str(checkpoint)}
        if eval_acc is not None:
            tags[TAG_EVAL] = str(float(eval_acc))
        return self.client.create_model_version(self.cfg.model_name, source, run_id=self.run_id, tags=tags)

    def _update_best(self, version: int | str, eval_acc: float) -> None:
        """Point "best" at `version` when `eval_acc` (validation accuracy) beats the current best's coevo.val_acc (or
        none)."""
        name = self.cfg.model_name
        best = self.client.get_registered_model(name).aliases.get(ALIAS_BEST)
        best_acc = (
            float(self.client.get_model_version(name, best).tags.get(TAG_EVAL, "-inf")) if best else float("-inf")
        )
        if eval_acc > best_acc:
            self.client.set_registered_model_alias(name, ALIAS_BEST, str(version))

    def log_coevolver(self, iteration: int, coevolver_dir: Path) -> None:
        """Log the co-evolver directory under coevolver/iter_NNNN (a re-log overwrites it)."""
        self.client.log_artifacts(self.run_id, str(coevolver_dir), f"coevolver/iter_{iteration:04d}")

    def log_curve(self, curve: list[dict]) -> Path:
        """Write run_dir/learning_curve.png and log it as plots/learning_curve.png; return the path."""
        path = learning_curve(curve, self.run_dir / CURVE_FILE)
        self.client.log_artifact(self.run_id, str(path), "plots")
        return path
