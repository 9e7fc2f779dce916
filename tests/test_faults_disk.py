"""Fault matrix, disk rows (docs/operations/failure-modes.md): a full disk, a damaged newest checkpoint, a damaged
shard.

Each test runs the real plain driver (coevo.driver.train) or the real Prefect flow on the tiny config:
- disk full: the run directory is a small size-limited tmpfs (needs root, as CI runs; where it cannot
  be mounted these tests FAIL, or skip under the sandbox tests' opt-out COEVO_SANDBOX_NAMESPACES=optional) filled by a
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

import json
import os
import re
import shutil
import subprocess
import warnings
from pathlib import Path

import duckdb
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from coevo.cli import app
from coevo.driver import train
from coevo.io import hash_file
from coevo.layout import RunLayout
from coevo.model.checkpoint import META, TRAINER_STATE, WEIGHTS, damaged_files, read_meta
from coevo.stages.resume import latest_complete
from coevo.store.catalog import Catalog, IterationFiles
from flows.train import train_flow
from schemas.errors import SchemaError
from schemas.rewards import read_rewards
from schemas.rollouts import read_rollouts

from .conftest import TINY, TINY_PARAMS, tiny_config
from .sandbox.conftest import OPT_OUT


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


STEPS = {"drop_zero_variance": False}  # every group trained: each iteration takes an optimizer step


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """An uninterrupted two-iteration driver run (iteration 2 takes an optimizer step)."""
    tmp = tmp_path_factory.mktemp("reference")
    train(tiny_config(tmp, objective=STEPS))
    assert read_meta(RunLayout(tmp / "run").checkpoint(2)).get("unchanged_from") is None
    return tmp / "run"


def digests(run: Path, it: int) -> dict[str, str]:
    layout = RunLayout(run)
    return {
        "weights": read_meta(layout.checkpoint(it))["weights_sha256"],
        "rollouts": hash_file(layout.rollouts(it)),
        "rewards": hash_file(layout.rewards(it)),
    }


def test_driver_continue_falls_back_from_a_truncated_checkpoint_and_remakes_shards(reference, tmp_path):
    shutil.copytree(reference, tmp_path / "run")
    cfg, layout = tiny_config(tmp_path, run={"iterations": 1}, objective=STEPS), RunLayout(tmp_path / "run")
    truncate(layout.checkpoint(2) / WEIGHTS)
    truncate(layout.rollouts(2))
    violate_schema(layout.rewards(2))
    for reader, shard in ((read_rollouts, layout.rollouts(2)), (read_rewards, layout.rewards(2))):
        with pytest.raises(SchemaError, match=shard.name):
            reader(shard)
    assert damaged_files(layout.checkpoint(2)) == [WEIGHTS]
    with pytest.warns(
        UserWarning,
        match=(
            rf"iter_0002: files whose sha256 differs from its {META} \(truncated or overwritten\): {WEIGHTS}; not "
            rf"resuming from it"
        ),
    ):
        assert latest_complete(cfg) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        summary = train(cfg, continue_latest=True)
    assert summary["checkpoints"][0].endswith("checkpoints/iter_0001")  # resumed from checkpoint 1, iteration 2 redone
    assert digests(tmp_path / "run", 2) == digests(reference, 2)  # redone bit-identically, shards re-made
    assert damaged_files(layout.checkpoint(2)) == [] and latest_complete(cfg) == 2
    read_rollouts(layout.rollouts(2)), read_rewards(layout.rewards(2))  # valid again (each raises otherwise)


THREE = {"iterations": 3, "retention": {"keep_last": 3}}  # checkpoint 1 keeps its optimizer state


@pytest.fixture(scope="module")
def reference3(tmp_path_factory) -> Path:
    """An uninterrupted three-iteration driver run keeping three checkpoints with optimizer state."""
    tmp = tmp_path_factory.mktemp("reference3")
    train(tiny_config(tmp, run=THREE, objective=STEPS))
    assert all(
        read_meta(RunLayout(tmp / "run").checkpoint(k)).get("unchanged_from") is None for k in (2, 3)
    )  # both take an optimizer step
    return tmp / "run"


def test_two_damaged_checkpoints_in_a_row_fall_back_further_and_retrain_bit_identically(reference3, tmp_path):
    """Checkpoint 3's weights and checkpoint 2's optimizer state truncated: the resume walks back to
    checkpoint 1 and redoes iterations 2 and 3 with the uninterrupted run's weights and shards. With
    checkpoint 1's optimizer state gone too, nothing after the bootstrap can resume, and it says so."""
    shutil.copytree(reference3, tmp_path / "run")
    cfg, layout = (
        tiny_config(tmp_path, run={**THREE, "iterations": 2}, objective=STEPS),
        RunLayout(tmp_path / "run"),
    )  # --continue runs 2 more
    assert all((layout.checkpoint(k) / TRAINER_STATE).is_file() for k in (1, 2, 3))
    truncate(layout.checkpoint(3) / WEIGHTS)
    truncate(layout.checkpoint(2) / TRAINER_STATE)
    with pytest.warns(UserWarning) as caught:
        assert latest_complete(cfg) == 1
    said = [str(w.message) for w in caught]
    assert any("iter_0003: files whose sha256 differs" in m and WEIGHTS in m for m in said), said
    assert any(f"iter_0002: {TRAINER_STATE} whose sha256 differs" in m for m in said), said
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        summary = train(cfg, continue_latest=True)
    assert summary["checkpoints"][0].endswith(
        "checkpoints/iter_0001"
    )  # resumed from checkpoint 1: iterations 2 and 3 redone
    assert [digests(tmp_path / "run", it) for it in (2, 3)] == [digests(reference3, it) for it in (2, 3)]
    assert latest_complete(cfg) == 3
    truncate(layout.checkpoint(3) / WEIGHTS)
    truncate(layout.checkpoint(2) / WEIGHTS)
    (layout.checkpoint(1) / TRAINER_STATE).unlink()
    with pytest.warns(
        UserWarning, match=r"no checkpoint after the bootstrap can resume \(iterations 1\.\.3 pruned or damaged"
    ):
        assert latest_complete(cfg) == 0


def test_flow_rerun_remakes_a_damaged_checkpoint_and_shards_its_cache_points_at(prefect_server, tmp_path):
    """The same flow command re-run over a finished run: cached task results point at checkpoint 2
    (weights truncated), rollouts shard 2 (truncated) and rewards shard 1 (schema-violating); each is
    made again, bit-identically, instead of being trusted."""
    params = str(cli_params(tmp_path, 2))
    train_flow(params)
    run, layout = tmp_path / "run", RunLayout(tmp_path / "run")
    before = {it: digests(run, it) for it in (1, 2)}
    truncate(layout.checkpoint(2) / WEIGHTS)
    truncate(layout.rollouts(2))
    violate_schema(layout.rewards(1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        train_flow(params)
    assert {it: digests(run, it) for it in (1, 2)} == before
    assert damaged_files(layout.checkpoint(2)) == []
    read_rewards(layout.rewards(1)), read_rollouts(layout.rollouts(2))  # valid again (each raises otherwise)


# --- disk full -------------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    """tmp_path/run as a 4 MiB tmpfs, unmounted at teardown."""
    run = tmp_path / "run"
    run.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(run)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as exc:  # CI runs as root: fail loudly, as the sandbox tests do
        detail = (
            exc.stderr.decode(errors="replace").strip() if isinstance(exc, subprocess.CalledProcessError) else str(exc)
        )
        message = f"disk-full tests cannot mount a tmpfs on this machine (needs root): {detail}"
        if (
            os.environ.get(OPT_OUT) == "optional"
        ):  # the sandbox tests' opt-out for developer machines (tests/sandbox/conftest.py)
            pytest.skip(f"{message} ({OPT_OUT}=optional)")
        pytest.fail(message, pytrace=False)
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


FULL_AT = {  # bytes left free before iteration 2 -> the write that runs out of space (tmpfs counts 4 KiB pages)
    "shard": (16 * 1024, r"/run/(rollouts|rewards)/iter_0002\.parquet'"),  # 12-20 KiB: one of the two shards
    "checkpoint": (64 * 1024, r"/run/checkpoints/iter_0002'"),  # 32-96 KiB: the shards fit, the weights do not
}


def cli_params(tmp_path: Path, iterations: int) -> Path:
    """params.yaml for the CLI: the project's, shrunk to the tiny config, outputs under tmp_path."""
    raw = yaml.safe_load(TINY_PARAMS.read_text())
    for section, values in {**TINY, "run": {**TINY["run"], "iterations": iterations}}.items():
        raw[section].update(values)
    raw["objective"].update(STEPS)
    raw["run"]["out_dir"], raw["problems"]["data_dir"] = str(tmp_path / "run"), str(tmp_path / "data")
    raw["tracking"].update(
        {"mlflow_uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "experiment": "faults-disk", "model_name": "tiny"}
    )
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize("case", sorted(FULL_AT))
def test_disk_full_stops_cleanly_and_continue_resumes(reference, small_disk, tmp_path, case):
    leave, failing = FULL_AT[case]
    cfg = tiny_config(tmp_path, run={"iterations": 1}, objective=STEPS)
    train(cfg)
    filler = fill(small_disk, leave)
    result = CliRunner().invoke(app, ["train", "--plain", "--continue", "--params", str(cli_params(tmp_path, 1))])
    assert result.exit_code == 1, result.output
    message = " ".join(result.output.split())  # rich wraps long lines
    assert "No space left on device while writing it" in message and re.search(failing, message.replace(" ", ""))
    leftovers = [p for p in small_disk.rglob("*") if p.name.endswith((".tmp", ".old"))]
    assert leftovers == []  # nothing half-written: no temporary file or directory, every final name whole
    (
        [json.loads(p.read_text()) for p in small_disk.rglob("*.json")],
        [json.loads(line) for line in (small_disk / "metrics.jsonl").read_text().splitlines()],
    )
    [pd.read_parquet(p) for p in small_disk.rglob("*.parquet")]
    assert not RunLayout(small_disk).checkpoint(2).exists() and latest_complete(cfg) == 1
    filler.unlink()  # space freed
    train(cfg, continue_latest=True)
    assert digests(small_disk, 2) == digests(reference, 2)  # as if the disk had never filled


def test_catalog_ingest_on_a_full_disk_changes_nothing_and_succeeds_after(reference, small_disk):
    """The catalog's single writer (the flow's ingest task) on a full disk: DuckDB's commit fails
    naming its write-ahead log and the cause; the catalog keeps exactly its committed iterations,
    and the same ingest succeeds once space is freed."""
    layout = RunLayout(reference)
    files = [IterationFiles(k, layout.rollouts(k), layout.rewards(k), layout.report(k)) for k in (1, 2)]
    with Catalog(small_disk / "catalog.duckdb") as catalog:
        catalog.ingest(files[:1])
        before = catalog.counts()
    filler = fill(small_disk, 12 * 1024)  # the deletes' log would fit, the inserts' does not
    with pytest.raises(duckdb.Error, match=r'catalog\.duckdb\.wal": No space left on device'):
        with Catalog(small_disk / "catalog.duckdb") as catalog:
            catalog.ingest(files)  # a resumed run re-ingests iteration 1 with the new iteration 2
    filler.unlink()
    with Catalog(small_disk / "catalog.duckdb") as catalog:
        assert catalog.counts() == before  # the failed transaction left nothing behind, deleted nothing
        catalog.ingest(files)
        assert catalog.counts()["rollouts"] == 2 * before["rollouts"]
