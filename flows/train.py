"""The `coevo-train` Prefect flow: the training loop (coevo/loop.py) as versioned, cached, resumable tasks.

The flow runs the loop every runner shares with `FlowRunner`, whose stages are the Prefect tasks of
tasks/stages.py. Per iteration: rollout -> verify -> co-evolve -> policy update (-> evaluate when
due) -> retain (checkpoint retention: run.retention) -> catalog ingest (every
pipeline.ingest_every) -> MLflow tracking (metrics; checkpoint, co-evolver version and learning
curve when due; see tasks/tracking.py) -> a Prefect table artifact.
Re-running the flow with the same params after a failure or a kill restores every completed task
from its persisted result (cache keys: inputs' content hashes + task source) and resumes at the
interrupted stage. With `continue_latest` (the nightly deployment) the flow starts from the newest
complete iteration of the run directory instead of the bootstrap. Either way the newest checkpoint
whose weights retention kept (`latest_complete`) bounds what the cache may stand in for: a cached
policy update after it whose checkpoint has been pruned or damaged since is run again
(`FlowRunner.update`; so is a cached co-evolution whose version retention pruned), and a cached
rollout or verify result whose shard no longer has its recorded sha256 is re-made (flows/fanout.py
`remade`). Rollout and verification run as pipeline.shards tasks on pipeline.task_runner (local, or
Ray workers: flows/fanout.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

from prefect import flow, get_run_logger
from prefect.artifacts import create_table_artifact
from rich.text import Text

from coevo import loop
from coevo.coevolvers.composite import member_reports
from coevo.config import Config, load_config
from coevo.layout import RunLayout
from coevo.loop import Position, format_progress
from coevo.model.checkpoint import META, damaged_files, read_pruned
from coevo.records import Bootstrapped, Evolved, InForce, Splits, Table, Trained
from coevo.runlock import RunLocked, run_lock
from coevo.stages.resume import latest_complete
from flows import fanout
from flows.fanout import task_runner
from tasks.stages import configured, results_dir
from tasks.tracking import FlowTracking

SKIPPED_RUNS = "skipped_runs.jsonl"  # in run.out_dir: scheduled runs skipped because the directory was in use


def publish(it: int, metrics: dict[str, float], report_path: str) -> None:
    """The iteration's Prefect table artifact: rewards, accuracy, stage times, skills admitted/retired."""
    report = json.loads(Path(report_path).read_text())
    rows = [{"metric": k, "value": round(v, 4)} for k, v in sorted(metrics.items())]
    rows += [
        {"metric": f"skills/{key}", "value": sum(len(member.get(key, [])) for member in member_reports(report))}
        for key in ("admitted", "rejected", "retired")
    ]
    create_table_artifact(table=rows, key="coevo-iteration", description=f"coevo iteration {it}")


class FlowRunner:
    """The loop's stages as Prefect tasks (coevo/loop.py `Runner`): cached by their inputs' hashes,
    rollout and verification in shards on pipeline.task_runner (flows/fanout.py), the catalog fed
    every pipeline.ingest_every iterations, MLflow and a table artifact per iteration. The newest
    complete iteration (`latest_complete`, once per flow) bounds what the cache may stand in for."""

    catalog = True

    def __init__(self, cfg: Config):
        self.cfg, self.t = cfg, configured(cfg)
        self.params = cfg.model_dump_json()  # one JSON string: see tasks/stages.py
        self.track = FlowTracking(cfg, results_dir(cfg))
        self.runner = None  # the started task runner during the iterations (None: local)
        self.resume_from = self.on_disk = 0

    def prepare(self) -> Splits:
        return self.t["prepare"](self.params)

    def bootstrap(self, data: Splits) -> Bootstrapped:
        boot = self.t["bootstrap"](self.params, data)
        if damaged_files(boot.checkpoint.path):  # a cached result whose checkpoint 0 was written into since: remade
            boot = self.t["bootstrap"].with_options(refresh_cache=True)(self.params, data)
        return boot

    @contextmanager
    def iterations(self, first: int, last: int, newest: int | None) -> Iterator[None]:
        # newest intact kept checkpoint (hashes it): cached updates after it must have their weights
        self.resume_from = latest_complete(self.cfg) if newest is None else newest
        layout = RunLayout(self.cfg.run.out_dir)
        self.on_disk = max((k for k in range(first, last + 1) if (layout.checkpoint(k) / META).is_file()), default=0)
        with task_runner(self.cfg) as self.runner:  # pipeline.task_runner (flows/fanout.py): None = in this process
            yield

    def rollout(self, now: InForce, at: Position, shards: int) -> list[Table]:
        return fanout.rollouts(self.t, self.runner, self.params, now, at, shards)

    def verify(self, now: InForce, rolled: list[Table]) -> list[Table]:
        return fanout.rewards(self.t, self.runner, self.params, now, rolled)

    def merge(self, it: int, rolled: list[Table], scored: list[Table]) -> tuple[Table, Table]:
        return fanout.merged(self.t, self.params, it, rolled, scored)

    def coevolve(self, now: InForce, rollouts: Table, rewards: Table, data: Splits) -> Evolved:
        args = (self.params, now, rollouts, rewards, data)
        evolved = self.t["coevolve"](*args)
        if now.iteration > self.resume_from and read_pruned(evolved.path) is not None:
            # a cached co-evolver version retention has pruned since (with its checkpoint), past the newest
            # kept checkpoint: evolve again from version it-1 (kept or just re-made; seeded: the same version)
            evolved = self.t["coevolve"].with_options(refresh_cache=True)(*args)
        return evolved

    def update(
        self, now: InForce, at: Position, rollouts: Table, rewards: Table, evolved: Evolved, data: Splits
    ) -> Trained:
        it, args = now.iteration, (self.params, now, at.checkpoint, rollouts, rewards, evolved, data)
        updated = self.t["policy-update"](*args)
        if it > self.resume_from and (
            read_pruned(updated.path) is not None or (it <= self.on_disk and damaged_files(updated.path))
        ):
            # a cached result whose weights retention has pruned since, or (a checkpoint there before this
            # flow started: only those are hashed) whose files no longer match coevo.json's sha256, past the
            # newest intact kept checkpoint: train again (from the kept checkpoint it-1, bit-identically)
            updated = self.t["policy-update"].with_options(refresh_cache=True)(*args)
        return updated

    def evaluate(self, at: Position, now: InForce, data: Splits) -> dict[str, float]:
        return self.t["evaluate"](self.params, now, at.checkpoint, at.coevolver, data)

    def retain(self, it: int, at: Position) -> None:
        self.t["retain"](self.params, it, at.checkpoint)

    def ingest(self, finished: list[dict]) -> None:
        self.t["ingest"](self.params, finished)

    def started(self, it: int, metrics: dict[str, float], boot: Bootstrapped, data: Splits) -> None:
        self.track(it, metrics, data=data)

    def finished(
        self, it: int, metrics: dict, at: Position, curve: list[dict] | None, final: bool, report: str
    ) -> None:
        logged = it % self.cfg.run.checkpoint_every == 0 or final
        checkpoint, coevolver = (asdict(at.checkpoint), asdict(at.coevolver)) if logged else (None, None)
        self.track(it, metrics, checkpoint, coevolver, curve, final)
        publish(it, metrics, report)
        get_run_logger().info(Text.from_markup(format_progress(metrics)).plain)

    def warn(self, message: str) -> None:
        get_run_logger().warning(message)

    def summary_extra(self, first: int, completed: int, boot: Bootstrapped, setup: dict[str, float]) -> dict:
        return {"first_iteration": first, "last_iteration": completed, "bootstrap": boot.report}


@flow(name="coevo-train")
def train_flow(
    params_file: str = "params.yaml",
    overrides: dict | None = None,
    continue_latest: bool = False,
    skip_if_locked: bool = False,
) -> dict:
    """Train holding run.out_dir's run lock (coevo/runlock.py). When another process holds it the
    flow fails with RunLocked, or, with `skip_if_locked` (the nightly deployment), returns
    {"skipped": ...} after appending the refusal to run.out_dir/skipped_runs.jsonl."""
    started = time.perf_counter()
    cfg = load_config(params_file, overrides)
    try:
        with run_lock(cfg.run.out_dir, f"prefect flow coevo-train {params_file}", log=get_run_logger().warning):
            return loop.run(FlowRunner(cfg), cfg, continue_latest, started)
    except RunLocked as exc:
        if not skip_if_locked:
            raise
        return record_skip(cfg, exc)


def record_skip(cfg: Config, exc: RunLocked) -> dict:
    """Append a skipped run (the holder that blocked it) to skipped_runs.jsonl and log it."""
    from prefect.runtime import flow_run

    entry = {
        "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "flow_run": str(flow_run.id),
        "holder": exc.holder,
    }
    get_run_logger().warning(f"skipped: {exc}")
    with (Path(cfg.run.out_dir) / SKIPPED_RUNS).open(
        "a"
    ) as fh:  # one short line per append: O_APPEND keeps lines whole
        fh.write(json.dumps(entry, sort_keys=True) + "\n")
    return {"skipped": entry}


def nightly_deployment(params_file: str, cfg: Config, overrides: dict | None = None):
    """The nightly deployment: the train flow on pipeline.schedule_cron, continuing the run directory."""
    return train_flow.to_deployment(
        name=cfg.pipeline.deployment_name,
        cron=cfg.pipeline.schedule_cron,
        parameters={
            "params_file": params_file,
            "overrides": overrides or {},
            "continue_latest": True,
            "skip_if_locked": True,
        },
    )
