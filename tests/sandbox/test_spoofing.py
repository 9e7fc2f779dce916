"""Reward hacking against the code sandbox: every trick of bench/spoof_guards.py gets its verdict,
under "rlimits" and "namespaces" (the `mode` fixture, conftest.py: a namespaces case FAILS, naming
the probe's reason, where that mode cannot run); a spoofed sample passes no test at all."""

from __future__ import annotations

import importlib.util

import pytest

from coevo.sandbox import Job, Limits, run_job
from coevo.sandbox.runner import classify

from ..conftest import ROOT

_spec = importlib.util.spec_from_file_location("spoof_guards", ROOT / "bench" / "spoof_guards.py")
guards = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(guards)

LIMITS = Limits(wall_s=6, cpu_s=3, per_test_s=2, memory_mb=256)
CLOSED = {name: case for name, case in guards.TRICKS.items() if "residual gap" not in name}


@pytest.mark.parametrize("trick", sorted(CLOSED))
def test_trick_gets_its_verdict(mode, trick):
    program, expected = CLOSED[trick]
    verdict = run_job(Job(program, guards.TESTS), LIMITS, mode)
    assert verdict.status == expected, verdict.summary()
    if expected == "spoofed":
        assert not any(verdict.pass_vector())


def test_residual_gap_is_as_documented():
    """A program that reads the harness's closure forges the report channel: documented, not closed.
    When this starts failing the gap was closed: move the trick out of the residual list."""
    program, expected = guards.TRICKS["nonce via closure (residual gap)"]
    assert run_job(Job(program, guards.TESTS), LIMITS, "rlimits").status == expected


def test_spoofed_report_line_outranks_passes():
    nonce = "n" * 32
    report = f"{nonce} ready\n{nonce} test 0 pass \n{nonce} test 1 spoofed returned E\n".encode()
    verdict = classify(report, nonce, 3, b"", 0, "exit")
    assert verdict.status == "spoofed" and verdict.pass_vector() == [False, False, False]


def test_clean_exit_without_done_is_spoofed_but_a_kill_is_not():
    nonce = "n" * 32
    report = f"{nonce} ready\n".encode()
    assert classify(report, nonce, 2, b"", 0, "exit").status == "spoofed"
    assert classify(report, nonce, 2, b"", -11, "exit").status == "crashed"
    assert classify(report + f"{nonce} test 0 pass \n{nonce} test 1 pass \n{nonce} done\n".encode(), nonce, 2, b"", 0, "exit").status == "passed"
