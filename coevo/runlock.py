"""One writer per run directory: an advisory lock on `run.out_dir/.coevo-run.lock`.

Every command that writes a run directory (`coevo prepare`, `bootstrap`, `train` with the Prefect
flow or `--plain`, and so `dvc repro`, whose stages run them) holds this lock for its
whole run. It is taken with `fcntl.flock(LOCK_EX | LOCK_NB)`, atomically, on the lock file; the
kernel drops it when its holder exits, however it exits (SIGKILL included), so a lock can never be
left stale: the file's record of a dead holder is only reported ("took over from ..."), never obeyed.
The file holds one JSON record of the holder: pid, host, start time (UTC), command line; the holder
deletes it on release (and the run directory, if the lock created it and it is still empty).

A second writer fails at once with `RunLocked` (exit code `EXIT_LOCKED` = 3 from the CLI) naming
the holder, having written nothing (opening the existing lock file changes nothing). The lock
is re-entrant within a process (the CLI takes it, then the flow it calls takes it again). Readers
(`coevo eval`, `lineage`, `query`) never take it. Departure from a pid file: flock, not "pid
alive?", decides, so a recycled pid or another host's pid cannot block a run; like any flock it
is not reliable over NFS.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

LOCK_NAME = ".coevo-run.lock"
EXIT_LOCKED = 3  # the CLI's exit code when another process holds the run directory

_held: dict[Path, list] = {}  # resolved lock path -> [fd, depth, created the directory]: this process's locks
_guard = threading.Lock()


class RunLocked(RuntimeError):
    """Another live process holds the run directory; `holder` is its record (pid, host, since, command)."""

    def __init__(self, out_dir: Path, holder: dict):
        self.out_dir, self.holder = out_dir, holder
        who = f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')} since {holder.get('since', '?')}"
        super().__init__(
            f"run directory {out_dir} is in use by {who} (command: {holder.get('command', '?')}); one run per "
            f"directory — wait for it or use another run.out_dir"
        )


def lock_path(out_dir: str | os.PathLike) -> Path:
    return Path(out_dir).resolve() / LOCK_NAME


def read_holder(out_dir: str | os.PathLike) -> dict:
    """The record in the lock file (the current or the last holder), {} if none or unreadable."""
    try:
        return json.loads(lock_path(out_dir).read_text() or "{}")
    except (OSError, ValueError):
        return {}


def _acquire(path: Path, command: str) -> tuple[int, dict]:
    """Open and flock the lock file; RunLocked if another process holds it. Opening an existing
    file writes nothing, so a refused process leaves the directory as it was. A holder deletes the
    file on release, so after locking, check the lock is still on the file at `path` (retry if not)."""
    while True:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunLocked(path.parent, read_holder(path.parent)) from None
        try:
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)  # locked a file its holder had just deleted: retry on the new one
    previous = read_holder(path.parent)
    record = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": command,
    }
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
    return fd, previous


@contextmanager
def run_lock(out_dir: str | os.PathLike, command: str | None = None, log=None) -> Iterator[dict]:
    """Hold the run directory's lock for the block; yields the holder record written (or, when this
    process already holds it, the file's record). Raises RunLocked when another process holds it.
    `log` (a callable) hears of a record left by a holder that died without releasing."""
    path = lock_path(out_dir)
    with _guard:
        if path in _held:
            _held[path][1] += 1
        else:
            created = not path.parent.exists()
            fd, previous = _acquire(path, command or " ".join(sys.argv))
            _held[path] = [fd, 1, created]
            if previous and log is not None:
                log(
                    f"run lock: took over {path}, last held by pid {previous.get('pid')} on "
                    f"{previous.get('host')} since {previous.get('since')} (no longer running)"
                )
    try:
        yield read_holder(out_dir)
    finally:
        with _guard:
            entry = _held[path]
            entry[1] -= 1
            if entry[1] == 0:
                del _held[path]
                path.unlink(missing_ok=True)  # no file: released cleanly (a file left behind = a holder died)
                os.close(entry[0])  # closing releases the flock
                if entry[2]:
                    _remove_if_empty(path.parent)


def _remove_if_empty(directory: Path) -> None:
    """A run directory this lock created and nothing else wrote (a command that failed on bad input)."""
    try:
        directory.rmdir()
    except OSError:
        pass
