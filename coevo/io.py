"""Atomic writes and content hashes.

Every artifact is written to a temporary sibling and renamed into place, so a crash mid-write never
leaves a half-written file or directory under the final name; a write that fills the disk raises
DiskFullError naming the artifact, after its temporary sibling is removed. Content hashes (sha256) identify
artifacts in manifests and, later, in lineage records.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import tempfile
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


@contextmanager
def atomic_path(final: str | Path, is_dir: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside `final`; on success rename it to `final`, else remove it.

    An existing `final` is replaced (directories via rename-aside, then delete).
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    target = tmp if is_dir else tmp / final.name
    try:
        try:
            yield target
        except Exception as exc:
            if out_of_space(exc) and not isinstance(exc, DiskFullError):
                raise DiskFullError(final) from exc
            raise
        pause_point("write", f"{final.parent.name}/{final.name}")
        if is_dir:
            if final.exists():
                aside = final.with_name(f".{final.name}.old")
                shutil.rmtree(aside, ignore_errors=True)
                os.replace(final, aside)
                os.replace(target, final)
                shutil.rmtree(aside, ignore_errors=True)
            else:
                os.replace(target, final)
        else:
            os.replace(target, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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
