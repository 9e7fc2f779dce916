"""The namespaces mode's seccomp filter (coevo/sandbox/seccomp.py): programs that call a refused
syscall get EPERM, so their verdict is not passed and the PermissionError is in its detail; the same
program under the same mode WITHOUT the filter passes, so it is the filter that refuses it, not the
chroot, the dropped uid or the network namespace. Where those would refuse the call anyway (mount,
clone with namespace flags, as nobody), the program passes arguments the kernel rejects with
another errno before any permission check (ENOENT, EINVAL): only the filter answers EPERM.
Ordinary programs (threads, fork, subprocess, AF_UNIX sockets, files) still pass. The namespaces
mode is required here (conftest.py): where it cannot run these tests FAIL with the reason."""

from __future__ import annotations

import dataclasses
import sys

import pytest

from coevo.sandbox import Job, Limits, isolation_for
from coevo.sandbox.runner import run_job_with
from coevo.sandbox.seccomp import filter_bpf

from .conftest import require_mode

LIMITS = Limits(wall_s=10, cpu_s=4, per_test_s=3)
CALL = """import ctypes
libc = ctypes.CDLL(None, use_errno=True)
def check(result, what):
    if result == -1 and ctypes.get_errno() == 1:
        raise PermissionError(1, what + " refused")
"""


def _nr(name: str) -> int:
    import pyseccomp

    return pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name)


REFUSED = {
    "ptrace": CALL + "check(libc.ptrace(0, 0, None, None), 'ptrace')",  # PTRACE_TRACEME: allowed to anyone otherwise
    "socket-inet": "import socket\nsocket.socket(socket.AF_INET, socket.SOCK_STREAM).close()",
    "socket-inet6-udp": "import socket\nsocket.socket(socket.AF_INET6, socket.SOCK_DGRAM).close()",
    "mount": CALL + "check(libc.mount(b'none', b'/work/missing', b'tmpfs', 0, None), 'mount')",  # else ENOENT
    "unshare": CALL + "check(libc.unshare(0), 'unshare')",  # unshare(0) is a no-op that succeeds otherwise
    "keyctl": CALL + f"check(libc.syscall({_nr('keyctl')}, 0, -3, 0), 'keyctl')",  # KEYCTL_GET_KEYRING_ID, session
    "clone-newns": CALL + f"r = libc.syscall({_nr('clone')}, 0x20000 | 0x200 | 17, 0, 0, 0, 0)\n"
    "if r == 0: libc._exit(0)\ncheck(r, 'clone(CLONE_NEWNS)')",  # NEWNS|FS is EINVAL otherwise
    # own pid, 0 iovecs: 0
    "process_vm_readv": CALL
    + "import os\ncheck(libc.process_vm_readv(os.getpid(), None, 0, None, 0, 0), 'process_vm_readv')",
}


@pytest.fixture(scope="module")
def namespaces():
    """The namespaces isolation (filter on) and the same isolation with the filter removed (the control)."""
    require_mode("namespaces")
    iso = isolation_for("namespaces")
    return iso, dataclasses.replace(iso, seccomp=b"")


@pytest.mark.parametrize("call", sorted(REFUSED))
def test_refused_syscall_fails_the_sample_visibly(namespaces, call):
    filtered, bare = namespaces
    program = REFUSED[call] + "\ndef f(x):\n    return x\n"
    verdict = run_job_with(filtered, Job(program, ("assert f(1) == 1",)), LIMITS)
    assert verdict.status == "crashed" and not verdict.passed, verdict.summary()
    assert "PermissionError" in verdict.detail and "Errno 1" in verdict.detail, verdict.summary()
    control = run_job_with(bare, Job(program, ("assert f(1) == 1",)), LIMITS)
    assert control.passed, (
        f"without the filter {call} should not be refused: {control.summary()} {control.output[-300:]}"
    )


def test_ordinary_programs_still_pass(namespaces):
    filtered, _ = namespaces
    program = """import os, socket, subprocess, threading
a, b = socket.socketpair()
a.send(b"x")
assert b.recv(1) == b"x"
box = []
t = threading.Thread(target=box.append, args=(1,))
t.start(); t.join()
assert box == [1]
assert subprocess.run(["/bin/true"]).returncode == 0
pid = os.fork()
if pid == 0:
    os._exit(0)
assert os.waitpid(pid, 0)[1] == 0
with open("/work/notes.txt", "w") as fh:
    fh.write("ok")
def f(x):
    return sorted(x)
"""
    verdict = run_job_with(
        filtered,
        Job(program, ("assert f([3, 1, 2]) == [1, 2, 3]", "assert open('/work/notes.txt').read() == 'ok'")),
        LIMITS,
    )
    assert verdict.passed, f"{verdict.summary()} {verdict.output[-400:]}"


@pytest.mark.skipif(
    sys.platform != "linux" or __import__("platform").machine() != "x86_64", reason="x32 ABI exists on x86_64 only"
)
def test_foreign_abi_syscall_is_killed(namespaces):
    """An x32-ABI syscall (nr | 0x40000000) goes round the native-arch rules: the filter kills it (SIGSYS)."""
    filtered, bare = namespaces
    program = "import ctypes\nctypes.CDLL(None).syscall(0x40000000 | 39)\n"  # x32 getpid
    verdict = run_job_with(filtered, Job(program, ("pass",)), LIMITS)
    assert verdict.status == "crashed" and "SIGSYS" in verdict.detail, verdict.summary()
    assert run_job_with(bare, Job(program, ("pass",)), LIMITS).passed


def test_broken_filter_fails_setup_loudly(namespaces):
    """A filter the kernel rejects is never skipped: the sample crashes in setup, naming seccomp."""
    filtered, _ = namespaces
    invalid = dataclasses.replace(filtered, seccomp=b"\xff\xff" + b"\x00" * 6)  # one instruction with an unknown opcode
    verdict = run_job_with(invalid, Job("x = 1", ("assert x == 1",)), LIMITS)
    assert verdict.status == "crashed" and "setup" in verdict.detail and "seccomp" in verdict.detail, verdict.summary()


def test_only_namespaces_promises_the_filter(namespaces):
    assert "syscalls" in isolation_for("namespaces").promises()
    assert "syscalls" not in isolation_for("rlimits").promises()
    assert len(filter_bpf()) % 8 == 0 and filter_bpf()  # struct sock_filter is 8 bytes


def test_missing_libseccomp_is_a_loud_error(monkeypatch):
    """No pyseccomp/libseccomp: building the namespaces mode raises, naming what to install (no silent fallback)."""
    monkeypatch.setitem(sys.modules, "pyseccomp", None)  # what `import pyseccomp` does where it is not installed
    filter_bpf.cache_clear()
    try:
        with pytest.raises(RuntimeError, match="needs libseccomp"):
            filter_bpf()
    finally:
        filter_bpf.cache_clear()
