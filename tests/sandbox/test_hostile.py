"""Hostile programs in the sandbox: each is contained and reported with the right verdict, and the
test process is unharmed. Runs under "rlimits" and "namespaces" (the `mode` fixture, conftest.py:
a namespaces case FAILS, naming the probe's reason, where that mode cannot run); a containment a
mode does not promise (coevo/sandbox/__init__.py) is skipped with the reason, never asserted
vacuously, and test_every_containment_is_checked_by_a_mode_here makes sure each containment is
asserted by at least one mode on this machine (as root, "rlimits" promises no nproc, files,
network, parent or fork; "namespaces" covers them)."""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
import signal
import socket
import time
from pathlib import Path

import pytest

from coevo.sandbox import Job, Limits, isolation_for, run_job

from .conftest import MODES, require_mode

LIMITS = Limits(wall_s=4, cpu_s=2, per_test_s=1.5, memory_mb=256, nproc=32, output_bytes=16 * 1024)
CONTAINMENTS = {"env", "cwd", "timeout", "memory", "output", "nofile", "nproc", "network", "files", "parent", "fork"}


def test_every_containment_is_checked_by_a_mode_here():
    """No containment is skipped under every mode: the union of what the modes promise on this
    machine (as root "rlimits" drops nproc; only "namespaces" has network/files/parent/fork) is all."""
    for mode in MODES:
        require_mode(mode)
    covered = set().union(*(isolation_for(mode).promises() for mode in MODES))
    assert covered >= CONTAINMENTS, f"no sandbox mode on this machine contains {sorted(CONTAINMENTS - covered)}"


def needs(mode: str, promise: str) -> None:
    if promise not in isolation_for(mode).promises():
        pytest.skip(f"mode {mode!r} does not promise {promise!r} containment here")


def run(mode: str, program: str, tests: tuple[str, ...] = ("pass",), limits: Limits = LIMITS):
    pid, cwd = os.getpid(), os.getcwd()
    verdict = run_job(Job(program, tests), limits, mode)
    assert os.getpid() == pid and os.getcwd() == cwd  # the test process is unharmed
    assert verdict.mode == mode
    return verdict


def test_ordinary_verdicts(mode):
    ok = "def f(x):\n    return x + 3\n"
    assert run(mode, ok, ("assert f(1) == 4", "assert f(0) == 3")).status == "passed"
    failed = run(mode, ok, ("assert f(1) == 4", "assert f(2) == 6", "assert f(0) == 3"))
    assert (failed.status, failed.failed_test, failed.outcomes) == ("failed", 1, ("pass", "fail", "pass"))
    assert run(mode, "def f(x) return x").status == "invalid"
    assert run(mode, "raise ValueError('boom')").status == "crashed"
    exited = run(
        mode, "import os\nos._exit(0)", ("pass",)
    )  # a clean exit before the tests ran: a faked pass (bench/spoof_guards.py)
    assert exited.status == "spoofed" and exited.outcomes == ("not-run",)
    killed = run(mode, "import ctypes\nctypes.string_at(0)", ("pass",))  # SIGSEGV: a crash, not a clean exit
    assert killed.status == "crashed" and killed.outcomes == ("not-run",)


def test_infinite_loop_times_out(mode):
    """Each ends as a timeout by one of its limits; a limit that did not end it would hang the test, so
    no wall-clock bound is asserted here (one flaked on a loaded machine)."""
    verdict = run(mode, "def f():\n    while True:\n        pass\n", ("f()", "assert True"))
    assert verdict.status == "timeout" and verdict.failed_test == 0
    assert verdict.outcomes == ("timeout", "pass")  # the per-test timer interrupts only that test
    stubborn = run(mode, "while True:\n    try:\n        while True: pass\n    except BaseException: pass\n")
    assert stubborn.status == "timeout"  # swallows the per-test timer: RLIMIT_CPU / the wall clock end it


def test_a_loop_in_c_ends_at_the_cpu_limit_as_a_timeout(mode):
    """`any(iter(int, 1))` never returns to the interpreter, so the per-test timer cannot stop it;
    RLIMIT_CPU kills it, and that is a timeout, however the sandbox's parent process reports it."""
    verdict = run(mode, "def f():\n    return any(iter(int, 1))\n", ("f()", "assert True"))
    assert (verdict.status, verdict.failed_test, verdict.outcomes) == ("timeout", 0, ("timeout", "not-run"))


def test_fork_bomb_is_contained(mode):
    needs(mode, "nproc")
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    verdict = run(mode, bomb)
    assert verdict.status in ("timeout", "crashed")
    assert run(mode, "x = 1", ("assert x == 1",)).passed  # the machine still starts processes


def test_memory_bomb_reports_memory(mode):
    assert run(mode, "x = bytearray(4 << 30)").status == "memory"
    patient = dataclasses.replace(
        LIMITS, wall_s=12, per_test_s=8
    )  # on a loaded machine zero-filling 256 MiB can outlast 1.5 s
    grow = run(
        mode,
        "def f():\n    chunks = []\n    while True:\n        chunks.append(bytearray(1 << 20))\n",
        ("f()",),
        patient,
    )
    assert (grow.status, grow.failed_test) == ("memory", 0)


def test_huge_output_is_capped(mode):
    verdict = run(mode, "while True:\n    print('x' * 10000)\n")
    assert verdict.status == "crashed" and "output limit" in verdict.detail
    assert len(verdict.output) <= LIMITS.output_bytes


def test_environment_of_the_parent_is_invisible(mode, monkeypatch):
    needs(mode, "env")
    monkeypatch.setenv("COEVO_TEST_SECRET", "hunter2-env")
    verdict = run(mode, "import os\nprint(dict(os.environ))\nprint(os.environ.get('COEVO_TEST_SECRET'))")
    assert verdict.passed and "None" in verdict.output and "hunter2-env" not in verdict.output


def test_files_of_the_parent_cannot_be_read_written_or_deleted(mode, tmp_path):
    needs(mode, "files")
    secret, precious, outside = tmp_path / "secret.txt", tmp_path / "precious", tmp_path / "pwned.txt"
    secret.write_text("hunter2-file")
    secret.chmod(0o600)
    precious.mkdir()
    (precious / "keep.txt").write_text("keep")
    program = (
        "import os, shutil\n"
        f"try:\n    print(open({str(secret)!r}).read())\nexcept OSError as e:\n    print('read blocked', "
        f"type(e).__name__)\n"
        f"try:\n    open({str(outside)!r}, 'w').write('x')\nexcept OSError as e:\n    print('write blocked', "
        f"type(e).__name__)\n"
        f"shutil.rmtree({str(precious)!r}, ignore_errors=True)\n"
        f"try:\n    os.remove({str(secret)!r})\nexcept OSError as e:\n    print('delete blocked', type(e).__name__)\n"
        "for path in ('/etc/passwd', '/root', '/home', '/tmp', '/proc/1/environ'):\n"
        "    try:\n        open(path).read() if '.' in path or 'passwd' in path or 'environ' in path else "
        "os.listdir(path)\n"
        "        print('visible', path)\n    except OSError:\n        pass\n"
    )
    verdict = run(mode, program)
    assert verdict.passed
    assert "hunter2-file" not in verdict.output and "read blocked" in verdict.output
    assert not outside.exists() and "write blocked" in verdict.output
    assert (precious / "keep.txt").read_text() == "keep" and secret.read_text() == "hunter2-file"
    for path in ("/etc/passwd", "/home", "/tmp", "/proc/1/environ"):
        assert f"visible {path}\n" not in verdict.output


def test_network_is_unreachable(mode):
    needs(mode, "network")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.settimeout(0.5)
        port = server.getsockname()[1]
        program = f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=1)\ns.sendall(b'leak')\n"
        verdict = run(mode, program)
        assert verdict.status == "crashed" and "load-error" in verdict.detail  # connection refused / unreachable
        with pytest.raises(TimeoutError):
            server.accept()  # nothing ever connected


def test_parent_cannot_be_killed(mode):
    needs(mode, "parent")
    me = os.getpid()
    program = (
        "import os, signal\n"
        f"for pid in ({me}, os.getppid()):\n"
        "    try:\n        os.kill(pid, signal.SIGKILL)\n    except OSError as e:\n        print('kill blocked', "
        "pid, type(e).__name__)\n"
        "os.kill(-1, signal.SIGKILL)\n"
    )
    verdict = run(mode, program)
    assert f"kill blocked {me}" in verdict.output
    assert verdict.status == "crashed"  # kill(-1) ended the sample itself, nothing outside it
    assert run(mode, "x = 1", ("assert x == 1",)).passed


def test_open_files_are_capped_by_nofile(mode):
    needs(mode, "nofile")
    limits = dataclasses.replace(LIMITS, nofile=16)
    program = (
        "import errno, os\nfds = []\n"
        "try:\n    while len(fds) < 4096:\n        fds.append(os.open('.', os.O_RDONLY))\n"
        "except OSError as e:\n    print('open refused', errno.errorcode[e.errno], len(fds))\n"
    )
    verdict = run(mode, program, limits=limits)
    found = re.search(r"open refused EMFILE (\d+)", verdict.output)
    assert verdict.passed and found, verdict.output
    assert 0 < int(found[1]) < limits.nofile  # the harness's own descriptors count too


def test_process_count_is_capped_by_nproc(mode):
    needs(mode, "nproc")
    limits = dataclasses.replace(LIMITS, nproc=16)
    program = (
        "import errno, os, signal\nn = 0\n"
        "try:\n    while n < 200:\n        if os.fork() == 0:\n            signal.pause()\n            os._exit(0)\n "
        "       n += 1\n"
        "except OSError as e:\n    print('fork refused', errno.errorcode[e.errno], n)\n"
    )
    verdict = run(mode, program, limits=limits)
    found = re.search(r"fork refused EAGAIN (\d+)", verdict.output)
    assert verdict.passed and found, verdict.output
    assert (
        int(found[1]) < limits.nproc
    )  # RLIMIT_NPROC counts every process of the user, the harness too (0 where it already has 16)
    assert run(mode, "x = 1", ("assert x == 1",)).passed  # the sleeping children went with the sample


def _processes_named(name: str) -> list[int]:
    pids = []
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() == name:
                pids.append(int(comm.parent.name))
        except OSError:
            pass  # exited meanwhile
    return pids


def test_forked_processes_do_not_outlive_the_sample(mode):
    """A child that leaves the process group (setsid) escapes a group kill; the sandbox must still end it."""
    needs(mode, "fork")
    name = "sbx" + secrets.token_hex(6)  # /proc/<pid>/comm holds 15 characters
    program = (
        "import ctypes, os, time\nr, w = os.pipe()\n"
        "if os.fork() == 0:\n    os.setsid()\n"
        f"    ok = ctypes.CDLL(None).prctl(15, {name.encode()!r}, 0, 0, 0) == 0\n"  # PR_SET_NAME
        "    os.write(w, b'1' if ok else b'0')\n    os.close(1), os.close(2)\n    time.sleep(30)\n    os._exit(0)\n"
        "print('straggler', os.read(r, 1).decode())\n"
    )
    verdict = run(
        mode, program, limits=dataclasses.replace(LIMITS, nproc=4096)
    )  # a busy user may hold 32 processes already
    try:
        assert verdict.passed and "straggler 1" in verdict.output, verdict.output  # it ran, renamed, outside the group
        deadline = time.monotonic() + 2
        while _processes_named(name) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _processes_named(name) == [], "a forked straggler outlived its sample"
    finally:
        for pid in _processes_named(name):
            os.kill(pid, signal.SIGKILL)
