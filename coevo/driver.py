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

from coevo import loop
from coevo.config import Config
from coevo.layout import RunLayout
from coevo.loop import Position
from coevo.records import Bootstrapped, Evolved, InForce, Splits, Table, Trained
from coevo.report import bootstrap_sentence, first_eval_sentence
from coevo.runlock import run_lock
from coevo.stages.coevolve import coevolve_stage
from coevo.stages.evaluate import evaluate_stage
from coevo.stages.merge import merge_stage
from coevo.stages.prepare import bootstrap_stage, prepare_stage
from coevo.stages.retain import retain_stage
from coevo.stages.rollout import rollout_stage
from coevo.stages.update import update_stage
from coevo.stages.verify import verify_stage


def train(cfg: Config, console: Console | None = None, continue_latest: bool = False) -> dict:
    """Run the whole training with the plain driver, holding the run directory's lock
    (coevo/runlock.py; RunLocked if another process holds it); returns (and writes) the run summary.
    `continue_latest`: run.iterations more after the newest complete iteration, as the flow does."""
    console = console or Console(soft_wrap=True)
    with run_lock(cfg.run.out_dir, "coevo.driver.train", log=console.print):
        return loop.run(PlainRunner(cfg, console), cfg, continue_latest, time.perf_counter())


class PlainRunner:
    """The loop's stages as direct calls of the stage functions (coevo/stages/; coevo/loop.py `Runner`)."""

    catalog = False

    def __init__(self, cfg: Config, console: Console):
        self.cfg, self.console = cfg, console

    def prepare(self) -> Splits:
        return prepare_stage(self.cfg)

    def bootstrap(self, data: Splits) -> Bootstrapped:
        return bootstrap_stage(self.cfg, data)

    def iterations(self, first: int, last: int, newest: int | None) -> AbstractContextManager:
        return nullcontext()

    def rollout(self, now: InForce, at: Position, shards: int) -> list[Table]:
        return [rollout_stage(self.cfg, now, at.checkpoint.path, j, shards) for j in range(shards)]

    def verify(self, now: InForce, rolled: list[Table]) -> list[Table]:
        return [verify_stage(self.cfg, now, r.path, j, len(rolled)) for j, r in enumerate(rolled)]

    def merge(self, it: int, rolled: list[Table], scored: list[Table]) -> tuple[Table, Table]:
        return merge_stage(self.cfg, it, [r.path for r in rolled], [r.path for r in scored])

    def coevolve(self, now: InForce, rollouts: Table, rewards: Table, data: Splits) -> Evolved:
        return coevolve_stage(self.cfg, now, rollouts.path, rewards.path, data.test.path)

    def update(
        self, now: InForce, at: Position, rollouts: Table, rewards: Table, evolved: Evolved, data: Splits
    ) -> Trained:
        return update_stage(self.cfg, now, at.checkpoint.path, rollouts.path, rewards.path, evolved.path, data)

    def evaluate(self, at: Position, now: InForce, data: Splits) -> dict[str, float]:
        return evaluate_stage(self.cfg, now, at.checkpoint.path, at.coevolver.path, data.test.path)

    def retain(self, it: int, at: Position) -> None:
        retain_stage(self.cfg, it)

    def ingest(self, finished: list[dict]) -> None:
        raise NotImplementedError("the plain driver keeps no catalog")

    def started(self, it: int, metrics: dict[str, float], boot: Bootstrapped, data: Splits) -> None:
        if it == 0:
            self.console.print(bootstrap_sentence(boot, self.cfg.policy.checkpoint), highlight=False)
        where = RunLayout(self.cfg.run.out_dir).checkpoint(it)
        self.console.print(first_eval_sentence(it, where, metrics), highlight=False)

    def finished(
        self, it: int, metrics: dict, at: Position, curve: list[dict] | None, final: bool, report: str
    ) -> None:
        self.console.print(loop.format_progress(metrics))

    def warn(self, message: str) -> None:
        self.console.print(message)

    def summary_extra(self, first: int, completed: int, boot: Bootstrapped, setup: dict[str, float]) -> dict:
        return {"setup_time_s": setup, "bootstrap": boot.report}
