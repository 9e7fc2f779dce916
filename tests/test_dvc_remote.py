"""The project's own default DVC remote, as a new user meets it: push in one clone, pull in another.

The temporary project gets the repository's .dvc/config byte for byte (no `dvc remote add`), tracks
a small data folder with `dvc add`, commits and pushes; a `git clone` next to it then pulls and must
get identical files. This is the promise of docs/pipeline.md (DVC) that `dvc push` / `dvc pull` work offline through
the remote beside the project: a remote that resolves inside the working copy (git-ignored, so
absent from every other clone) fails here with DVC's "missing" files.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from .conftest import ROOT

DVC = str(Path(sys.executable).with_name("dvc"))
FILES = {
    "problems/train.parquet": b"PAR1 train rows \x00\x01",
    "problems/test.parquet": b"PAR1 test rows \x02",
    "notes/readme.txt": b"split seed 7\n",
}


def _sh(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True)


def _ok(*args: str, cwd: Path) -> str:
    done = _sh(*args, cwd=cwd)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def _project(path: Path) -> Path:
    """A git repository whose DVC setup is the repository's own (.dvc/config, .dvc/.gitignore, .dvcignore)."""
    (path / ".dvc").mkdir(parents=True)
    for name in (".dvc/config", ".dvc/.gitignore", ".dvcignore"):
        shutil.copy(ROOT / name, path / name)
    _ok("git", "init", "-q", cwd=path)
    _ok("git", "config", "user.email", "ci@coevo", cwd=path)
    _ok("git", "config", "user.name", "ci", cwd=path)
    return path


def test_push_then_pull_in_a_fresh_clone_with_the_projects_own_remote(tmp_path):
    project = _project(tmp_path / "project")
    for rel, content in FILES.items():
        (project / "data" / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / "data" / rel).write_bytes(content)
    _ok(DVC, "add", "-q", "data", cwd=project)
    _ok("git", "add", "-A", cwd=project)
    _ok("git", "commit", "-qm", "data", cwd=project)
    _ok(DVC, "push", "-q", cwd=project)
    assert (tmp_path / "dvc-remote" / "files" / "md5").is_dir()  # the remote is the project's sibling...
    assert not (project / "dvc-remote").exists()  # ...not a folder inside this working copy

    clone = tmp_path / "clone"
    _ok("git", "clone", "-q", str(project), str(clone), cwd=tmp_path)
    assert not (clone / "data").exists()  # git carries data.dvc, not the data
    pulled = _sh(DVC, "pull", cwd=clone)
    assert pulled.returncode == 0, (
        f"dvc pull in a fresh clone failed:\n{pulled.stdout[-2000:]}\n{pulled.stderr[-2000:]}"
    )
    for rel, content in FILES.items():
        assert (clone / "data" / rel).read_bytes() == content
    assert "up to date" in _ok(DVC, "status", cwd=clone).lower()
