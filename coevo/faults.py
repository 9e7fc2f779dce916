"""Fault injection for the crash-resume tests: pause a process at a named point so a test can SIGKILL it.

Set COEVO_PAUSE=point:where:seconds, e.g. "update:2:60" (the policy update of iteration 2, trained
but not saved) or "write:checkpoints/iter_0002:60" (mid-write: the checkpoint's files are in its
temporary directory, not yet renamed). When the process reaches that point it prints
"coevo-pause point where" and sleeps. Unset (always, in production), a pause point costs one
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
    if name == point and at == str(where):
        print(f"coevo-pause {point} {where}", file=sys.stderr, flush=True)
        time.sleep(float(seconds))


def kill_point(point: str, where: object) -> None:
    """COEVO_KILL=point:where, e.g. "ddp-step:1" (rank 1 of a distributed update, at its first
    optimizer step): the process SIGKILLs itself there, as a lost node or the OOM killer would."""
    spec = os.environ.get("COEVO_KILL")
    if spec and spec == f"{point}:{where}":
        print(f"coevo-kill {point} {where}", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
