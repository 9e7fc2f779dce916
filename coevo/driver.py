"""The plain-Python runner of the training loop: the stages called directly, without Prefect.

`train` runs the loop of coevo/loop.py (resume point, timers, evaluation schedule, time budget,
metrics.jsonl, summary.json) with `PlainRunner`, which calls each `coevo.stages` function in this
process, one rollout and verification shard after another; progress goes to a rich console. No
MLflow, no catalog, no cache: a run repeats from its seed; `continue_latest` continues the newest
complete iteration as the flow does. The outputs under run.out_dir are listed in coevo/loop.py.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager, nullcontext

from rich.console import Console

from coevo import loop, stages
from coevo.config import Config
from coevo.loop import Position
from coevo.records import InForce
from coevo.report import bootstrap_sentence, first_eval_sentence
from coevo.runlock import run_lock


def train(cfg: Config, console: Console | None = None, continue_latest: bool = False) -> dict:
    """Run the whole training with the plain driver, holding the run directory's lock
    (coevo/runlock.py; RunLocked if another process holds it); returns (and writes) the run summary.
    `continue_latest`: run.iterations more after the newest complete iteration, as the flow does."""
    console = console or Console(soft_wrap=True)
    with run_lock(cfg.run.out_dir, "coevo.driver.train", log=console.print):
        return loop.run(PlainRunner(cfg, console), cfg, continue_latest, time.perf_counter())


class PlainRunner:
    """The loop's stages as direct calls of `coevo.stages` (coevo/loop.py `Runner`)."""

    catalog = False

    def __init__(self, cfg: Config, console: Console):
        self.cfg, self.console = cfg, console

    def prepare(self) -> dict:
        return stages.prepare_stage(self.cfg)

    def bootstrap(self, data: dict) -> dict:
        return stages.bootstrap_stage(self.cfg, data)

    def iterations(self, first: int, last: int, newest: int | None) -> AbstractContextManager:
        return nullcontext()

    def rollout(self, now: InForce, at: Position, shards: int) -> list[dict]:
        return [stages.rollout_stage(self.cfg, now, at.checkpoint.path, j, shards) for j in range(shards)]

    def verify(self, now: InForce, rolled: list[dict]) -> list[dict]:
        return [stages.verify_stage(self.cfg, now, r["path"], j, len(rolled)) for j, r in enumerate(rolled)]

    def merge(self, it: int, rolled: list[dict], scored: list[dict]) -> tuple[dict, dict]:
        merged = stages.merge_stage(self.cfg, it, [r["path"] for r in rolled], [r["path"] for r in scored])
        return merged["rollouts"], merged["rewards"]

    def coevolve(self, now: InForce, rollouts: dict, rewards: dict, data: dict) -> dict:
        return stages.coevolve_stage(self.cfg, now, rollouts["path"], rewards["path"], data["test"]["path"])

    def update(self, now: InForce, at: Position, rollouts: dict, rewards: dict, evolved: dict, data: dict) -> dict:
        return stages.update_stage(
            self.cfg, now, at.checkpoint.path, rollouts["path"], rewards["path"], evolved["path"], data
        )

    def evaluate(self, at: Position, now: InForce, data: dict) -> dict[str, float]:
        checkpoint, coevolver = at.checkpoint.path, at.coevolver.path
        return stages.evaluate_stage(self.cfg, now, checkpoint, coevolver, data["test"]["path"])["metrics"]

    def retain(self, it: int, at: Position) -> None:
        stages.retain_stage(self.cfg, it)

    def ingest(self, finished: list[dict]) -> None:
        raise NotImplementedError("the plain driver keeps no catalog")

    def started(self, it: int, metrics: dict[str, float], boot: dict, data: dict) -> None:
        if it == 0:
            self.console.print(bootstrap_sentence(boot, self.cfg.policy.checkpoint), highlight=False)
        where = stages.RunLayout(self.cfg.run.out_dir).checkpoint(it)
        self.console.print(first_eval_sentence(it, where, metrics), highlight=False)

    def finished(
        self, it: int, metrics: dict, at: Position, curve: list[dict] | None, final: bool, report: str
    ) -> None:
        self.console.print(loop.format_progress(metrics))

    def warn(self, message: str) -> None:
        self.console.print(message)

    def summary_extra(self, first: int, completed: int, boot: dict, setup: dict[str, float]) -> dict:
        return {"setup_time_s": setup, "bootstrap": boot}
