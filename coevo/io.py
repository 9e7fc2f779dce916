"""Durable atomic writes, copies that share no mutable bytes, and content hashes.

Every artifact is written to a temporary sibling and published by a rename, so a crash mid-write
never leaves a half-written file or directory under the final name; a write that fills the disk raises
DiskFullError naming the artifact, after its temporary sibling is removed. Content hashes (sha256) identify
artifacts in manifests and, later, in lineage records.

Publishing is durable (`atomic_path`): every file written under the temporary path is fsynced, then
the temporary directory, then the rename is made and the parent directory fsynced, so after a power
loss the final name holds either the old artifact or the whole new one, never empty files (a rename
can reach the disk before the data it names unless the data was synced first). `fsync_calls` counts
them and `fsync_seconds` times them (bench/disk.py reports both per iteration); tests/test_durable.py
audits their order with strace.

A writer killed mid-write (SIGKILL, power loss) leaves its temporary sibling (`.NAME.XXXXXXXX.tmp`,
or `.NAME.old` of a directory being replaced); `remove_orphans` deletes those of a directory, and a
run removes its own at its next start (coevo/stages/resume.py `remove_orphans`, under the run lock).

`clone_file` copies a file so that the copy shares no mutable bytes with its source: a copy-on-write
clone (the FICLONE ioctl: btrfs, XFS with reflink, bcachefs, ...) where the filesystem has it, else
an ordinary copy. Never a hard link: a write into one name of a hard-linked file changes every
name, which is how one in-place write into the newest checkpoint once rewrote the whole lineage.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from coevo.faults import pause_point


class DiskFullError(OSError):
    """A write that ran out of disk space (ENOSPC, however the writing library reported it), naming
    the artifact; its temporary files are removed, so nothing is left under its final name."""

    def __init__(self, final: Path):
        super().__init__(
            errno.ENOSPC,
            "No space left on device while writing it; nothing was written under this name. "
            "Free space on that filesystem (or move run.out_dir) and rerun with --continue: the run resumes from its "
            "newest complete iteration",
            str(final),
        )


def out_of_space(exc: BaseException) -> bool:
    """Whether `exc` is a full disk: an OSError with ENOSPC, or a library's wrapped one (safetensors
    raises SafetensorError "... No space left on device (os error 28)")."""
    return (isinstance(exc, OSError) and exc.errno == errno.ENOSPC) or "No space left on device" in str(exc)


FICLONE = 0x40049409  # linux/fs.h _IOW(0x94, 9, int): make the target share the source's extents, copy-on-write
ORPHAN_SUFFIXES = (".tmp", ".old")  # atomic_path's temporary directory and the aside of a directory it replaces
fsync_calls = 0  # fsyncs made by this process (files and directories): bench/disk.py reports them per iteration
fsync_seconds = 0.0  # and the time they took


def fsync_path(path: str | Path) -> None:
    """fsync one file or directory (its data and the entry it holds)."""
    global fsync_calls, fsync_seconds
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if Path(path).is_dir() else 0))
    try:
        started = time.perf_counter()
        os.fsync(fd)
        fsync_seconds += time.perf_counter() - started
        fsync_calls += 1
    finally:
        os.close(fd)


def fsync_tree(root: str | Path) -> None:
    """fsync every file under `root` (or `root` itself when a file), then every directory, deepest
    first, `root` last: what must be on disk before a rename publishes `root`."""
    root = Path(root)
    if root.is_file():
        fsync_path(root)
        return
    paths = list(root.rglob("*"))
    for path in paths:
        if path.is_file() and not path.is_symlink():
            fsync_path(path)
    for path in sorted((p for p in paths if p.is_dir() and not p.is_symlink()), key=lambda p: -len(p.parts)):
        fsync_path(path)
    fsync_path(root)


@contextmanager
def atomic_path(final: str | Path, is_dir: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside `final`; on success make it durable and rename it to `final`,
    else remove it. Durable: its files and the temporary directory fsynced before the rename, the
    parent directory after it (module docstring). An existing `final` is replaced (directories via
    rename-aside, then delete)."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    target = tmp if is_dir else tmp / final.name
    try:
        try:
            yield target
            pause_point("write", f"{final.parent.name}/{final.name}")
            fsync_tree(target)
            if not is_dir:
                fsync_path(tmp)
        except Exception as exc:
            if out_of_space(exc) and not isinstance(exc, DiskFullError):
                raise DiskFullError(final) from exc
            raise
        _publish(target, final, is_dir)
        fsync_path(final.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _publish(target: Path, final: Path, is_dir: bool) -> None:
    """Rename `target` to `final`; an existing directory `final` is renamed aside first, then deleted."""
    if is_dir and final.exists():
        aside = final.with_name(f".{final.name}.old")
        shutil.rmtree(aside, ignore_errors=True)
        os.replace(final, aside)
        os.replace(target, final)
        shutil.rmtree(aside, ignore_errors=True)
    else:
        os.replace(target, final)


def remove_orphans(directory: str | Path) -> list[Path]:
    """Delete the temporary siblings a killed writer left in `directory` (`.NAME.XXXXXXXX.tmp`, `.NAME.old`:
    atomic_path's); returns them. Only for a directory no other process is writing (the run lock's holder)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = sorted(
        p for p in directory.iterdir() if p.name.startswith(".") and p.name.endswith(ORPHAN_SUFFIXES) and p.is_dir()
    )
    for path in found:
        shutil.rmtree(path, ignore_errors=True)
    return found


def clone_file(source: str | Path, target: str | Path) -> str:
    """Copy `source` to a new file `target` sharing no mutable bytes with it: a copy-on-write clone
    (FICLONE) where the filesystem has one, else a byte copy. Returns "reflink" or "copy"."""
    with open(source, "rb") as src, open(target, "xb") as dst:
        try:
            fcntl.ioctl(dst.fileno(), FICLONE, src.fileno())
            return "reflink"
        except OSError as exc:  # EOPNOTSUPP/ENOTTY (ext4, tmpfs), EXDEV (another filesystem), EINVAL
            if out_of_space(exc):
                raise
        shutil.copyfileobj(src, dst, 1 << 24)
    return "copy"


def write_text(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json(path: str | Path, obj: object) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def write_parquet(path: str | Path, frame: pd.DataFrame) -> None:
    with atomic_path(path) as tmp:
        frame.to_parquet(tmp, index=False)


def hash_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def hash_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def hash_dir(path: str | Path, exclude: tuple[str, ...] = ()) -> str:
    """Hash of every file's relative path and content under `path` (sorted; names in `exclude` skipped)."""
    root = Path(path)
    digest = hashlib.sha256()
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = file.relative_to(root).as_posix()
        if file.name in exclude:
            continue
        digest.update(rel.encode() + b"\0" + hash_file(file).encode() + b"\n")
    return digest.hexdigest()
