"""Helpers the benchmarks share: run directories with one cached bootstrap, alternating arms, phase
clocks, medians and spreads, and the JSON + PNG (+ optional MLflow) output of every bench.

Every bench writes under `bench/results/` (gitignored): `<name>.json`, `<name>.png`, and prints a
rich table. The tiny policy is bootstrapped once per bootstrap key into `bench/results/cache/` and
copied into each run directory, where `coevo.stages.prepare.bootstrap_stage` finds it intact and keeps it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from coevo.config import Config, deep_merge, load_config
from coevo.io import write_json

if TYPE_CHECKING:
    import pandas as pd

# torch intra-op threads for every arm of every bench. 1, not torch's default (one per core): on a
# shared 2-core machine two threads that wait on each other at every op ran generation 7-10x slower.
THREADS = int(os.environ.get("BENCH_THREADS", "1"))
ROOT = Path(__file__).resolve().parents[1]
TINY_PARAMS = ROOT / "examples" / "tiny.yaml"  # the tiny character-level policy's params (params.yaml trains SmolLM2)
RESULTS = ROOT / "bench" / "results"
CACHE = RESULTS / "cache"
console = Console(soft_wrap=True)
PHASES = ("generation", "reward", "logprob/loss", "optimizer", "co-evolver", "other")


# ---- configs and run directories ----
def bench_overrides(run_dir: Path, iterations: int, extra: dict | None = None) -> dict:
    """Overrides that send every output of a run to `run_dir` (shared problem data, own MLflow store)."""
    base = {
        "run": {"out_dir": str(run_dir), "iterations": iterations, "checkpoint_every": 10**6},
        "problems": {"data_dir": str(CACHE / "data")},
        "eval": {"every": 10**6},
        "tracking": {"mlflow_uri": f"sqlite:///{run_dir / 'mlflow.db'}"},
    }
    return deep_merge(base, extra or {})


def prepared_config(run_dir: Path, iterations: int, extra: dict | None = None) -> tuple[Config, dict]:
    """(config, overrides) for a fresh run in `run_dir` whose bootstrap is copied from the cache."""
    import torch

    torch.set_num_threads(THREADS)  # the same thread count for every arm (params.yaml keeps policy.threads null)
    overrides = bench_overrides(run_dir, iterations, extra)
    cfg = load_config(TINY_PARAMS, overrides)
    source = cached_bootstrap(cfg)
    if run_dir.exists():
        shutil.rmtree(run_dir)
    shutil.copytree(source, cfg.bootstrap_dir)
    return cfg, overrides


def cached_bootstrap(cfg: Config) -> Path:
    """The bootstrap checkpoint for cfg's (seed, policy, bootstrap, problems), built once per key."""
    from coevo.stages.prepare import bootstrap_key, bootstrap_stage, prepare_stage

    data = prepare_stage(cfg)
    key = bootstrap_key(cfg, data)[:16]
    out = CACHE / "bootstrap" / key
    if not (out / "run" / "bootstrap").is_dir():
        console.print(f"bootstrapping the tiny policy once into {out} ...")
        boot_cfg = cfg.model_copy(update={"run": cfg.run.model_copy(update={"out_dir": out / "run"})})
        bootstrap_stage(boot_cfg, data)
    return out / "run" / "bootstrap"


# ---- timing ----
@contextmanager
def wrapped(owner: object, attr: str, wrapper: Callable) -> Iterator[None]:
    """owner.attr replaced by wrapper(original) while the block runs, then restored."""
    original = getattr(owner, attr)
    setattr(owner, attr, wrapper(original))
    try:
        yield
    finally:
        setattr(owner, attr, original)


class PhaseClock:
    """Seconds per named phase, accumulated; phases may nest (report them apart and subtract)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.marks: dict[str, list[float]] = defaultdict(list)
        self.snapshots: dict[str, list[dict[str, float]]] = defaultdict(list)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start

    def mark(self, name: str) -> None:
        """A step boundary: the time and every phase's seconds so far."""
        self.marks[name].append(time.perf_counter())
        self.snapshots[name].append(dict(self.seconds))

    def per_step(self, name: str, skip: int = 1) -> dict[str, float]:
        """Mean wall seconds ("step") and phase seconds per step between the marks of step skip+1 and
        of the last step: the warm-up step(s) and the last step (which may hold a final evaluation)
        are left out. Needs at least skip + 2 marks."""
        marks, snaps = self.marks[name][skip:], self.snapshots[name][skip:]
        if len(marks) < 2:
            raise ValueError(f"{name}: {len(self.marks[name])} steps marked, need at least {skip + 2}")
        steps = len(marks) - 1
        phases = {phase: (snaps[-1].get(phase, 0.0) - snaps[0].get(phase, 0.0)) / steps for phase in snaps[-1]}
        return {"step": (marks[-1] - marks[0]) / steps, **phases}

    def timing(self, owner: object, attr: str, name: str, mark: bool = False):
        """Time every call of owner.attr as phase `name` (and mark its starts) while the block runs."""

        def timer(original):
            def timed(*args, **kwargs):
                if mark:
                    self.mark(name)
                with self.phase(name):
                    return original(*args, **kwargs)

            return timed

        return wrapped(owner, attr, timer)

    @contextmanager
    def stage_timing(self, attr: str, name: str, mark: bool = False) -> Iterator[None]:
        """Time every call of the stage function `attr` (coevo/stages/) as phase `name`, in both
        runners that call it by name: the plain driver and the Prefect tasks."""
        import coevo.driver
        import tasks.stages

        with self.timing(coevo.driver, attr, name, mark), self.timing(tasks.stages, attr, name, mark):
            yield

    @contextmanager
    def optimizer_steps(self, name: str = "optimizer") -> Iterator[None]:
        """Time every torch optimizer step in the process (global step hooks)."""
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        started: list[float] = []
        pre = register_optimizer_step_pre_hook(lambda *_: started.append(time.perf_counter()))
        post = register_optimizer_step_post_hook(lambda *_: self._add(name, time.perf_counter() - started.pop()))
        try:
            yield
        finally:
            pre.remove()
            post.remove()

    def _add(self, name: str, seconds: float) -> None:
        self.seconds[name] += seconds

    def reset(self) -> None:
        self.seconds.clear()
        self.marks.clear()
        self.snapshots.clear()


def coevo_step(arm: str, run_dir: Path, iterations: int, extra: dict | None = None) -> dict[str, float]:
    """Seconds per step of coevo's "driver" or "flow" over steps 2 .. n-1, split into PHASES (see
    bench/trl_step.py for what each phase holds); also the mean completion length sampled."""
    from coevo.driver import train
    from coevo.rollout.engines.hf import HFEngine
    from coevo.update import steps as update_steps
    from flows.train import train_flow

    cfg, overrides = prepared_config(run_dir, iterations, extra)
    clock = PhaseClock()
    with (
        clock.stage_timing("rollout_stage", "rollout", mark=True),
        clock.timing(HFEngine, "generate", "generation"),
        clock.stage_timing("verify_stage", "reward"),
        clock.stage_timing("coevolve_stage", "co-evolver"),
        clock.timing(update_steps, "policy_update", "policy_update"),
        clock.optimizer_steps(),
    ):
        train(cfg, Console(quiet=True)) if arm == "driver" else train_flow(str(TINY_PARAMS), overrides)
    step = clock.per_step("rollout")
    phases = {
        "generation": step.get("generation", 0.0),
        "reward": step.get("reward", 0.0),
        "logprob/loss": step.get("policy_update", 0.0) - step.get("optimizer", 0.0),
        "optimizer": step.get("optimizer", 0.0),
        "co-evolver": step.get("co-evolver", 0.0),
    }
    lengths = [
        json.loads(line)["rollout/completion_len"]
        for line in (cfg.run.out_dir / "metrics.jsonl").read_text().splitlines()
    ]
    return {
        "step": step["step"],
        **phases,
        "other": step["step"] - sum(phases.values()),
        "completion_len": statistics.fmean(lengths),
    }


def alternate(arms: list[str], repetitions: int, run: Callable[[str, int], dict]) -> dict[str, list[dict]]:
    """run(arm, repetition) for every arm in turn, `repetitions` times (arm order rotates each time)."""
    results: dict[str, list[dict]] = {arm: [] for arm in arms}
    for rep in range(repetitions):
        order = arms[rep % len(arms) :] + arms[: rep % len(arms)]
        for arm in order:
            console.print(f"[dim]{time.strftime('%H:%M:%S')} repetition {rep + 1}/{repetitions}: {arm}[/]")
            results[arm].append(run(arm, rep))
    return results


def spread(values: list[float]) -> dict[str, float]:
    """median, min, max and relative half-range ((max - min) / 2 / median) of repeated measurements."""
    values = [float(v) for v in values]
    median = statistics.median(values)
    return {
        "median": median,
        "min": min(values),
        "max": max(values),
        "rel_spread": (max(values) - min(values)) / 2 / median if median else 0.0,
        "n": len(values),
    }


def fmt(stat: dict[str, float], digits: int = 3) -> str:
    """'median ±rel%' for a table cell."""
    return f"{stat['median']:.{digits}f} ±{stat['rel_spread'] * 100:.0f}%"


# ---- output ----
def add_output_args(parser: argparse.ArgumentParser, name: str) -> None:
    parser.add_argument("--out", type=Path, default=RESULTS / name, help="Results folder (JSON, PNG).")
    parser.add_argument(
        "--mlflow", default=None, help="Also log the results to this MLflow tracking URI (experiment coevo-bench)."
    )


def environment() -> dict:
    import torch
    import transformers

    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": platform.machine(),
        "cpus": _cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "transformers": transformers.__version__,
    }


def _cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 0


def publish(
    name: str, out: Path, report: dict, table: Table, plot: Callable[[Path], None] | None, mlflow_uri: str | None
) -> None:
    """Print the table, write <out>/<name>.json and <out>/<name>.png, and log them to MLflow if asked."""
    out.mkdir(parents=True, exist_ok=True)
    report = {"bench": name, "environment": environment(), **report}
    write_json(out / f"{name}.json", report)
    console.print(table)
    png = out / f"{name}.png"
    if plot is not None:
        import matplotlib

        matplotlib.use("Agg")
        plot(png)
    console.print(f"wrote {out / f'{name}.json'}" + (f" and {png}" if plot is not None else ""))
    if mlflow_uri:
        import mlflow

        mlflow.set_tracking_uri(mlflow_uri)
        mlflow.set_experiment("coevo-bench")
        with mlflow.start_run(run_name=f"{name} {report['environment']['date']}"):
            mlflow.log_artifact(str(out / f"{name}.json"))
            if png.is_file():
                mlflow.log_artifact(str(png))


def table(title: str, columns: list[str], rows: list[list[str]]) -> Table:
    result = Table(title=title)
    for index, column in enumerate(columns):
        result.add_column(column, justify="left" if index == 0 else "right")
    for row in rows:
        result.add_row(*row)
    return result


def finished_iterations(run: Path) -> Iterator[tuple[int, pd.DataFrame, pd.DataFrame]]:
    """(iteration, rollouts, rewards) of each iteration a finished run directory has verified, in order."""
    from coevo.layout import RunLayout
    from schemas.rewards import read_rewards
    from schemas.rollouts import read_rollouts

    layout, it = RunLayout(run), 1
    while layout.rewards(it).is_file():
        yield it, read_rollouts(layout.rollouts(it)), read_rewards(layout.rewards(it))
        it += 1
