"""The records the stages pass (coevo/records.py): what crosses a process boundary as JSON comes back
equal, and `Artifact.intact` tells a file that changed since its record from one that did not."""

from __future__ import annotations

import json
from dataclasses import asdict

from coevo.io import hash_file
from coevo.records import Artifact, InForce, Splits, Table, Trained


def test_splits_and_trained_come_back_equal_through_json(tmp_path):
    """The distributed update hands the prepared splits to its ranks and gets checkpoint k+1 back as JSON files."""
    splits = Splits(
        Artifact("d/train.parquet", "a" * 64),
        Artifact("d/val.parquet", "b" * 64),
        Artifact("d/test.parquet", "c" * 64),
        "md5",
    )
    assert Splits.from_json(json.loads(json.dumps(splits.to_json()))) == splits
    trained = Trained("run/checkpoints/iter_0001", "d" * 64, {"policy/steps": 2.0})
    assert Trained.from_json(json.loads(json.dumps(asdict(trained)))) == trained
    now = InForce(1, "{}", splits.train, batch=("p1", "p2"), harness={"path": "coevolver/iter_0000", "in_force": {}})
    assert InForce.from_json(json.loads(json.dumps(now.to_json()))) == now


def test_a_stage_table_is_an_artifact_whose_file_is_checked_against_its_hash(tmp_path):
    path = tmp_path / "rollouts.parquet"
    path.write_bytes(b"table bytes")
    table = Table(str(path), hash_file(path), {"rollout/completion_len": 3.0})
    assert isinstance(table, Artifact) and table.intact()
    path.write_bytes(b"table bytes, overwritten since")
    assert not table.intact()
    path.unlink()
    assert not table.intact()
