"""The sandbox modes these tests run under, and a loud failure when the real isolation is missing.

Every hostile-program and spoofing case runs under "rlimits" and under "namespaces". The namespaces
mode is the sandbox's isolation (network, files, parent, stray processes); CI's machine runs it, so
it is required: where its probe does not pass, each namespaces case FAILS with the probe's reason
("namespaces sandbox cannot run on this machine: ...") instead of silently not being generated.
A developer machine without user namespaces (e.g. an AppArmor-restricted desktop) can set
COEVO_SANDBOX_NAMESPACES=optional to turn those failures into skips; CI never sets it.
"""

from __future__ import annotations

import functools
import os

import pytest

from coevo.sandbox import Job, Limits, namespaces_available
from coevo.sandbox.isolation import _namespaces
from coevo.sandbox.runner import run_job_with

MODES = ("rlimits", "namespaces")
OPT_OUT = "COEVO_SANDBOX_NAMESPACES"


@functools.cache
def namespaces_problem() -> str | None:
    """Why the namespaces mode cannot run on this machine; None when its probe passes."""
    if namespaces_available():
        return None
    iso = _namespaces()
    if iso is None:
        return "no `unshare` (util-linux) on PATH"
    verdict = run_job_with(iso, Job("x = 1", ("assert x == 1",)), Limits(wall_s=20))
    if verdict.passed:
        return "namespaces_available() says no, yet a trivial program passes under it (a probe regression)"
    return f"a trivial program under {' '.join(iso.prefix)} gave {verdict.summary()}; output: {verdict.output[-400:]!r}"


def require_mode(mode: str) -> None:
    """Fail (skip only under the explicit opt-out) when `mode` cannot run on this machine."""
    problem = namespaces_problem() if mode == "namespaces" else None
    if problem is None:
        return
    message = f"namespaces sandbox cannot run on this machine: {problem}"
    if os.environ.get(OPT_OUT) == "optional":
        pytest.skip(f"{message} ({OPT_OUT}=optional)")
    pytest.fail(message, pytrace=False)


@pytest.fixture(params=MODES)
def mode(request) -> str:
    require_mode(request.param)
    return request.param
