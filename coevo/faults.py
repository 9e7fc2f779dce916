"""Fault injection for the crash-resume tests: pause a process at a named point so a test can SIGKILL it.

Set COEVO_PAUSE=point:where:seconds, e.g. "update:2:60" (the policy update of iteration 2, trained
but not saved) or "write:checkpoints/iter_0002:60" (mid-write: the checkpoint's files are in its
temporary directory, not yet renamed). When the process reaches that point it prints
"coevo-pause point where" and sleeps. With COEVO_PAUSE_ONCE=path as well, only the first process to
reach the point pauses: it creates `path` holding its pid (the test kills that pid; a Ray worker
gives no other handle on its process) and a retry of the killed work runs through. COEVO_KILL (see
`kill_point`) makes a process SIGKILL itself instead. Unset (always, in production), each costs one
environment lookup.
"""

from __future__ import annotations

import os
import signal
import sys
import time


def pause_point(point: str, where: object) -> None:
    spec = os.environ.get("COEVO_PAUSE")
    if not spec:
        return
    name, at, seconds = spec.split(":")
    if name == point and at == str(where) and first_to_pause(os.environ.get("COEVO_PAUSE_ONCE")):
        print(f"coevo-pause {point} {where}", file=sys.stderr, flush=True)
        time.sleep(float(seconds))


def first_to_pause(marker: str | None) -> bool:
    """True without a marker path; else whether this process created it (then holding its pid)."""
    if not marker:
        return True
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as fh:
        fh.write(str(os.getpid()))
    return True


def kill_point(point: str, where: object) -> None:
    """COEVO_KILL=point:where, e.g. "ddp-step:1" (rank 1 of a distributed update, at its first
    optimizer step): the process SIGKILLs itself there, as a lost node or the OOM killer would."""
    spec = os.environ.get("COEVO_KILL")
    if spec and spec == f"{point}:{where}":
        print(f"coevo-kill {point} {where}", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
