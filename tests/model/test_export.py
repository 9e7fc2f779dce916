"""`coevo export-merged --out`: an export replaces only an empty directory or an earlier export, never
a checkpoint, a run directory, the checkpoint itself or a user's other directory (coevo/model/export.py)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from typer.testing import CliRunner

from coevo.cli import app
from coevo.io import hash_file
from coevo.model.checkpoint import META, WEIGHTS
from coevo.model.export import EXPORT_RECORD


def tree(directory: Path) -> dict[str, tuple[int, str]]:
    files = (p for p in directory.rglob("*") if p.is_file())
    return {p.relative_to(directory).as_posix(): (p.stat().st_ino, hash_file(p)) for p in files}


def export(checkpoint: Path, out: Path):
    return CliRunner().invoke(app, ["export-merged", str(checkpoint), "--out", str(out)], env={"COLUMNS": "400"})


def test_export_onto_a_checkpoint_or_run_is_refused_and_changes_nothing(tmp_path, tiny_policy_dir):
    run = tmp_path / "run"
    checkpoint = run / "checkpoints" / "iter_0001"
    shutil.copytree(tiny_policy_dir, run / "bootstrap")
    shutil.copytree(tiny_policy_dir, checkpoint)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    cases = {
        checkpoint: r"it is or holds .*iter_0001, which is being exported",  # export-merged X --out X
        run: r"it is or holds .*iter_0001, which is being exported",
        run / "bootstrap": r"refusing to replace it: it is a coevo checkpoint \(coevo\.json",
        tmp_path: r"it is or holds",
        mine: r"refusing to replace it: it is not empty and not an earlier export \(no export\.json\)",
    }
    before = tree(tmp_path)
    for out, message in cases.items():
        result = export(checkpoint, out)
        assert result.exit_code == 2, (out, result.output)
        assert re.search(message, result.output) and "Nothing was written" in result.output, result.output
        assert "Traceback" not in result.output
        assert tree(tmp_path) == before, out
    assert json.loads((checkpoint / META).read_text())["files"]  # its lineage record is still there


def test_export_replaces_an_earlier_export(tmp_path, tiny_policy_dir):
    out = tmp_path / "served"
    assert export(tiny_policy_dir, out).exit_code == 0
    first = json.loads((out / EXPORT_RECORD).read_text())
    result = export(tiny_policy_dir, out)
    assert result.exit_code == 0, result.output
    assert json.loads((out / EXPORT_RECORD).read_text())["weights_sha256"] == first["weights_sha256"]
    assert hash_file(out / WEIGHTS) == first["weights_sha256"]
