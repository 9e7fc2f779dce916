"""Verdicts that do not depend on machine load, in both modes: a program past its CPU limit is a
`timeout` however busy the machine is (two real busy-loop processes spin beside it), because the
verdict is read from the program's own exit signal and accounted CPU time, not from wall time or the
helper's exit status; and an honest program well within its limits stays `passed` beside them (a
verdict that leaned on wall time would turn it into a timeout when the machine is slow)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from coevo.sandbox import Job, Limits, run_job

from .conftest import MODES, require_mode

C_LOOP = Job(
    "def f():\n    return any(iter(int, 1))\n", ("f()", "assert True")
)  # a loop in C: no per-test timer stops it
LIMITS = Limits(
    wall_s=20, cpu_s=1, per_test_s=30, memory_mb=256
)  # the CPU limit, not a timer or the wall clock, ends it


@pytest.fixture
def two_busy_loops():
    """Two real processes spinning on the CPUs for the test's duration."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        yield
    finally:
        for proc in spinners:
            proc.kill()
            proc.wait()


HONEST = Job(
    "def f(n):\n    return sum(i * i for i in range(n))\n",
    ("assert f(10) == 285", "assert f(200000) == 2666646666700000", "assert f(0) == 0"),
)  # ~0.05 s of CPU: far inside every limit, however long the machine makes it wait


@pytest.mark.parametrize("mode", MODES)
def test_a_loop_past_its_cpu_limit_is_a_timeout_beside_two_busy_loops(two_busy_loops, mode):
    """Both modes; namespaces is the one where a helper (`unshare`) stands between the runner and the
    program and, under load, used to exit 1 ("sigprocmask unblock failed") instead of passing the kill on."""
    require_mode(mode)
    runs = 10
    verdicts = [run_job(C_LOOP, LIMITS, mode) for _ in range(runs)]
    wrong = [
        v.summary() for v in verdicts if (v.status, v.failed_test, v.outcomes) != ("timeout", 0, ("timeout", "not-run"))
    ]
    assert not wrong, f"{len(wrong)}/{runs} runs not a timeout under load: {wrong}"


@pytest.mark.parametrize("mode", MODES)
def test_an_honest_program_stays_passed_beside_two_busy_loops(two_busy_loops, mode):
    require_mode(mode)
    runs = 10
    verdicts = [run_job(HONEST, LIMITS, mode) for _ in range(runs)]
    wrong = [v.summary() for v in verdicts if (v.status, v.outcomes) != ("passed", ("pass",) * 3)]
    assert not wrong, f"{len(wrong)}/{runs} honest runs not passed under load: {wrong}"
