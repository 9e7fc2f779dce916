"""Fault matrix, disk rows (README "Failure modes"): a full disk, a damaged newest checkpoint, a damaged shard.

Each test runs the real plain driver (coevo.driver.train) or the real Prefect flow on the tiny config:
- disk full: the run directory is a small size-limited tmpfs (needs root, as CI runs) filled by a
  file the test writes until only a chosen number of bytes is left, so the write that fails is a
  shard's or a checkpoint's. The run stops with an error naming the path and the cause, leaves no
  temporary file or partial checkpoint, and `--continue` after the filler is deleted finishes the
  iteration with the same weights as a run that never ran out of space;
- the newest checkpoint's weights truncated before a resume: its sha256 no longer matches the one
  coevo.json records, so `latest_complete` falls back to the previous checkpoint and the resume
  redoes the iteration, bit-identically (driver `--continue`; a flow re-run whose cached update
  result points at the damaged checkpoint trains again);
- a truncated or schema-violating rollouts/rewards shard: the driver's `--continue` re-makes the
  shards of the iterations it redoes; the flow re-makes a shard its cached task result points at.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import warnings
from pathlib import Path

import pandas as pd
import pytest

from coevo.driver import train
from coevo.io import hash_file
from coevo.policy.checkpoint import META, WEIGHTS, read_meta
from coevo.stages import RunLayout, damaged_files, latest_complete
from schemas.rewards import read_rewards
from schemas.rollouts import read_rollouts

from .conftest import tiny_config


def truncate(path: Path) -> None:
    """Cut `path` to half its size as a new inode (a hard-linked sibling checkpoint keeps its copy)."""
    data = path.read_bytes()
    path.unlink()
    path.write_bytes(data[: len(data) // 2])


def violate_schema(path: Path) -> None:
    """Rewrite a shard as readable parquet that breaks its pandera schema (a required column dropped)."""
    frame = pd.read_parquet(path)
    path.unlink()
    frame.drop(columns=[frame.columns[0]]).to_parquet(path, index=False)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """An uninterrupted two-iteration driver run (iteration 2 takes an optimizer step)."""
    tmp = tmp_path_factory.mktemp("reference")
    train(tiny_config(tmp))
    assert read_meta(RunLayout(tmp / "run").checkpoint(2)).get("unchanged_from") is None
    return tmp / "run"


def digests(run: Path, it: int) -> dict[str, str]:
    layout = RunLayout(run)
    return {"weights": read_meta(layout.checkpoint(it))["weights_sha256"], "rollouts": hash_file(layout.rollouts(it)), "rewards": hash_file(layout.rewards(it))}


def test_driver_continue_falls_back_from_a_truncated_checkpoint_and_remakes_shards(reference, tmp_path):
    shutil.copytree(reference, tmp_path / "run")
    cfg, layout = tiny_config(tmp_path, run={"iterations": 1}), RunLayout(tmp_path / "run")
    truncate(layout.checkpoint(2) / WEIGHTS)
    truncate(layout.rollouts(2))
    violate_schema(layout.rewards(2))
    assert damaged_files(layout.checkpoint(2)) == [WEIGHTS]
    with pytest.warns(UserWarning, match=rf"iter_0002: {WEIGHTS} no longer match the sha256 in its {META}"):
        assert latest_complete(cfg) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        summary = train(cfg, continue_latest=True)
    assert summary["checkpoints"][0].endswith("checkpoints/iter_0001")  # resumed from checkpoint 1, iteration 2 redone
    assert digests(tmp_path / "run", 2) == digests(reference, 2)  # redone bit-identically, shards re-made
    assert damaged_files(layout.checkpoint(2)) == [] and latest_complete(cfg) == 2
    read_rollouts(layout.rollouts(2)), read_rewards(layout.rewards(2))


# --- disk full -------------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    """tmp_path/run as a 4 MiB tmpfs, unmounted at teardown."""
    run = tmp_path / "run"
    run.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(run)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {exc}")
    try:
        yield run
    finally:
        subprocess.run(["umount", "-l", str(run)], check=True)


def fill(directory: Path, leave: int) -> Path:
    """A filler file that leaves `leave` bytes free on the filesystem of `directory`."""
    stat = os.statvfs(directory)
    filler = directory / "filler.bin"
    with open(filler, "wb") as fh:
        os.posix_fallocate(fh.fileno(), 0, stat.f_bavail * stat.f_frsize - leave)
    return filler


FULL_AT = {  # bytes left free before iteration 2 -> the write that runs out of space
    "shard": (16 * 1024, "rollouts/iter_0002.parquet"),
    "checkpoint": (64 * 1024, "checkpoints/iter_0002"),
}


@pytest.mark.parametrize("case", sorted(FULL_AT))
def test_disk_full_stops_cleanly_and_continue_resumes(reference, small_disk, tmp_path, case):
    leave, failing = FULL_AT[case]
    train(tiny_config(tmp_path, run={"iterations": 1}))
    cfg = tiny_config(tmp_path, run={"iterations": 1})
    filler = fill(small_disk, leave)
    with pytest.raises(OSError, match="No space left on device") as err:
        train(cfg, continue_latest=True)
    assert failing in str(err.value)
    leftovers = [p for p in small_disk.rglob("*") if p.name.endswith((".tmp", ".old"))]
    assert leftovers == []  # nothing half-written: no temporary file or directory
    assert not RunLayout(small_disk).checkpoint(2).exists()
    assert latest_complete(cfg) == 1
    filler.unlink()  # space freed
    train(cfg, continue_latest=True)
    assert digests(small_disk, 2) == digests(reference, 2)
