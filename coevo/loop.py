"""The training loop, written once: N iterations of rollout -> verify -> co-evolve -> update -> eval.

One loop (verl's `fit`) over a `Runner`, the backend that runs the stages: the plain driver
(coevo/driver.py) calls `coevo.stages` directly; the Prefect flow (flows/train.py) runs the same
stages as cached, retried tasks, tracks them in MLflow and ingests them into the catalog. What the
two must not disagree on is here:
- the resume point: iteration 1 after the bootstrap, or with `continue_latest` the iteration after
  the newest complete one (`latest_complete`);
- what each iteration runs under (coevo/stages/in_force.py `in_force`: params after the harness, training split,
  batch), resolved once at its start and handed to every stage;
- a timer per phase, the evaluation schedule (every eval.every iterations and after the last) and
  the time budget (run.time_budget_s: the run stops after the iteration that spent it, with that
  iteration evaluated);
- rollout and verification in pipeline.shards shards, merged when more than one (coevo/sharding.py);
- metrics.jsonl (one line per iteration, appended as it ends: coevo/metrics_log.py), the progress
  line and summary.json.

Outputs under run.out_dir:
  bootstrap/               the initial policy (checkpoint 0): HF checkpoint + coevo.json with its lineage
  checkpoints/iter_NNNN/   the checkpoint after iteration N, same layout, optimizer state in the newest;
                           weights pruned to metadata unless run.retention keeps them (coevo/model/retention.py)
  evals/iter_NNNN.json     the held-out evaluation of checkpoint N (when due): retention's keep_best reads it;
                           under the chat format it names the instruction the questions were asked with
  coevolver/iter_NNNN/     co-evolver version after iteration N (iter_0000 = the initial one)
  rollouts/, rewards/      the validated stage tables, one parquet shard per iteration
  reports/iter_NNNN.json   the co-evolution report (skills measured, admitted, rejected, retired)
  in_force/iter_NNNN.json  what iteration N ran under (coevo/records.py `InForce`) and what it was resolved from
  proposals/iter_NNNN.parquet  the proposer's problems iteration N draws from besides the train split (if any)
  metrics.jsonl            one JSON line of metrics per iteration, appended as it ends (coevo/metrics_log.py)
  summary.json             checkpoint paths, curve, skill admissions, wall time
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from coevo import progress
from coevo.coevolvers.base import read_manifest
from coevo.coevolvers.composite import member_reports
from coevo.config import Config
from coevo.io import write_json
from coevo.layout import RunLayout
from coevo.metrics_log import MetricsLog
from coevo.model.checkpoint import policy_version
from coevo.records import Artifact, Bootstrapped, Evolved, InForce, Splits, Table, Trained
from coevo.stages.in_force import in_force
from coevo.stages.resume import latest_complete, remove_orphans
from coevo.store.lineage import code_version


@dataclass(frozen=True)
class Position:
    """What an iteration starts from: a checkpoint (its weights' sha256) and a co-evolver version (its
    content hash), as the stages' records name them and the flow's task keys hold them."""

    checkpoint: Artifact
    coevolver: Artifact

    @classmethod
    def saved(cls, cfg: Config, it: int) -> Position:
        """Checkpoint and co-evolver version `it` as they are on disk (0: the bootstrap)."""
        layout = RunLayout(cfg.run.out_dir)
        checkpoint, coevolver = layout.checkpoint(it), layout.coevolver(it)
        return cls(
            Artifact(str(checkpoint), policy_version(checkpoint)),
            Artifact(str(coevolver), read_manifest(coevolver)["content_hash"]),
        )

    @classmethod
    def after(cls, updated: Trained, evolved: Evolved) -> Position:
        """Where the next iteration starts: this one's update and co-evolution records (their files and
        hashes only: a resumed run, which reads them from disk, keys its tasks the same)."""
        return cls(Artifact(updated.path, updated.sha256), Artifact(evolved.path, evolved.sha256))


class Runner(Protocol):
    """A backend of the loop: the stages of an iteration, and where the loop's news goes.

    Stage methods take what the iteration runs under (`now`, coevo/records.py `InForce`: resolved
    once per iteration by the loop) and return the stages' records (coevo/records.py): `Table`s, an
    `Evolved` co-evolver version, a `Trained` checkpoint; `data` is the prepared `Splits`."""

    catalog: bool  # whether finished iterations are ingested into the DuckDB catalog (`ingest`)

    def prepare(self) -> Splits: ...

    def bootstrap(self, data: Splits) -> Bootstrapped: ...

    def iterations(self, first: int, last: int, newest: int | None) -> AbstractContextManager:
        """Held around the iterations first..last (the flow's task runner); `newest`: the newest
        complete iteration when the loop looked it up (a `continue_latest` run), else None."""
        ...

    def rollout(self, now: InForce, at: Position, shards: int) -> list[Table]:
        """The iteration's rollout tables, one per shard."""
        ...

    def verify(self, now: InForce, rolled: list[Table]) -> list[Table]:
        """The rewards of each rollout shard."""
        ...

    def merge(self, it: int, rolled: list[Table], scored: list[Table]) -> tuple[Table, Table]:
        """The iteration's rollouts and rewards tables from more than one shard."""
        ...

    def coevolve(self, now: InForce, rollouts: Table, rewards: Table, data: Splits) -> Evolved: ...

    def update(
        self, now: InForce, at: Position, rollouts: Table, rewards: Table, evolved: Evolved, data: Splits
    ) -> Trained: ...

    def evaluate(self, at: Position, now: InForce, data: Splits) -> dict[str, float]:
        """The held-out metrics of checkpoint `now.iteration` (`at`, with its co-evolver version),
        asked as it was trained (`now`: what its iteration ran under)."""
        ...

    def retain(self, it: int, at: Position) -> None: ...

    def ingest(self, finished: list[dict]) -> None:
        """Finished iterations' tables into the catalog ({"iteration", "rollouts", "rewards", "report"})."""
        ...

    def started(self, it: int, metrics: dict[str, float], boot: Bootstrapped, data: Splits) -> None:
        """The evaluation of checkpoint `it`, the one the first iteration starts from."""
        ...

    def finished(
        self, it: int, metrics: dict, at: Position, curve: list[dict] | None, final: bool, report: str
    ) -> None:
        """Iteration `it` is done and its metrics line written; `curve` when it was evaluated."""
        ...

    def warn(self, message: str) -> None: ...

    def summary_extra(self, first: int, completed: int, boot: Bootstrapped, setup: dict[str, float]) -> dict:
        """The runner's own entries of summary.json."""
        ...


class Timers:
    """Seconds per phase; each phase also shown as progress (coevo/progress.py), named after `label`."""

    def __init__(self, label: str = "") -> None:
        self.seconds: dict[str, float] = {}
        self.label = label

    @contextmanager
    def phase(self, name: str):
        start = time.perf_counter()
        with progress.task(f"{self.label}{name}"):
            yield
        self.seconds[f"time/{name}"] = self.seconds.get(f"time/{name}", 0.0) + time.perf_counter() - start


def set_threads(cfg: Config) -> None:
    import torch

    if cfg.policy.threads:
        torch.set_num_threads(cfg.policy.threads)
    torch.use_deterministic_algorithms(True, warn_only=True)


def over_time_budget(cfg: Config, started: float) -> bool:
    """run.time_budget_s (wall seconds since the run started, perf_counter) is spent: the loop stops
    after the iteration that spent it and records `stopped_by: time_budget` in summary.json."""
    return cfg.run.time_budget_s is not None and time.perf_counter() - started > cfg.run.time_budget_s


def unversioned_code() -> str | None:
    """Why the checkpoints' lineage cannot name the code that trains them (no git commit where the run
    starts: a tarball or wheel install, or git missing), else None."""
    if code_version()["git_commit"] is not None:
        return None
    return (
        f"warning: {Path.cwd()} is not a git checkout (or git is missing): the lineage of this run's checkpoints "
        "records no code commit (`code: git ?`), only the coevo version; run from a git checkout to record it"
    )


def eval_due(cfg: Config, it: int, last: int) -> bool:
    """Evaluate every eval.every iterations and after the last one."""
    return it % cfg.eval.every == 0 or it == last


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Everything alive when a training starts (chiefly the imported libraries: ~0.7M objects with
    torch, transformers, Prefect and MLflow) kept out of the cyclic garbage collector's full passes
    while it runs: each full pass walked all of them, 0.4-0.8 s on a slow core, every 10-20
    iterations at the default scale. Frozen, the driver ran 16% faster per iteration; the flow ran
    as fast as before (its passes, now more frequent, walk the objects Prefect and MLflow leave
    during the run). Unfrozen after, so they are collected at exit as usual. A decorator on the loop (`run`)."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@frozen_heap()
def run(runner: Runner, cfg: Config, continue_latest: bool, started: float) -> dict:
    """Train run.iterations iterations with `runner` (the caller holds the run lock); returns (and
    writes) the run summary. `started`: the run's perf_counter start, what the time budget counts from."""
    set_threads(cfg)
    if (unversioned := unversioned_code()) is not None:
        runner.warn(unversioned)
    remove_orphans(cfg)  # temporary directories a writer killed last time left (named in a warning); none writes now
    setup = Timers()
    with setup.phase("prepare"):
        data = runner.prepare()
    with setup.phase("bootstrap"):
        boot = runner.bootstrap(data)
    newest = latest_complete(cfg) if continue_latest else None
    first = newest + 1 if newest is not None else 1
    last = first + cfg.run.iterations - 1
    at = Position.saved(cfg, first - 1)
    with progress.task(f"evaluation of checkpoint {first - 1}"):
        initial = runner.evaluate(at, in_force(cfg, first - 1, data, choose=False), data)
    curve, log = [{"iteration": first - 1, **initial}], MetricsLog(cfg.run.out_dir, first)
    runner.started(first - 1, initial, boot, data)
    completed, stopped_by, pending = first - 1, "iterations", []  # pending: iterations not yet in the catalog
    with runner.iterations(first, last, newest):
        for it in range(first, last + 1):
            progress.update("iterations", it - first, last - first + 1)
            timers = Timers(f"iteration {it}/{last}: ")
            with timers.phase("in_force"):
                now = in_force(cfg, it, data)  # what every stage of the iteration reads
            rollouts, rewards = rollout_and_verify(runner, cfg, now, at, timers)
            with timers.phase("coevolve"):
                evolved = runner.coevolve(now, rollouts, rewards, data)
            with timers.phase("update"):
                updated = runner.update(now, at, rollouts, rewards, evolved, data)
            at = Position.after(updated, evolved)
            if runner.catalog:
                tables = {"rollouts": shard(rollouts), "rewards": shard(rewards)}
                pending.append({"iteration": it, **tables, "report": evolved.report})
            metrics = {"iteration": float(it)}
            for stage in (rollouts, rewards, evolved, updated):
                metrics.update(stage.metrics)
            evaluated = eval_due(cfg, it, last)
            if evaluated:
                with timers.phase("eval"):
                    metrics.update(runner.evaluate(at, now, data))
            with timers.phase("retain"):
                runner.retain(it, at)  # after the eval: keep_best sees this iteration's accuracy
            if pending and (it % cfg.pipeline.ingest_every == 0 or it == last):
                with timers.phase("ingest"):
                    runner.ingest(pending)
                pending = []
            metrics.update(timers.seconds)
            stop = over_time_budget(cfg, started) and it < last
            if stop:  # the run ends here: its final evaluation and catalog ingest, as after the last iteration
                if not evaluated:
                    metrics.update(runner.evaluate(at, now, data))
                    evaluated = True
                if pending:
                    runner.ingest(pending)
                    pending = []
            log.append(metrics)
            if evaluated:
                curve.append({"iteration": it, **{k: v for k, v in metrics.items() if k.startswith(("eval/", "val/"))}})
            runner.finished(it, metrics, at, curve if evaluated else None, it == last or stop, evolved.report)
            completed = it
            if stop:
                runner.warn(
                    f"time budget {cfg.run.time_budget_s}s reached after iteration {it}; "
                    f"rerun with run.iterations={it - first + 1} to reproduce"
                )
                stopped_by = "time_budget"
                break
    extra = {**runner.summary_extra(first, completed, boot, setup.seconds), "stopped_by": stopped_by}
    return write_summary(cfg, curve, first, completed, time.perf_counter() - started, extra)


def rollout_and_verify(runner: Runner, cfg: Config, now: InForce, at: Position, timers: Timers) -> tuple[Table, Table]:
    """The iteration's rollouts and rewards records, in pipeline.shards shards (seeded per shard:
    coevo/sharding.py), merged when more than one."""
    k = cfg.pipeline.shards
    with timers.phase("rollout"):
        rolled = runner.rollout(now, at, k)
    with timers.phase("verify"):
        scored = runner.verify(now, rolled)
        if k == 1:
            return rolled[0], scored[0]
        return runner.merge(now.iteration, rolled, scored)


def shard(stage: Table) -> dict:
    """A stage table for the catalog ingest: its path and the sha256 of the content its stage validated."""
    return {"path": stage.path, "sha256": stage.sha256}


def write_summary(cfg: Config, curve: list[dict], first: int, last: int, wall: float, extra: dict) -> dict:
    """summary.json of a run: checkpoints, curve, skill admissions, wall time, and `extra`."""
    layout = RunLayout(cfg.run.out_dir)
    reports = [json.loads(layout.report(k).read_text()) for k in range(first, last + 1)]
    summary = {
        "iterations": last - first + 1,
        "wall_time_s": wall,
        "checkpoints": [str(layout.checkpoint(k)) for k in range(first - 1, last + 1)],
        "final_checkpoint": str(layout.checkpoint(last)),
        "final_coevolver": str(layout.coevolver(last)),
        "curve": curve,
        "initial_eval": curve[0],
        "final_eval": curve[-1],
        "skills": skill_summary(reports),
        **extra,
    }
    write_json(Path(cfg.run.out_dir) / "summary.json", summary)
    return summary


def skill_summary(reports: list[dict]) -> dict:
    members = [member for report in reports for member in member_reports(report)]  # a list's: each member's
    admitted = [entry for r in members for entry in r.get("admitted", [])]
    rejected = [entry for r in members for entry in r.get("rejected", [])]
    retired = [entry for r in members for entry in r.get("retired", [])]
    return {
        "admitted": admitted,
        "rejected": rejected,
        "retired": retired,
        "n_admitted": len(admitted),
        "n_rejected": len(rejected),
    }


def format_progress(m: dict[str, float]) -> str:
    """An iteration's progress line (rich markup): pass rate, groups kept, evaluation, skills, stage times."""
    parts = [
        f"it {int(m['iteration']):3d}",
        f"pass {m['verify/pass_rate']:.3f}",
        f"kept {int(m.get('policy/groups_kept', 0))}",
    ]
    if "eval/acc" in m:
        parts.append(f"[bold]eval/acc {m['eval/acc']:.3f}[/]")
        if "eval/acc_context" in m:
            parts.append(f"acc_context {m['eval/acc_context']:.3f}")
    active = int(m.get("coevo/n_active", 0) + m.get("coevo/n_stable", 0))
    parts.append(f"skills +{int(m.get('coevo/admitted', 0))}/-{int(m.get('coevo/rejected', 0))} active {active}")
    parts.append(" ".join(f"{k[5:]} {v:.2f}s" for k, v in m.items() if k.startswith("time/")))
    return " | ".join(parts)
