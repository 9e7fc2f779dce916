"""DVC's content hash of a directory, computed the way `dvc add` / `dvc.lock` record it.

DVC hashes a directory as md5(json.dumps([{"md5": <file md5>, "relpath": <posix path>}, ...],
sort_keys=True)) + ".dir", entries sorted by path. Computing it here lets a run record the DVC
identity of its problem data (lineage, MLflow dataset digest) whether or not DVC ran the stage;
tests/test_dvc.py checks it against the hash DVC writes into dvc.lock.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


def _md5(path: Path) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def dvc_dir_md5(directory: str | Path) -> str:
    root = Path(directory)
    entries = [
        {"md5": _md5(p), "relpath": p.relative_to(root).as_posix()} for p in sorted(root.rglob("*")) if p.is_file()
    ]
    return hashlib.md5(json.dumps(entries, sort_keys=True).encode()).hexdigest() + ".dir"
