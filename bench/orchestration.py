"""Orchestration overhead: the same config through the Prefect flow and through the plain driver.

Both call the same stage functions (coevo.stages); the flow adds Prefect task runs, result
persistence, cache-key hashing, the DuckDB ingest, MLflow tracking and the table artifacts. Runs
alternate (driver, flow, flow, driver, ...) so both see the same machine; each run starts from the
same cached bootstrap in its own directory (MLflow keeps one database engine per tracking URI in a
process, so a store must not be deleted and recreated under the same path). The flow runs share one
temporary Prefect server, started before the first round; its start-up CPU is reported apart (once
per process, like a flow run's own start-up). Reports, per arm, the median over rounds of
  - the mean seconds per stage per iteration (the stage timers both loops write to metrics.jsonl),
  - the wall seconds per iteration: the time between the starts of consecutive rollout stages, so it
    also holds what runs between stages (Prefect task-run machinery, MLflow tracking, artifacts,
    the catalog ingest); the first iteration (warm-up) is left out. Also the median of the rounds'
    flow/driver ratios, and the ratio of each arm's fastest run: on a shared machine other jobs only
    ever add time,
  - the CPU seconds per iteration over the same window: the main thread (it runs every stage in
    turn: the critical path), this process plus the Prefect server subprocess, and the part of that
    outside the stage functions and the catalog ingest (the orchestration's own cost; the main
    thread's CPU inside a stage is all of the stage's compute while torch runs one intra-op thread,
    the bench default),
and the overhead of the flow over the driver on each.

    .venv/bin/python bench/orchestration.py [--iterations 30] [--rounds 3]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console

import coevo.driver
import tasks.stages
from bench.common import (
    RESULTS,
    TINY_PARAMS,
    PhaseClock,
    add_output_args,
    alternate,
    prepared_config,
    publish,
    spread,
    table,
    wrapped,
)
from coevo.cli_support import quiet_libraries
from coevo.store.catalog import Catalog

STAGES = ("rollout", "verify", "coevolve", "update", "ingest")
# the stages' compute, the catalog ingest's included: what is left is the orchestration's own cost
STAGE_FUNCTIONS = [  # in both runners that call them by name: the plain driver and the Prefect tasks
    (runner, name)
    for runner in (coevo.driver, tasks.stages)
    for name in ("rollout_stage", "verify_stage", "coevolve_stage", "update_stage", "evaluate_stage")
]
STAGE_FUNCTIONS.append((Catalog, "ingest"))


def prefect_server_cpu() -> float:
    """CPU seconds so far of this process' Prefect server subprocesses (the temporary server a flow
    run starts without PREFECT_API_URL); 0 when there is none. Linux /proc."""
    total = 0.0
    for children in Path("/proc/self/task").glob("*/children"):
        for pid in children.read_text().split():
            try:
                if b"prefect.server.api.server" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                    total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
            except OSError:
                continue  # exited meanwhile
    return total


def start_prefect_server() -> float:
    """Start the temporary Prefect server that every flow run of this process shares (an empty flow
    run starts it) and wait until its start-up work is done; return the CPU seconds that took. Else
    the first flow run's early iterations would share the cores with the server's start-up."""
    from prefect import flow

    import flows  # noqa: F401  (its settings for the server go into the environment the server inherits)

    flow(name="bench-warm-up")(lambda: None)()
    before = prefect_server_cpu()
    while True:
        time.sleep(1.0)
        now = prefect_server_cpu()
        if now - before < 0.05:  # idle: its background loops use ~0.02 s per s
            return now
        before = now


def process_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class CpuMeter:
    """CPU seconds at each rollout start: this process, the Prefect server (counted for the flow
    only: the driver does not use it), the main thread (which runs every stage, one after the other:
    the critical path), and the main thread inside the stage functions so far."""

    def __init__(self, with_server: bool) -> None:
        self.with_server = with_server
        self.in_stages = 0.0
        self.marks: list[tuple[float, float, float, float]] = []

    @contextmanager
    def metering(self) -> Iterator[None]:
        with ExitStack() as stack:
            for owner, name in STAGE_FUNCTIONS:
                stack.enter_context(
                    wrapped(owner, name, functools.partial(self._metered, mark=name == "rollout_stage"))
                )
            yield

    def _metered(self, function, mark: bool):
        def metered(*args, **kwargs):
            if mark:
                self.marks.append(
                    (
                        process_cpu(),
                        prefect_server_cpu() if self.with_server else 0.0,
                        time.thread_time(),
                        self.in_stages,
                    )
                )
            start = time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                self.in_stages += time.thread_time() - start

        return metered

    def per_iteration(self, skip: int = 1) -> dict[str, float]:
        """Mean CPU seconds per iteration between the rollout starts of iteration skip+1 and of the
        last iteration (the window of PhaseClock.per_step): total (process + server), server, main
        thread, and outside the stage functions."""
        (process0, server0, main0, stages0), (process1, server1, main1, stages1) = self.marks[skip], self.marks[-1]
        steps = len(self.marks) - 1 - skip
        total = (process1 - process0 + server1 - server0) / steps
        return {
            "total": total,
            "server": (server1 - server0) / steps,
            "main": (main1 - main0) / steps,
            "outside_stages": total - (stages1 - stages0) / steps,
        }


def stage_means(run_dir: Path) -> dict[str, float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    keys = sorted({k for row in rows for k in row if k.startswith("time/")})
    return {k[5:]: statistics.fmean(row.get(k, 0.0) for row in rows) for k in keys}


def run_arm(arm: str, run_dir: Path, iterations: int, extra: dict | None = None) -> dict:
    """One run of the driver or the flow; stage means and wall seconds per iteration (rollout-start intervals)."""
    from coevo.driver import train
    from flows.train import train_flow

    cfg, overrides = prepared_config(run_dir, iterations, extra)
    clock, cpu = PhaseClock(), CpuMeter(with_server=arm == "flow")
    start = time.perf_counter()
    with (
        cpu.metering(),
        clock.stage_timing("rollout_stage", "rollout", mark=True),
        clock.stage_timing("evaluate_stage", "eval"),
    ):
        train(cfg, Console(quiet=True)) if arm == "driver" else train_flow(str(TINY_PARAMS), overrides)
    return {
        "wall_s": time.perf_counter() - start,
        "iteration_wall_s": clock.per_step("rollout")["step"],  # iterations 2 .. n-1: no warm-up, no final eval
        "iteration_cpu_s": cpu.per_iteration(),  # the same window
        "stage_s": stage_means(cfg.run.out_dir),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--problems-per-iter",
        type=int,
        default=None,
        help="rollout.problems_per_iter (default: params.yaml's, the default scale)",
    )
    add_output_args(parser, "orchestration")
    args = parser.parse_args()
    quiet_libraries()
    server_startup_cpu = start_prefect_server()
    scale = {"rollout": {"problems_per_iter": args.problems_per_iter}} if args.problems_per_iter else None
    runs = alternate(
        ["driver", "flow"],
        args.rounds,
        lambda arm, rep: run_arm(arm, RESULTS / "tmp" / f"orchestration-{arm}-{rep}", args.iterations, scale),
    )
    stage_names = sorted({s for arm in runs.values() for run in arm for s in run["stage_s"]})
    summary = {
        arm: {
            "stage_s": {s: spread([run["stage_s"].get(s, 0.0) for run in arm_runs]) for s in stage_names},
            "stages_total_s": spread([sum(run["stage_s"].get(s, 0.0) for s in STAGES) for run in arm_runs]),
            "iteration_wall_s": spread([run["iteration_wall_s"] for run in arm_runs]),
            **{
                f"iteration_cpu_{k}_s": spread([run["iteration_cpu_s"][k] for run in arm_runs])
                for k in ("total", "server", "main", "outside_stages")
            },
        }
        for arm, arm_runs in runs.items()
    }
    d, f = summary["driver"], summary["flow"]
    overhead = {
        "stages": f["stages_total_s"]["median"] / d["stages_total_s"]["median"] - 1,
        "iteration_wall": f["iteration_wall_s"]["median"] / d["iteration_wall_s"]["median"] - 1,
        "per_round_iteration_wall": [
            fr["iteration_wall_s"] / dr["iteration_wall_s"] - 1 for dr, fr in zip(runs["driver"], runs["flow"])
        ],
        # the least disturbed run of each arm: this machine's noise only ever adds time
        "fastest_iteration_wall": f["iteration_wall_s"]["min"] / d["iteration_wall_s"]["min"] - 1,
        "main_thread_cpu": f["iteration_cpu_main_s"]["median"] / d["iteration_cpu_main_s"]["median"] - 1,
        "iteration_cpu": f["iteration_cpu_total_s"]["median"] / d["iteration_cpu_total_s"]["median"] - 1,
        # the flow's own CPU beyond the driver's, relative to the driver's whole iteration
        "orchestration_cpu": (
            f["iteration_cpu_outside_stages_s"]["median"] - d["iteration_cpu_outside_stages_s"]["median"]
        )
        / d["iteration_cpu_total_s"]["median"],
    }
    rows = []
    for stage in (*STAGES, "eval"):
        ds, fs = d["stage_s"].get(stage, {"median": 0.0}), f["stage_s"].get(stage, {"median": 0.0})
        change = f"{(fs['median'] / ds['median'] - 1) * 100:+.0f}%" if ds["median"] else "flow only"
        rows.append([stage, f"{ds['median']:.3f}", f"{fs['median']:.3f}", change])
    rows.append(
        [
            "all stages",
            f"{d['stages_total_s']['median']:.3f}",
            f"{f['stages_total_s']['median']:.3f}",
            f"{overhead['stages'] * 100:+.1f}%",
        ]
    )
    rows.append(
        [
            "wall per iteration",
            f"{d['iteration_wall_s']['median']:.3f}",
            f"{f['iteration_wall_s']['median']:.3f}",
            f"{overhead['iteration_wall'] * 100:+.1f}%",
        ]
    )
    rows.append(
        [
            "  median of the rounds' flow/driver ratios",
            "",
            "",
            f"{statistics.median(overhead['per_round_iteration_wall']) * 100:+.1f}%",
        ]
    )
    rows.append(
        [
            "  fastest run of each arm",
            f"{d['iteration_wall_s']['min']:.3f}",
            f"{f['iteration_wall_s']['min']:.3f}",
            f"{overhead['fastest_iteration_wall'] * 100:+.1f}%",
        ]
    )
    rows.append(
        [
            "main thread CPU per iteration (the critical path)",
            f"{d['iteration_cpu_main_s']['median']:.3f}",
            f"{f['iteration_cpu_main_s']['median']:.3f}",
            f"{overhead['main_thread_cpu'] * 100:+.1f}%",
        ]
    )
    rows.append(
        [
            "CPU per iteration (+ Prefect server)",
            f"{d['iteration_cpu_total_s']['median']:.3f}",
            f"{f['iteration_cpu_total_s']['median']:.3f}",
            f"{overhead['iteration_cpu'] * 100:+.1f}%",
        ]
    )
    rows.append(["  of it Prefect server", "-", f"{f['iteration_cpu_server_s']['median']:.3f}", ""])
    rows.append(
        [
            "  of it outside the stages and ingest",
            f"{d['iteration_cpu_outside_stages_s']['median']:.3f}",
            f"{f['iteration_cpu_outside_stages_s']['median']:.3f}",
            f"{overhead['orchestration_cpu'] * 100:+.1f}%",
        ]
    )
    per_round = ", ".join(f"{o * 100:+.1f}%" for o in overhead["per_round_iteration_wall"])
    shape = f"{args.problems_per_iter} problems per iteration" if args.problems_per_iter else "default scale"
    title = (
        f"flow vs plain driver, {shape}, {args.iterations} iterations x {args.rounds} rounds (median s per "
        f"iteration; per round: {per_round}; Prefect server start-up {server_startup_cpu:.1f} s CPU, once)"
    )
    report = {
        "iterations": args.iterations,
        "rounds": args.rounds,
        "scale": scale,
        "runs": runs,
        "summary": summary,
        "overhead": overhead,
        "prefect_server_startup_cpu_s": server_startup_cpu,
    }
    publish(
        "orchestration",
        args.out,
        report,
        table(title, ["stage", "driver", "flow", "overhead"], rows),
        lambda png: plot(png, runs),
        args.mlflow,
    )


def plot(png: Path, runs: dict[str, list[dict]]) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for index, (arm, arm_runs) in enumerate(runs.items()):
        bottom = [0.0] * len(arm_runs)
        for stage in STAGES:
            heights = [run["stage_s"].get(stage, 0.0) for run in arm_runs]
            xs = [r * 3 + index for r in range(len(arm_runs))]
            ax.bar(xs, heights, bottom=bottom, color=f"C{STAGES.index(stage)}", label=stage if index == 0 else None)
            bottom = [b + h for b, h in zip(bottom, heights)]
        ax.scatter(
            [r * 3 + index for r in range(len(arm_runs))],
            [run["iteration_wall_s"] for run in arm_runs],
            color="k",
            marker="_",
            s=200,
            label="wall" if index == 0 else None,
        )
    ax.set_xticks(
        [r * 3 + i for r in range(len(runs["driver"])) for i in range(2)],
        [f"{arm[0]}{r + 1}" for r in range(len(runs["driver"])) for arm in runs],
    )
    ax.set_ylabel("s per iteration")
    ax.set_title("driver (d) vs flow (f) per round")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=120)


if __name__ == "__main__":
    main()
