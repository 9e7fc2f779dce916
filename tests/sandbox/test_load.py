"""Verdicts that do not depend on machine load: a program past its CPU limit is a `timeout` however
busy the machine is (two real busy-loop processes spin beside it), because the verdict is read from
the program's own exit signal and accounted CPU time, not from wall time or the helper's exit status."""

from __future__ import annotations

import subprocess
import sys

import pytest

from coevo.sandbox import Job, Limits, run_job

from .conftest import require_mode

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


def test_a_loop_past_its_cpu_limit_is_a_timeout_beside_two_busy_loops(two_busy_loops):
    """Namespaces mode: the one where a helper (`unshare`) stands between the runner and the program
    and, under load, used to exit 1 ("sigprocmask unblock failed") instead of passing the kill on."""
    require_mode("namespaces")
    runs = 10
    verdicts = [run_job(C_LOOP, LIMITS, "namespaces") for _ in range(runs)]
    wrong = [
        v.summary() for v in verdicts if (v.status, v.failed_test, v.outcomes) != ("timeout", 0, ("timeout", "not-run"))
    ]
    assert not wrong, f"{len(wrong)}/{runs} runs not a timeout under load: {wrong}"
