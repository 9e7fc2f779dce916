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


@pytest.mark.parametrize("trick", sorted(guards.TRICKS))
def test_trick_gets_its_verdict(mode, trick):
    program, expected = guards.TRICKS[trick]
    verdict = run_job(Job(program, guards.TESTS), LIMITS, mode)
    assert verdict.status == expected, verdict.summary()
    if expected == "spoofed":
        assert not any(verdict.pass_vector())


ROUTES = {"closure": guards.ROUTE_CLOSURE, "_getframe": guards.ROUTE_GETFRAME, "gc": guards.ROUTE_GC}


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_reading_the_nonce_forges_no_pass(mode, route):
    """Each route to the report nonce (a function's __closure__, sys._getframe, gc.get_objects) that
    forged a pass while the program shared the harness's interpreter now finds nothing: the program's
    process never holds the nonce or the report pipe, and its wrong `add` fails the tests the
    supervisor evaluates. (With a one-process harness each route prints "found" and passes.)"""
    verdict = run_job(Job(ROUTES[route] + guards.FORGE, guards.TESTS), LIMITS, mode)
    assert f"route {route} nothing" in verdict.output, verdict.output  # the route ran and came back empty
    assert (verdict.status, verdict.outcomes) == ("failed", ("fail", "fail", "pass")), verdict.summary()


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
    assert (
        classify(
            report + f"{nonce} test 0 pass \n{nonce} test 1 pass \n{nonce} done\n".encode(), nonce, 2, b"", 0, "exit"
        ).status
        == "passed"
    )
