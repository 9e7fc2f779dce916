"""An in-place write into the newest checkpoint of a DVC-tracked run corrupts nothing else: not the
older checkpoints, not DVC's cache, not the remote, not a fresh clone's pull.

The project's dvc.yaml in a temporary git repository, with a frozen policy (every checkpoint is
byte-identical to its parent, so DVC's cache holds one object for the weights of all of them: the
most sharing there can be), through `dvc repro`, push, a fresh clone and pull; then
`save_pretrained` into the clone's newest checkpoint, as a user would. Twice: with the project's
cache settings (DVC's default `reflink,copy`: the workspace holds copies) and with `cache.type
hardlink` set by a user. With hard links DVC makes every linked file read-only and one inode is
shared by every checkpoint holding the same bytes and by the cache; the documented way to edit one
is `dvc unprotect` first (docs/operations/durability.md), which replaces its links by copies. (As root
the read-only bit does not stop a write: that is DVC's own contract, which coevo cannot enforce.)
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from prefect.settings import PREFECT_API_URL

from coevo.io import hash_file
from coevo.model.checkpoint import WEIGHTS, load_policy
from coevo.store.lineage import verify_lineage
from tests.test_dvc import OUT, _repo, _sh

DVC = str(Path(sys.executable).with_name("dvc"))


def cache_objects_intact(repo: Path) -> int:
    """Every object in the DVC cache still has the md5 its name says; returns how many there are."""
    objects = [p for p in (repo / ".dvc" / "cache" / "files" / "md5").rglob("*") if p.is_file()]
    for path in objects:
        name = path.parent.name + path.name.removesuffix(".dir")
        assert hashlib.md5(path.read_bytes()).hexdigest() == name, f"{path}: DVC cache object changed"
    return len(objects)


def snapshot(run: Path) -> dict[str, str]:
    return {p.relative_to(run).as_posix(): hash_file(p) for p in sorted(run.rglob("*")) if p.is_file()}


def write_in_place(checkpoint: Path) -> None:
    """What issue 44 did: the newest checkpoint loaded and saved back into its own directory, plus a
    byte written into its weights file, both through the files' existing names."""
    policy = load_policy(checkpoint, "cpu")
    policy.model.config.note = "edited in place"
    policy.model.save_pretrained(checkpoint)
    policy.tokenizer.save_pretrained(checkpoint)
    with (checkpoint / WEIGHTS).open("r+b") as fh:
        fh.seek(-1, os.SEEK_END)
        fh.write(b"\x01")


@pytest.mark.parametrize("cache_type", ["project", "hardlink"])
def test_in_place_write_after_repro_push_clone_pull_corrupts_nothing_else(prefect_server, tmp_path, cache_type):
    env = {
        **os.environ,
        "PREFECT_API_URL": PREFECT_API_URL.value(),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    env.pop("COEVO_PAUSE", None)
    repo = _repo(tmp_path)
    raw = yaml.safe_load((repo / "params.yaml").read_text())
    raw["policy"]["frozen"] = True  # unchanged checkpoints: the parent's files copied, byte for byte
    (repo / "params.yaml").write_text(yaml.safe_dump(raw))
    _sh(DVC, "init", "-q", cwd=repo)
    shutil.copy(Path(__file__).resolve().parents[2] / ".dvc" / "config", repo / ".dvc" / "config")
    if cache_type == "hardlink":
        _sh(DVC, "config", "cache.type", "hardlink", cwd=repo)
    _sh(DVC, "repro", cwd=repo, env=env)
    _sh("git", "add", "-A", cwd=repo)
    _sh("git", "commit", "-qm", "pipeline", cwd=repo)
    _sh(DVC, "push", "-q", cwd=repo, env=env)
    clone = tmp_path / "clone"
    _sh("git", "clone", "-q", str(repo), str(clone), cwd=tmp_path)
    _sh(DVC, "pull", "-q", cwd=clone, env=env)
    for workspace in (clone, repo):  # the pulled clone, and the project the run was made in
        run, newest = workspace / OUT, workspace / OUT / "checkpoints" / "iter_0002"
        older = [run / "bootstrap", run / "checkpoints" / "iter_0001"]
        assert all(verify_lineage(c) == [] for c in [*older, newest])
        before = {c: snapshot(c) for c in older}
        if cache_type == "hardlink":  # DVC's protection: linked and read-only; the way to edit is to unprotect
            weights = [c / WEIGHTS for c in [*older, newest]]
            assert len({os.stat(w).st_ino for w in weights}) == 1 and not os.stat(weights[0]).st_mode & 0o222
            _sh(DVC, "unprotect", str(newest.relative_to(workspace)), cwd=workspace, env=env)
        write_in_place(newest)
        assert {c: snapshot(c) for c in older} == before, workspace
        assert all(verify_lineage(c) == [] for c in older)
        assert {"config.json", WEIGHTS} <= {Path(m.path).name for m in verify_lineage(newest)}
        assert cache_objects_intact(workspace) > 0
    again = tmp_path / "again"  # the remote: a second clone pulls every checkpoint intact
    _sh("git", "clone", "-q", str(repo), str(again), cwd=tmp_path)
    _sh(DVC, "pull", "-q", cwd=again, env=env)
    for checkpoint in sorted((again / OUT / "checkpoints").iterdir()) + [again / OUT / "bootstrap"]:
        assert verify_lineage(checkpoint) == [], checkpoint
