"""What tests can do with a program that runs in its own process (coevo/sandbox/supervisor.py,
worker.py): the ordinary shapes of unit tests keep their verdicts, a program's object can never
compare equal to what a test expects, and the way the program's process ends is the verdict."""

from __future__ import annotations

import pytest

from coevo.sandbox import Job, Limits, run_job

LIMITS = Limits(wall_s=10, cpu_s=3, per_test_s=2, memory_mb=256)
STACK = (
    "class Stack:\n    def __init__(self):\n        self.items = []\n    def push(self, x):\n        "
    "self.items.append(x)\n"
    "    def pop(self):\n        return self.items.pop()\n    def __len__(self):\n        return len(self.items)\n"
)
HONEST = {  # program, tests: every test must pass
    "in-place mutation": (
        "def sort_in_place(xs):\n    xs.sort()\n",
        ("xs = [3, 1, 2]\nsort_in_place(xs)\nassert xs == [1, 2, 3]",),
    ),
    "class with methods": (
        STACK,
        ("s = Stack()\ns.push(1)\ns.push(2)\nassert s.pop() == 2 and len(s) == 1 and s.items == [1]",),
    ),
    "exception type": (
        "def f(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x\n",
        ("try:\n    f(-1)\nexcept ValueError:\n    pass\nelse:\n    assert False",),
    ),
    "check(candidate)": (
        "def add(a, b):\n    return a + b\n",
        ("def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(-1, 1) == 0\n\ncheck(add)\n",),
    ),
    "program's module": (
        "import math\ndef f(x):\n    return math.sqrt(x)\n",
        ("assert math.fabs(f(4) - 2.0) < 1e-12",),
    ),
    "plain globals": (
        "TABLE = {'a': [1, 2.5, None], 'b': (3, b'x')}\n",
        ("assert TABLE == {'a': [1, 2.5, None], 'b': (3, b'x')}",),
    ),
    "kwargs and big ints": (
        "def f(x, *, scale=1):\n    return x * scale\n",
        ("assert f(2**100, scale=3) == 3 * 2**100",),
    ),
}


@pytest.mark.parametrize("case", sorted(HONEST))
def test_ordinary_tests_keep_their_verdict(case):
    program, tests = HONEST[case]
    verdict = run_job(Job(program, tests), LIMITS, "rlimits")
    assert verdict.passed, verdict.summary() + verdict.output


def test_an_object_of_the_program_never_equals_what_a_test_expects(mode):
    """A global (not a function's return) that claims equality with everything: the supervisor
    compares program objects by identity, so `e == 5` is False (it was True in one process)."""
    program = "class E:\n    def __eq__(self, other):\n        return True\ne = E()\nrows = [E()]\n"
    verdict = run_job(Job(program, ("assert e == 5", "assert rows[0] == 'x'", "assert e is not None")), LIMITS, mode)
    assert (verdict.status, verdict.outcomes) == ("failed", ("fail", "fail", "pass")), verdict.summary()


def test_a_test_handing_the_program_its_own_object_errors():
    verdict = run_job(
        Job("def apply(fn, x):\n    return fn(x)\n", ("assert apply(lambda v: v + 1, 1) == 2",)), LIMITS, "rlimits"
    )
    assert (verdict.status, verdict.outcomes) == ("failed", ("error",)), verdict.summary()


def test_a_program_that_sleeps_is_ended_by_the_wall_backstop(mode):
    limits = Limits(wall_s=10, cpu_s=3, per_test_s=0.4, memory_mb=256)  # backstop: 5 x 0.4 + 1 s of wall time
    verdict = run_job(Job("import time\ndef f():\n    time.sleep(60)\n", ("f()", "assert True")), limits, mode)
    assert (verdict.status, verdict.failed_test, verdict.outcomes) == ("timeout", 0, ("timeout", "not-run")), (
        verdict.summary()
    )
    assert "wall-clock backstop" in verdict.detail and verdict.seconds < limits.wall_s


@pytest.mark.parametrize(("sig", "status"), [("SIGXCPU", "timeout"), ("SIGKILL", "crashed")])
def test_the_cpu_limits_signal_is_a_timeout_whatever_cpu_time_is_accounted(mode, sig, status):
    """The kernel sends SIGXCPU only at RLIMIT_CPU, but a loaded machine has accounted less CPU time than
    the limit by then; here the program sends it with ~0 s used. SIGKILL, which also comes from
    elsewhere, is the CPU limit only with the CPU time to show for it."""
    program = f"import os, signal\ndef f():\n    os.kill(os.getpid(), signal.{sig})\n"
    verdict = run_job(Job(program, ("f()", "assert True")), LIMITS, mode)
    assert (verdict.status, verdict.failed_test) == (status, 0), verdict.summary()


def test_a_crash_during_a_test_is_crashed_with_the_signal(mode):
    verdict = run_job(
        Job("import ctypes\ndef f():\n    ctypes.string_at(0)\n", ("assert True", "f()", "assert True")), LIMITS, mode
    )
    assert (verdict.status, verdict.failed_test, verdict.outcomes) == ("crashed", 1, ("pass", "not-run", "not-run")), (
        verdict.summary()
    )
    assert "SIGSEGV" in verdict.detail
