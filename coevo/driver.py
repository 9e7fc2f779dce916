"""The plain-Python training driver: N iterations of rollout -> verify -> co-evolve -> update -> eval.

One readable loop with a timer per phase (verl's `fit`), usable without Prefect; the Prefect flow
(`flows/train.py`) calls the same stage functions (`coevo.stages`). Outputs under run.out_dir:
  bootstrap/               the initial policy (checkpoint 0): HF checkpoint + coevo.json with its lineage
  checkpoints/iter_NNNN/   the checkpoint after iteration N, same layout, optimizer state in the newest;
                           weights pruned to metadata unless run.retention keeps them (coevo/policy/retention.py)
  evals/iter_NNNN.json     the held-out evaluation of checkpoint N (when due): retention's keep_best reads it;
                           under the chat format it names the instruction the questions were asked with
  coevolver/iter_NNNN/     co-evolver version after iteration N (iter_0000 = the initial one)
  rollouts/, rewards/      the validated stage tables, one parquet shard per iteration
  reports/iter_NNNN.json   the co-evolution report (skills measured, admitted, rejected, retired)
  metrics.jsonl            one JSON line of metrics per iteration, appended as it ends (coevo/metrics_log.py)
  summary.json             checkpoint paths, curve, skill admissions, wall time
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console

from coevo import stages
from coevo.coevolvers.composite import member_reports
from coevo.config import Config
from coevo.io import write_json
from coevo.metrics_log import MetricsLog
from coevo.runlock import run_lock


class Timers:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str):
        start = time.perf_counter()
        yield
        self.seconds[f"time/{name}"] = self.seconds.get(f"time/{name}", 0.0) + time.perf_counter() - start


def set_threads(cfg: Config) -> None:
    import torch

    if cfg.policy.threads:
        torch.set_num_threads(cfg.policy.threads)
    torch.use_deterministic_algorithms(True, warn_only=True)


def over_time_budget(cfg: Config, started: float) -> bool:
    """run.time_budget_s (wall seconds since the run started, perf_counter) is spent: both runners
    stop after the iteration that spent it and record `stopped_by: time_budget` in summary.json."""
    return cfg.run.time_budget_s is not None and time.perf_counter() - started > cfg.run.time_budget_s


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
    during the run). Unfrozen after, so they are collected at exit as usual. A decorator on both loops (`train`, `flows.train.train_flow`)."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def train(cfg: Config, console: Console | None = None, continue_latest: bool = False) -> dict:
    """Run the whole training with the plain driver, holding the run directory's lock
    (coevo/runlock.py; RunLocked if another process holds it); returns (and writes) the run summary.
    `continue_latest`: run.iterations more after the newest complete iteration, as the flow does."""
    console = console or Console(soft_wrap=True)
    with run_lock(cfg.run.out_dir, "coevo.driver.train", log=console.print):
        return _train(cfg, console, continue_latest)


@frozen_heap()
def _train(cfg: Config, console: Console, continue_latest: bool) -> dict:
    start = time.perf_counter()
    set_threads(cfg)
    setup = Timers()
    with setup.phase("prepare"):
        data = stages.prepare_stage(cfg)
    with setup.phase("bootstrap"):
        boot = stages.bootstrap_stage(cfg, data)
    first = stages.latest_complete(cfg) + 1 if continue_latest else 1
    last = first + cfg.run.iterations - 1
    layout = stages.RunLayout(cfg.run.out_dir)
    checkpoint, coevolver = str(layout.checkpoint(first - 1)), str(layout.coevolver(first - 1))
    curve = [
        {
            "iteration": first - 1,
            **stages.evaluate_stage(cfg, first - 1, checkpoint, coevolver, data["test"]["path"])["metrics"],
        }
    ]
    console.print(
        f"[bold]iteration {first - 1}[/]: {boot['bootstrap'] if first == 1 else checkpoint} | eval/acc={curve[0]['eval/acc']:.3f}"
    )
    log = MetricsLog(cfg.run.out_dir, first)
    completed, stopped_by = first - 1, "iterations"
    for it in range(first, last + 1):
        timers, train_path = Timers(), data["train"]["path"]
        rollouts, rewards = rollout_and_verify(cfg, it, checkpoint, coevolver, train_path, timers)
        with timers.phase("coevolve"):
            evolved = stages.coevolve_stage(
                cfg, it, coevolver, rollouts["path"], rewards["path"], train_path, data["test"]["path"]
            )
        with timers.phase("update"):
            updated = stages.update_stage(cfg, it, checkpoint, rollouts["path"], rewards["path"], evolved["path"], data)
        checkpoint, coevolver = updated["checkpoint"], evolved["path"]
        metrics = {
            "iteration": float(it),
            **rollouts["metrics"],
            **rewards["metrics"],
            **evolved["metrics"],
            **updated["metrics"],
        }
        if eval_due(cfg, it, last):
            with timers.phase("eval"):
                metrics.update(stages.evaluate_stage(cfg, it, checkpoint, coevolver, data["test"]["path"])["metrics"])
            curve.append({"iteration": it, **{k: v for k, v in metrics.items() if k.startswith(("eval/", "val/"))}})
        with timers.phase("retain"):
            stages.retain_stage(cfg, it)  # after the eval: keep_best sees this iteration's accuracy
        metrics.update(timers.seconds)
        log.append(metrics)
        console.print(format_progress(metrics))
        completed = it
        if over_time_budget(cfg, start) and it < last:
            console.print(
                f"time budget {cfg.run.time_budget_s}s reached after iteration {it}; rerun with run.iterations={it - first + 1} to reproduce"
            )
            stopped_by = "time_budget"
            if curve[-1]["iteration"] != it:
                curve.append(
                    {
                        "iteration": it,
                        **stages.evaluate_stage(cfg, it, checkpoint, coevolver, data["test"]["path"])["metrics"],
                    }
                )
            break
    return write_summary(
        cfg,
        curve,
        first,
        completed,
        time.perf_counter() - start,
        {"setup_time_s": setup.seconds, "bootstrap": boot, "stopped_by": stopped_by},
    )


def rollout_and_verify(
    cfg: Config, it: int, checkpoint: str, coevolver: str, train: str, timers: Timers
) -> tuple[dict, dict]:
    """Rollout and verification in pipeline.shards shards, one after another, merged when more than
    one (coevo/sharding.py): the flow computes the same shards, locally or on Ray workers."""
    k = cfg.pipeline.shards
    with timers.phase("rollout"):
        rolled = [stages.rollout_stage(cfg, it, checkpoint, coevolver, train, j, k) for j in range(k)]
    with timers.phase("verify"):
        scored = [stages.verify_stage(cfg, it, r["path"], train, j, k) for j, r in enumerate(rolled)]
        if k == 1:
            return rolled[0], scored[0]
        merged = stages.merge_stage(cfg, it, [r["path"] for r in rolled], [r["path"] for r in scored])
    return merged["rollouts"], merged["rewards"]


def write_summary(cfg: Config, curve: list[dict], first: int, last: int, wall: float, extra: dict) -> dict:
    """summary.json of a run (driver or flow): checkpoints, curve, skill admissions, wall time."""
    layout = stages.RunLayout(cfg.run.out_dir)
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
    members = [
        member for report in reports for member in member_reports(report)
    ]  # a list of co-evolvers: each member's
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
    parts = [
        f"it {int(m['iteration']):3d}",
        f"pass {m['verify/pass_rate']:.3f}",
        f"kept {int(m.get('policy/groups_kept', 0))}",
    ]
    if "eval/acc" in m:
        parts.append(f"[bold]eval/acc {m['eval/acc']:.3f}[/]")
        if "eval/acc_skills" in m:
            parts.append(f"acc_skills {m['eval/acc_skills']:.3f}")
    active = int(m.get("coevo/n_active", 0) + m.get("coevo/n_stable", 0))
    parts.append(f"skills +{int(m.get('coevo/admitted', 0))}/-{int(m.get('coevo/rejected', 0))} active {active}")
    parts.append(" ".join(f"{k[5:]} {v:.2f}s" for k, v in m.items() if k.startswith("time/")))
    return " | ".join(parts)
