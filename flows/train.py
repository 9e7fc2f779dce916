"""The `coevo-train` Prefect flow: the rollout -> verify -> co-evolve -> update loop as versioned, cached, resumable tasks.

Per iteration: rollout -> verify -> co-evolve -> policy update (-> evaluate when due) -> retain
(checkpoint retention: run.retention) -> catalog
ingest (every pipeline.ingest_every) -> MLflow tracking (metrics; checkpoint, co-evolver version and
learning curve when due; in the flow, see tasks/tracking.py) -> a Prefect table artifact.
Re-running the flow with the same params after a failure or a kill restores every completed task
from its persisted result (cache keys: inputs' content hashes + task source) and resumes at the
interrupted stage. With `continue_latest` (the nightly deployment) the flow starts from the newest
complete iteration of the run directory instead of the bootstrap. Either way the newest checkpoint
whose weights retention kept (`latest_complete`) bounds what the cache may stand in for: a cached
policy update after it whose checkpoint has been pruned or damaged since is run again (`run_iteration`;
so is a cached co-evolution whose version retention pruned), and a cached rollout or verify result
whose shard no longer has its recorded sha256 is re-made (flows/fanout.py `remade`). Rollout and
verification run as pipeline.shards tasks on pipeline.task_runner (local, or Ray workers: flows/fanout.py).
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from pathlib import Path

from prefect import flow, get_run_logger
from prefect.artifacts import create_table_artifact
from rich.text import Text

from coevo.coevolvers.base import read_manifest
from coevo.coevolvers.composite import member_reports
from coevo.config import Config, load_config
from coevo.driver import Timers, eval_due, format_progress, frozen_heap, over_time_budget, set_threads, write_summary
from coevo.metrics_log import MetricsLog
from coevo.policy.checkpoint import META, policy_version, read_pruned
from coevo.runlock import RunLocked, run_lock
from coevo.stages import RunLayout, damaged_files, latest_complete
from flows.fanout import rollout_and_verify, task_runner
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


def run_iteration(
    t: dict, runner, params: str, cfg: Config, it: int, last: int, state: dict, data: dict
) -> tuple[dict, dict]:
    """One iteration of tasks (rollout and verification in shards on `runner`: flows/fanout.py);
    returns the new state (checkpoint, co-evolver, shards not yet in the catalog) and the iteration's
    metrics. The catalog ingests every pipeline.ingest_every iterations."""
    timers, checkpoint, coevolver = Timers(), state["checkpoint"], state["coevolver"]
    rollouts, rewards = rollout_and_verify(
        t, runner, params, cfg, it, state, data, timers, possible=read_pruned(checkpoint["path"]) is None
    )
    with timers.phase("coevolve"):
        evolved = t["coevolve"](params, it, coevolver, rollouts, rewards, data)
        if it > state["resume_from"] and read_pruned(evolved["path"]) is not None:
            # a cached co-evolver version retention has pruned since (with its checkpoint), past the newest
            # kept checkpoint: evolve again from version it-1 (kept or just re-made; seeded: the same version)
            evolved = t["coevolve"].with_options(refresh_cache=True)(params, it, coevolver, rollouts, rewards, data)
    with timers.phase("update"):
        updated = t["policy-update"](params, it, checkpoint, rollouts, rewards, evolved, data)
        if it > state["resume_from"] and (
            read_pruned(updated["checkpoint"]) is not None
            or (it <= state["on_disk"] and damaged_files(updated["checkpoint"]))
        ):
            # a cached result whose weights retention has pruned since, or (a checkpoint there before this
            # flow started: only those are hashed) whose files no longer match coevo.json's sha256, past the
            # newest intact kept checkpoint: train again (from the kept checkpoint it-1, bit-identically)
            updated = t["policy-update"].with_options(refresh_cache=True)(
                params, it, checkpoint, rollouts, rewards, evolved, data
            )
    state = {
        "resume_from": state["resume_from"],
        "on_disk": state["on_disk"],
        "checkpoint": {"path": updated["checkpoint"], "weights_sha256": updated["weights_sha256"]},
        "coevolver": {"path": evolved["path"], "content_hash": evolved["content_hash"]},
        "report": evolved["report"],
        "shards": [
            *state.get("shards", []),
            {"iteration": it, "rollouts": shard(rollouts), "rewards": shard(rewards), "report": evolved["report"]},
        ],
    }
    metrics = {"iteration": float(it)}
    for stage in (rollouts, rewards, evolved, updated):
        metrics.update(stage["metrics"])
    if eval_due(cfg, it, last):
        with timers.phase("eval"):
            metrics.update(t["evaluate"](params, it, state["checkpoint"], state["coevolver"], data)["metrics"])
    with timers.phase("retain"):
        t["retain"](params, it, state["checkpoint"])  # after the eval: keep_best sees this iteration's accuracy
    if it % cfg.pipeline.ingest_every == 0 or it == last:
        with timers.phase("ingest"):
            t["ingest"](params, state.pop("shards"))
    return state, {**metrics, **timers.seconds}


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
            return train_locked(cfg, continue_latest, started)
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


@frozen_heap()
def train_locked(cfg: Config, continue_latest: bool, started: float) -> dict:
    """The flow's body, run under the run lock."""
    set_threads(cfg)
    params, t = cfg.model_dump_json(), configured(cfg)  # one JSON string: see tasks/stages.py
    track = FlowTracking(cfg, results_dir(cfg))
    data = t["prepare"](params)
    boot = t["bootstrap"](params, data)
    newest = latest_complete(cfg)  # hashes the newest checkpoint: once per flow
    first = newest + 1 if continue_latest else 1
    last = first + cfg.run.iterations - 1
    layout = RunLayout(cfg.run.out_dir)
    state = {
        "checkpoint": record(layout.checkpoint(first - 1), "checkpoint"),
        "coevolver": record(layout.coevolver(first - 1), "coevolver"),
    }
    state["resume_from"] = newest  # newest intact kept checkpoint: cached updates after it must have their weights
    state["on_disk"] = max((k for k in range(first, last + 1) if (layout.checkpoint(k) / META).is_file()), default=0)
    initial = t["evaluate"](params, first - 1, state["checkpoint"], state["coevolver"], data)["metrics"]
    curve, log = [{"iteration": first - 1, **initial}], MetricsLog(cfg.run.out_dir, first)
    track(first - 1, initial, data=data)
    completed, stopped_by = first - 1, "iterations"
    with task_runner(cfg) as runner:  # pipeline.task_runner (flows/fanout.py): None = in this process
        for it in range(first, last + 1):
            state, metrics = run_iteration(t, runner, params, cfg, it, last, state, data)
            stop = over_time_budget(cfg, started) and it < last
            if stop:  # the run ends here: its final evaluation and catalog ingest, as after the last iteration
                if "eval/acc" not in metrics:
                    metrics.update(t["evaluate"](params, it, state["checkpoint"], state["coevolver"], data)["metrics"])
                if state.get("shards"):
                    t["ingest"](params, state.pop("shards"))
            log.append(metrics)
            if "eval/acc" in metrics:
                curve.append({"iteration": it, **{k: v for k, v in metrics.items() if k.startswith(("eval/", "val/"))}})
            final = it == last or stop
            logged = it % cfg.run.checkpoint_every == 0 or final
            track(
                it,
                metrics,
                state["checkpoint"] if logged else None,
                state["coevolver"] if logged else None,
                curve if "eval/acc" in metrics else None,
                final,
            )
            publish(it, metrics, state["report"])
            get_run_logger().info(Text.from_markup(format_progress(metrics)).plain)
            completed = it
            if stop:
                get_run_logger().warning(
                    f"time budget {cfg.run.time_budget_s}s reached after iteration {it}; rerun with run.iterations={it - first + 1} to reproduce"
                )
                stopped_by = "time_budget"
                break
    extra = {
        "first_iteration": first,
        "last_iteration": completed,
        "bootstrap": boot.get("bootstrap", {}),
        "stopped_by": stopped_by,
    }
    return write_summary(cfg, curve, first, completed, time.perf_counter() - started, extra)


def shard(stage: dict) -> dict:
    """A stage table for the ingest task: its path and the sha256 of the content its stage validated."""
    return {"path": stage["path"], "sha256": stage["sha256"]}


def record(path: Path, kind: str) -> dict:
    """The {"path", hash} record a task passes on, for an existing checkpoint or co-evolver version."""
    if kind == "checkpoint":
        return {"path": str(path), "weights_sha256": policy_version(path)}
    return {"path": str(path), "content_hash": read_manifest(path)["content_hash"]}


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
