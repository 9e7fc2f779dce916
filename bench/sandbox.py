"""Sandbox throughput: verdicts per second for the 164 HumanEval canonical solutions, and the cost of
isolation against running the same tests with none.

Arms (alternated within each round, so all see the same machine):
  - in-process: exec(program); exec(test) in this process, one after another; no isolation at all
    (what a naive trainer does; a hanging or hostile program would take the trainer with it);
  - bare process: one child process per sample (`python -I -S -B -c harness`), no limits, no
    confinement (mode "none"): the cost of a process alone;
  - rlimits: the sandbox's fallback mode;
  - namespaces: the sandbox's full mode (when this machine allows it), seccomp filter included;
  - namespaces no-seccomp: the same mode with the seccomp filter removed (coevo/sandbox/seccomp.py),
    so namespaces minus this arm is the filter's cost per sample.
Subprocess arms use `--workers` sandboxes at a time (default: one per core). Reports the median over
rounds of verdicts/s and the overhead of each arm against in-process and against the bare process.

    .venv/bin/python bench/sandbox.py [--rounds 3] [--workers 2] [--arms namespaces,"namespaces no-seccomp"] [--out F]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from coevo.code.problems import humaneval_problems, program_of
from coevo.io import write_json
from coevo.sandbox import Job, Limits, isolation_for, namespaces_available, run_jobs
from coevo.sandbox.runner import run_job_with

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


LIMITS = Limits(wall_s=20, cpu_s=10, per_test_s=10)


def sandboxed(mode: str, workers: int):
    def run(jobs: list[Job]) -> int:
        return sum(v.passed for v in run_jobs(jobs, LIMITS, mode, workers))

    return run


def namespaces_without_seccomp(workers: int):
    """The namespaces mode with its seccomp filter removed: the baseline for the filter's cost."""
    iso = dataclasses.replace(isolation_for("namespaces"), seccomp=b"")

    def run(jobs: list[Job]) -> int:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return sum(v.passed for v in pool.map(lambda job: run_job_with(iso, job, LIMITS), jobs))

    return run


SYSCALLS = 200_000
SYSCALL_PROGRAM = f"""import os, time
start = time.perf_counter_ns()
for _ in range({SYSCALLS}):
    os.getppid()
ns = (time.perf_counter_ns() - start) / {SYSCALLS}
"""


def syscall_ns(repeats: int = 5) -> dict[str, float]:
    """Median ns per cheap syscall (getppid, Python loop included) in the namespaces mode with and without
    the filter, alternated: the filter runs its BPF on every syscall, so this is its per-call price."""
    on = isolation_for("namespaces")
    times: dict[str, list[float]] = {"seccomp": [], "no seccomp": []}
    for _ in range(repeats):
        for name, iso in (("seccomp", on), ("no seccomp", dataclasses.replace(on, seccomp=b""))):
            verdict = run_job_with(iso, Job(SYSCALL_PROGRAM, ("print('NS', ns)",)), LIMITS)
            times[name].append(float(verdict.output.split("NS ")[1].split()[0]))
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--arms",
        default="",
        help="comma-separated subset of the arms (in-process and bare process are always run: the ratios need them)",
    )
    parser.add_argument("--out", default=str(RESULTS / "sandbox.json"))
    args = parser.parse_args()
    problems = humaneval_problems()
    jobs = [
        Job(program_of(p, s), tuple(t)) for p, s, t in zip(problems["prompt"], problems["solution"], problems["tests"])
    ]
    arms = {
        "in-process": in_process,
        "bare process": sandboxed("none", args.workers),
        "rlimits": sandboxed("rlimits", args.workers),
    }
    if namespaces_available():
        arms["namespaces"] = sandboxed("namespaces", args.workers)
        arms["namespaces no-seccomp"] = namespaces_without_seccomp(args.workers)
    if args.arms:
        keep = {"in-process", "bare process", *(a.strip() for a in args.arms.split(","))}
        if unknown := keep - set(arms):
            raise SystemExit(f"--arms: unknown or unavailable arm(s) {sorted(unknown)}; known here: {', '.join(arms)}")
        arms = {name: run for name, run in arms.items() if name in keep}
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
    result = {
        "n": len(jobs),
        "workers": args.workers,
        "cores": os.cpu_count(),
        "machine": platform.platform(),
        "arms": rows,
    }
    if "namespaces" in rows and "namespaces no-seccomp" in rows:  # paired by round: both saw the same machine
        cost = [
            1000 * args.workers * (1 / on - 1 / off)
            for on, off in zip(rates["namespaces"], rates["namespaces no-seccomp"])
        ]
        result["seccomp_ms_per_sample_per_worker"] = {"median": statistics.median(cost), "rounds": cost}
        result["getppid_ns"] = syscall_ns()
    write_json(Path(args.out), result)
    print(f"{len(jobs)} HumanEval canonical solutions, {args.workers} workers, median of {args.rounds} rounds")
    print(f"{'arm':<24}{'verdicts/s':>12}{'ms/verdict/worker':>19}{'x in-proc':>11}{'x bare':>9}{'passed':>8}")
    for name, row in rows.items():
        print(
            f"{name:<24}{row['verdicts_per_s']:>12.1f}{row['ms_per_verdict_per_worker']:>19.1f}{row['slowdown_vs_in_process']:>11.1f}{row['slowdown_vs_bare_process']:>9.2f}{row['passed']:>8}"
        )
    if "seccomp_ms_per_sample_per_worker" in result:
        cost = result["seccomp_ms_per_sample_per_worker"]
        print(
            f"seccomp filter: {cost['median']:+.1f} ms per sample per worker (median of paired rounds: "
            f"{', '.join(f'{c:+.1f}' for c in cost['rounds'])})"
        )
        ns = result["getppid_ns"]
        print(
            f"one getppid() from Python: {ns['seccomp']:.0f} ns with the filter, {ns['no seccomp']:.0f} ns "
            f"without (median of 5 alternated runs)"
        )
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
