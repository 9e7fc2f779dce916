"""Run untrusted programs plus tests in isolated child processes and turn what happened into verdicts.

One sample = one child process: `python -I -S -B -c BOOT` (isolated mode: no user site, no
PYTHON* variables, no site-packages, no .pyc writes), started in a new session with a scrubbed
environment, in an empty private working directory, fed on stdin the supervisor's compiled code,
the setup (program, limits) and then the nonce and the tests (length-prefixed, supervisor.py); inside,
that supervisor runs the program in a second process of its own, forked before it reads the nonce
and the tests (worker.py). The parent reads at most `output_bytes` of its merged stdout/stderr and
the report pipe, kills the whole process group at the wall-clock deadline or when output
overflows, and classifies the outcome.
Modes and what each protects: see `coevo/sandbox/__init__.py`; each mode's `Isolation` is built in
isolation.py, and chosen here by name (`isolation_for`: "auto" runs the namespaces probe job).
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from coevo.sandbox.isolation import MODES, NOBODY, Isolation
from coevo.sandbox.supervisor import BOOT, compiled

STATUSES = (
    "passed",
    "failed",
    "timeout",
    "memory",
    "crashed",
    "invalid",
    "spoofed",
)  # spoofed: the program tried to fake a pass (coevo/sandbox/__init__.py)
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}  # the child's whole environment: nothing of the parent's
GRACE_S = 0.2  # after the child exits, how long to drain pipes held open by stray descendants
CPU_SLACK_S = (
    0.1  # rusage samples CPU time at tick granularity: a child killed at RLIMIT_CPU can show slightly under it
)


@dataclass(frozen=True)
class Limits:
    """Per-sample limits. cpu_s and memory apply per process; nproc to the sandbox user's processes."""

    wall_s: float = 10.0
    cpu_s: int = 5
    per_test_s: float = 2.0
    memory_mb: int = 512
    nproc: int = 64
    nofile: int = 64
    fsize_mb: int = 4
    output_bytes: int = 64 * 1024


@dataclass(frozen=True)
class Job:
    """A program (the solution's full source) and test snippets run in its namespace, in order."""

    program: str
    tests: tuple[str, ...]


@dataclass(frozen=True)
class Verdict:
    status: str  # one of STATUSES
    outcomes: tuple[str, ...]  # per test: pass, fail, error, timeout, memory, invalid, not-run
    failed_test: int | None = None  # the first test that did not pass (status failed/timeout/memory)
    detail: str = ""
    mode: str = ""
    seconds: float = 0.0
    output: str = field(default="", repr=False)  # the first output_bytes of stdout+stderr

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def pass_vector(self) -> list[bool]:
        """Per test: passed. A spoofed sample passes nothing: its earlier passes are not trusted either."""
        return [o == "pass" and self.status != "spoofed" for o in self.outcomes]

    def summary(self) -> str:
        """One line for the rewards table's details column."""
        where = f" test={self.failed_test}" if self.failed_test is not None else ""
        passed = sum(self.pass_vector())
        return (
            f"verdict={self.status}{where} passed={passed}/{len(self.outcomes)} mode={self.mode} {self.detail}".strip()
        )


@functools.cache
def namespaces_available() -> bool:
    """Whether a trivial program passes under the namespaces mode on this machine (probed once)."""
    iso = MODES["namespaces"]()
    if iso is None:
        return False
    verdict = run_job_with(iso, Job("x = 1", ("assert x == 1",)), Limits(wall_s=20))
    return verdict.passed


def isolation_for(mode: str) -> Isolation:
    """The isolation of `mode` (isolation.py's MODES); "auto" = namespaces when the probe passes, else rlimits."""
    if mode == "auto":
        mode = "namespaces" if namespaces_available() else "rlimits"
    if mode not in MODES:
        raise ValueError(f"unknown sandbox mode {mode!r}; known: auto, {', '.join(MODES)}")
    iso = MODES[mode]()
    if iso is None or (mode == "namespaces" and not namespaces_available()):
        raise RuntimeError(
            "sandbox mode 'namespaces' is unavailable here (no unshare, or user namespaces are disabled); use "
            "'auto' or 'rlimits'"
        )
    return iso


def run_job(job: Job, limits: Limits = Limits(), mode: str = "auto") -> Verdict:
    """Run one job in a fresh sandbox of `mode` ("auto", "namespaces", "rlimits" or "none")."""
    return run_job_with(isolation_for(mode), job, limits)


def run_job_with(iso: Isolation, job: Job, limits: Limits) -> Verdict:
    """Run one job under an explicit isolation."""
    start = time.perf_counter()
    box = tempfile.mkdtemp(prefix="coevo-sbx-")
    work = os.path.join(box, "work")
    os.mkdir(work, 0o700)
    read_report, write_report = os.pipe()
    try:
        if iso.drop_to is not None:
            os.chown(work, NOBODY, NOBODY)
        nonce = secrets.token_hex(16)
        payload = {  # the setup half: all the program's process will have seen (it is forked after reading it)
            "program": job.program,
            "per_test_s": limits.per_test_s,
            "limits": _rlimits(limits) if iso.limits else None,
            "confine": {
                "root": os.path.join(box, "root"),
                "work": work,
                "ro_binds": iso.ro_binds,
                "drop_to": iso.drop_to,
            }
            if iso.confine
            else None,
            "report_fd": write_report,
            "seccomp": iso.seccomp.hex() if iso.seccomp else None,
            "worker": compiled()[1],
        }
        secret = {"nonce": nonce, "tests": list(job.tests)}  # the second half: read by the supervisor alone
        if iso.confine:
            os.mkdir(payload["confine"]["root"])
        proc = subprocess.Popen(
            [*iso.prefix, iso.python, "-I", "-S", "-B", "-c", BOOT],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            cwd=work, env=ENV if iso.scrub_env else None, start_new_session=True, pass_fds=(write_report,),
        )  # fmt: skip
        os.close(write_report)
        write_report = -1
        first = json.dumps(payload).encode()
        code = compiled()[0]
        stdin = b"%010d" % len(code) + code + b"%010d" % len(first) + first + json.dumps(secret).encode()
        output, report, ended = _communicate(proc, read_report, stdin, limits)
    finally:
        for fd in (read_report, write_report):
            if fd >= 0:
                os.close(fd)
        shutil.rmtree(box, ignore_errors=True)
    verdict = classify(report, nonce, len(job.tests), output, proc.returncode, ended)
    return Verdict(
        **{
            **verdict.__dict__,
            "mode": iso.name,
            "seconds": time.perf_counter() - start,
            "output": output.decode(errors="replace"),
        }
    )


def run_jobs(
    jobs: Sequence[Job], limits: Limits = Limits(), mode: str = "auto", workers: int | None = None
) -> list[Verdict]:
    """Verdicts of many jobs, in order, `workers` sandboxes at a time (default: one per core)."""
    isolation_for(mode)  # probe once before the threads start
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        return list(pool.map(lambda job: run_job(job, limits, mode), jobs))


def _rlimits(limits: Limits) -> dict[str, int]:
    return {
        "cpu_s": int(limits.cpu_s),
        "memory_bytes": limits.memory_mb << 20,
        "nproc": limits.nproc,
        "nofile": limits.nofile,
        "fsize_bytes": limits.fsize_mb << 20,
    }


def _communicate(proc: subprocess.Popen, report_fd: int, payload: bytes, limits: Limits) -> tuple[bytes, bytes, str]:
    """Feed stdin, read output (capped) and the report until exit, deadline or overflow; kill the group.

    Returns (output, report, ended) with ended one of "exit", "cpu" (it exited having used its whole
    CPU limit), "wall", "output".
    """
    deadline = time.monotonic() + limits.wall_s
    try:
        proc.stdin.write(payload)
        proc.stdin.close()
    except (BrokenPipeError, OSError):
        pass
    out_fd = proc.stdout.fileno()
    buffers = {out_fd: bytearray(), report_fd: bytearray()}
    caps = {out_fd: limits.output_bytes, report_fd: 1 << 20}
    ended, exited_at, cpu = "exit", None, None
    with selectors.DefaultSelector() as sel:
        for fd in buffers:
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            now = time.monotonic()
            if now >= deadline:
                ended = "wall"
                break
            if proc.returncode is None:
                cpu = _reap(proc, os.WNOHANG)
            if proc.returncode is not None:
                exited_at = exited_at or now
                if now - exited_at > GRACE_S:
                    break
            for key, _ in sel.select(timeout=min(0.05, deadline - now)):
                chunk = _read(key.fd)
                if chunk is None:  # spurious wake-up
                    continue
                if not chunk:
                    sel.unregister(key.fd)
                    continue
                buffers[key.fd] += chunk
            if any(len(buffers[fd]) > caps[fd] for fd in buffers):
                ended = "output"
                break
    _kill_group(proc)
    if proc.returncode is None:
        cpu = _reap(proc, 0)
    if ended == "exit" and cpu is not None and cpu >= limits.cpu_s - CPU_SLACK_S:
        ended = "cpu"
    proc.stdout.close()
    return bytes(buffers[out_fd][: limits.output_bytes]), bytes(buffers[report_fd][: caps[report_fd]]), ended


def _reap(proc: subprocess.Popen, options: int) -> float | None:
    """Reap the child (`options`: 0 waits, os.WNOHANG only if it has exited), setting its returncode;
    returns the CPU seconds it and its reaped descendants used, None if it is still running. The
    program's own CPU-limit end is reported by the supervisor (supervisor.py); this covers the
    supervisor itself reaching the limit (a test snippet that loops in C), known from the CPU used,
    not from how the child ended: in namespaces mode the child is `unshare`, which can exit 1
    ("sigprocmask unblock failed") rather than re-raise the signal that ended the supervisor."""
    pid, status, usage = os.wait4(proc.pid, options)
    if pid == 0:
        return None
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime


def _read(fd: int) -> bytes | None:
    """A chunk, b"" at EOF, None when nothing was ready after all."""
    try:
        return os.read(fd, 1 << 16)
    except BlockingIOError:
        return None
    except OSError:
        return b""


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the child's whole process group (in namespaces mode that ends its pid namespace too);
    the caller reaps the child."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def classify(report: bytes, nonce: str, n_tests: int, output: bytes, returncode: int | None, ended: str) -> Verdict:
    """The verdict from the report lines that carry the nonce, how the process ended and its output."""
    events = [
        line.split(" ", 3)[1:] for line in report.decode(errors="replace").splitlines() if line.startswith(nonce + " ")
    ]
    outcomes = ["not-run"] * n_tests
    details: dict[int, str] = {}
    load = None
    for event in events:
        if event[0] == "test" and len(event) >= 3 and event[1].isdigit() and int(event[1]) < n_tests:
            outcomes[int(event[1])], _, details[int(event[1])] = event[2].partition(" ")
        elif event[0] in ("setup", "invalid", "load-error", "load-timeout", "load-memory"):
            load = load or event
    text = output.decode(errors="replace")
    if ended == "output":
        return Verdict("crashed", tuple(outcomes), detail="output limit exceeded")
    spoof = next(
        (e for e in events if e[0] == "spoofed" or (e[0] == "test" and len(e) >= 3 and e[2].startswith("spoofed"))),
        None,
    )
    if spoof is not None:
        first = next((i for i, o in enumerate(outcomes) if o != "pass"), None)
        return Verdict("spoofed", tuple(outcomes), failed_test=first, detail=" ".join(spoof)[:200])
    done = any(e[0] == "done" for e in events)
    if not done and load is None and ended == "exit" and returncode == 0 and n_tests:
        first = next((i for i, o in enumerate(outcomes) if o != "pass"), 0)
        return Verdict(
            "spoofed", tuple(outcomes), failed_test=first, detail="exited cleanly before the harness finished its tests"
        )
    if load is not None:
        return _load_verdict(load, tuple(outcomes))
    ran_out = ended in ("wall", "cpu") or _signal_of(returncode) in (signal.SIGXCPU, signal.SIGKILL)
    for i, outcome in enumerate(outcomes):
        if outcome == "pass":
            continue
        if outcome in ("fail", "error", "invalid"):
            return Verdict("failed", tuple(outcomes), failed_test=i, detail=outcome)
        if outcome in ("timeout", "memory"):
            return Verdict(outcome, tuple(outcomes), failed_test=i, detail=details.get(i, "")[:200])
        if outcome == "crashed":  # the program's process died during this test; the supervisor says how
            outcomes[i] = "not-run"
            return Verdict("crashed", tuple(outcomes), failed_test=i, detail=details.get(i, "")[:200])
        outcomes[i] = "timeout" if ran_out else ("memory" if "MemoryError" in text else "not-run")
        status = "timeout" if ran_out else ("memory" if "MemoryError" in text else "crashed")
        sigsys = (
            " SIGSYS: the seccomp filter killed it (a syscall through a foreign ABI)"
            if _signal_of(returncode) == signal.SIGSYS
            else ""
        )
        return Verdict(status, tuple(outcomes), failed_test=i, detail=f"{ended} rc={returncode}{sigsys}")
    return Verdict("passed", tuple(outcomes))


def _load_verdict(event: list[str], outcomes: tuple[str, ...]) -> Verdict:
    kind, detail = event[0], " ".join(event[1:])[:200]
    status = {"setup": "crashed", "invalid": "invalid", "load-timeout": "timeout", "load-memory": "memory"}.get(kind)
    if status is None:  # load-error: the program raised at import time
        status = "memory" if detail.startswith("MemoryError") else "crashed"
    return Verdict(status, outcomes, detail=f"{kind}: {detail}".strip())


def _signal_of(returncode: int | None) -> int | None:
    if returncode is None:
        return None
    if returncode < 0:
        return -returncode
    return returncode - 128 if returncode > 128 else None
