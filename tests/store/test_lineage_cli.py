"""`coevo lineage models:/coevo-policy@best --verify` as docs/operations/lineage.md shows it: the real `coevo` app (the
console script's object), run from a project directory whose default MLflow store (sqlite:///mlflow.db)
holds checkpoints registered by the pipeline's own Tracker, which sets the "best" alias by accuracy.
Then a rewards shard an ancestor trained on is rewritten: --verify exits 1 and names that shard.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coevo.cli import app
from coevo.config import TrackingConfig
from coevo.tracking.mlflow_tracker import Tracker

from .test_lineage import _build_run, _shard

BEST = "models:/coevo-policy@best"


@pytest.fixture
def project(tmp_path, tiny_policy_dir, monkeypatch) -> Path:
    """tmp_path as the project directory: a run of three checkpoints, iter_0001 and iter_0002 logged and
    registered the way the flow does (iter_0002 has the higher accuracy, so it is "best"); cwd = it."""
    run = _build_run(tmp_path, tiny_policy_dir)
    tracker = Tracker(TrackingConfig(mlflow_uri=f"sqlite:///{tmp_path / 'mlflow.db'}"), run)
    tracker.start({"seed": 0}, run_name="run")
    tracker.log_checkpoint(1, run / "checkpoints" / "iter_0001", 0.25)
    tracker.log_checkpoint(2, run / "checkpoints" / "iter_0002", 0.5)
    tracker.end()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # the store is found as the docs' user finds it
    return tmp_path


def test_lineage_of_the_best_model_verifies_then_names_a_tampered_rewards_shard(project):
    runner = CliRunner()
    clean = runner.invoke(app, ["lineage", BEST, "--verify"])
    assert clean.exit_code == 0, clean.output
    assert f"lineage of {BEST}" in clean.output
    assert "verified: 3 checkpoint(s), every hash matches" in clean.output
    chain = json.loads(runner.invoke(app, ["lineage", BEST, "--json"]).output)["chain"]
    assert [Path(entry["checkpoint"]).name for entry in chain] == [
        "iter_0002",
        "iter_0001",
        "iter_0000",
    ]  # best = the 0.5 one

    shard = project / "run" / "rewards" / "iter_0001.parquet"  # what iter_0001 (the best's parent) trained on
    _shard(shard, 99)  # a valid parquet file with other rows
    tampered = runner.invoke(app, ["lineage", BEST, "--verify"])
    assert tampered.exit_code == 1, tampered.output
    assert "1 mismatch(es):" in tampered.output and "rewards shard" in tampered.output
    assert str(shard.resolve()) in tampered.output
    as_json = runner.invoke(app, ["lineage", BEST, "--verify", "--json"])
    assert as_json.exit_code == 1
    found = json.loads(as_json.output)["mismatches"]
    assert [(m["what"], Path(m["path"]).resolve()) for m in found] == [("rewards shard", shard.resolve())]
