"""Sandbox throughput: verdicts per second for the 164 HumanEval canonical solutions, and the cost of
isolation against running the same tests with none.

Arms (alternated within each round, so all see the same machine):
  - in-process: exec(program); exec(test) in this process, one after another; no isolation at all
    (what a naive trainer does; a hanging or hostile program would take the trainer with it);
  - bare process: one child process per sample (`python -I -S -B -c harness`), no limits, no
    confinement (mode "none"): the cost of a process alone;
  - rlimits: the sandbox's fallback mode;
  - namespaces: the sandbox's full mode (when this machine allows it).
Subprocess arms use `--workers` sandboxes at a time (default: one per core). Reports the median over
rounds of verdicts/s and the overhead of each arm against in-process and against the bare process.

    .venv/bin/python bench/sandbox.py [--rounds 3] [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from coevo.code.problems import humaneval_problems, program_of
from coevo.io import write_json
from coevo.sandbox import Job, Limits, namespaces_available, run_jobs

RESULTS = Path(__file__).resolve().parent / "results"


def in_process(jobs: list[Job]) -> int:
    """Run every job's tests in this process; returns how many passed."""
    passed = 0
    for job in jobs:
        namespace: dict = {"__name__": "__main__"}
        try:
            exec(compile(job.program, "program.py", "exec"), namespace)  # noqa: S102  (the unisolated baseline)
            for test in job.tests:
                exec(compile(test, "test.py", "exec"), namespace)  # noqa: S102
            passed += 1
        except BaseException:  # noqa: BLE001, S110  (a failing sample only counts as not passed)
            pass
    return passed


def sandboxed(mode: str, workers: int):
    def run(jobs: list[Job]) -> int:
        return sum(v.passed for v in run_jobs(jobs, Limits(wall_s=20, cpu_s=10, per_test_s=10), mode, workers))

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    problems = humaneval_problems()
    jobs = [Job(program_of(p, s), tuple(t)) for p, s, t in zip(problems["prompt"], problems["solution"], problems["tests"])]
    arms = {"in-process": in_process, "bare process": sandboxed("none", args.workers), "rlimits": sandboxed("rlimits", args.workers)}
    if namespaces_available():
        arms["namespaces"] = sandboxed("namespaces", args.workers)
    rates: dict[str, list[float]] = {name: [] for name in arms}
    passed: dict[str, int] = {}
    for round_ in range(args.rounds):
        order = list(arms) if round_ % 2 == 0 else list(reversed(arms))
        for name in order:
            start = time.perf_counter()
            passed[name] = arms[name](jobs)
            rates[name].append(len(jobs) / (time.perf_counter() - start))
    median = {name: statistics.median(values) for name, values in rates.items()}
    rows = {
        name: {
            "verdicts_per_s": median[name],
            "ms_per_verdict_per_worker": 1000 * (1 if name == "in-process" else args.workers) / median[name],
            "slowdown_vs_in_process": median["in-process"] / median[name],
            "slowdown_vs_bare_process": median["bare process"] / median[name],
            "passed": passed[name],
            "rounds": rates[name],
        }
        for name in arms
    }
    result = {"n": len(jobs), "workers": args.workers, "cores": os.cpu_count(), "machine": platform.platform(), "arms": rows}
    write_json(RESULTS / "sandbox.json", result)
    print(f"{len(jobs)} HumanEval canonical solutions, {args.workers} workers, median of {args.rounds} rounds")
    print(f"{'arm':<14}{'verdicts/s':>12}{'x in-proc':>11}{'x bare':>9}{'passed':>8}")
    for name, row in rows.items():
        print(f"{name:<14}{row['verdicts_per_s']:>12.1f}{row['slowdown_vs_in_process']:>11.1f}{row['slowdown_vs_bare_process']:>9.2f}{row['passed']:>8}")
    print(f"written: {RESULTS / 'sandbox.json'}")


if __name__ == "__main__":
    main()
