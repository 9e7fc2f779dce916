"""Lineage records on real checkpoints: the chain back to the bootstrap, tamper detection, moved runs,
the CLI, and resolving MLflow model URIs against a real SQLite registry."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlflow
import pandas as pd
import pytest
import torch
import typer
from typer.testing import CliRunner

from coevo.coevolvers import SkillDraft, build_coevolver
from coevo.io import hash_file, write_parquet
from coevo.model.checkpoint import TRAINER_STATE, load_policy, save_checkpoint
from coevo.store.lineage import Mismatch, lineage_chain, lineage_record, read_record, resolve_checkpoint, verify_lineage
from coevo.store.lineage_cli import lineage
from coevo.tracking.dvc import dvc_dir_md5

from ..conftest import tiny_config


def _flip_byte(path: Path, offset: int = -2) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def _shard(path: Path, iteration: int) -> Path:
    write_parquet(
        path, pd.DataFrame({"rollout_id": [f"r{iteration}-{i}" for i in range(3)], "reward": [0.0, 1.0, 0.5]})
    )
    return path


def _build_run(tmp_path: Path, policy_dir: Path) -> Path:
    """A run dir with checkpoints iter_0000 (bootstrap) -> iter_0001 -> iter_0002; problem data lies outside it."""
    cfg = tiny_config(tmp_path)
    run, data_dir = tmp_path / "run", tmp_path / "data"
    data = {name: data_dir / f"{name}.parquet" for name in ("train", "test")}
    for name, path in data.items():
        write_parquet(
            path, pd.DataFrame({"id": [f"{name}-0", f"{name}-1"], "prompt": ["1+1=", "2+3="], "answer": ["2", "5"]})
        )
    params = cfg.model_dump(mode="json")
    policy = load_policy(policy_dir, device="cpu")
    bank = build_coevolver(cfg.coevolver_list[0], cfg.seed)
    bank.save(run / "coevolver" / "iter_0000")
    record = lineage_record(
        run, 0, None, None, None, run / "coevolver" / "iter_0000", data, dvc_dir_md5(data_dir), params
    )
    save_checkpoint(run / "checkpoints" / "iter_0000", policy, {"iteration": 0, "lineage": record})
    optimizer = torch.optim.SGD(policy.model.parameters(), lr=0.1)
    for it in (1, 2):
        rollouts, rewards = (
            _shard(run / "rollouts" / f"iter_{it:04d}.parquet", it),
            _shard(run / "rewards" / f"iter_{it:04d}.parquet", it),
        )
        bank.add(
            SkillDraft(text=f"skill {it}: carry the one", family="add", key=f"{it}+9=", source="worked_example"), it
        )
        bank.save(run / "coevolver" / f"iter_{it:04d}")
        with torch.no_grad():
            next(policy.model.parameters()).add_(0.01)  # a new policy version
        parent = run / "checkpoints" / f"iter_{it - 1:04d}"
        record = lineage_record(
            run, it, parent, rollouts, rewards, run / "coevolver" / f"iter_{it:04d}", data, None, params
        )
        save_checkpoint(run / "checkpoints" / f"iter_{it:04d}", policy, {"iteration": it, "lineage": record}, optimizer)
    return run


@pytest.fixture
def run_dir(tmp_path, tiny_policy_dir) -> Path:
    return _build_run(tmp_path, tiny_policy_dir)


def _head(run: Path) -> Path:
    return run / "checkpoints" / "iter_0002"


def _named(mismatches: list[Mismatch], what: str, path_end: str) -> list[Mismatch]:
    return [m for m in mismatches if m.what == what and m.path.endswith(path_end)]


# ---- the record and the chain ----


def test_chain_reaches_the_bootstrap_and_the_data(run_dir, tmp_path):
    chain = lineage_chain(_head(run_dir))
    assert [entry["lineage"]["iteration"] for entry in chain] == [2, 1, 0]
    assert [Path(entry["checkpoint"]).name for entry in chain] == ["iter_0002", "iter_0001", "iter_0000"]
    assert chain[-1]["lineage"]["parent"] is None and chain[-1]["lineage"]["rollouts"] is None
    assert chain[0]["lineage"]["parent"]["weights_sha256"] == chain[1]["weights_sha256"] != chain[0]["weights_sha256"]
    data = chain[-1]["lineage"]["data"]
    train = tmp_path / "data" / "train.parquet"
    assert data["train"] == {"path": str(train.resolve()), "sha256": hash_file(train)}
    assert data["dvc_md5"] == dvc_dir_md5(tmp_path / "data")


def test_record_stores_run_paths_relative_and_hashes(run_dir):
    record = read_record(_head(run_dir))
    assert record["run_dir"] == "../.."
    assert record["parent"]["path"] == "checkpoints/iter_0001"
    assert record["rollouts"] == {
        "path": "rollouts/iter_0002.parquet",
        "sha256": hash_file(run_dir / "rollouts" / "iter_0002.parquet"),
    }
    manifest = json.loads((run_dir / "coevolver" / "iter_0002" / "manifest.json").read_text())
    assert record["coevolver"] == {
        "path": "coevolver/iter_0002",
        "content_hash": manifest["content_hash"],
        "kind": "skill_bank",
    }
    assert record["params"]["values"]["seed"] == 0 and len(record["params"]["sha256"]) == 64
    assert set(record["code"]) == {"git_commit", "git_dirty", "coevo_version"}


def test_read_record_names_the_file_without_lineage(tmp_path, tiny_policy_dir):
    with pytest.raises(ValueError, match="coevo.json: has no lineage record"):
        read_record(tiny_policy_dir)
    with pytest.raises(ValueError, match="coevo.json"):
        read_record(tmp_path)


# ---- verification ----


def test_clean_chain_verifies(run_dir):
    assert verify_lineage(_head(run_dir)) == []


@pytest.mark.parametrize("name", ["model.safetensors", "config.json"])
def test_one_flipped_byte_in_a_checkpoint_file_is_named(run_dir, name):
    _flip_byte(run_dir / "checkpoints" / "iter_0001" / name)
    found = verify_lineage(_head(run_dir))
    assert len(_named(found, "checkpoint file", f"iter_0001/{name}")) == 1
    if name == "model.safetensors":  # iter 2 was trained from weights that are no longer there
        assert _named(found, "parent link", "iter_0001")
    assert {m.what for m in found} <= {"checkpoint file", "parent link"}


def test_added_and_removed_checkpoint_files_are_reported(run_dir):
    ckpt = run_dir / "checkpoints" / "iter_0001"
    (ckpt / "extra.bin").write_bytes(b"x")
    (ckpt / "config.json").unlink()
    found = verify_lineage(_head(run_dir))
    assert _named(found, "checkpoint file", "iter_0001/extra.bin")[0].expected == "not listed"
    assert _named(found, "checkpoint file", "iter_0001/config.json")[0].actual == "missing"


def test_pruned_optimizer_state_is_not_a_mismatch(run_dir):
    (run_dir / "checkpoints" / "iter_0001" / TRAINER_STATE).unlink()  # the pipeline keeps it only in the newest
    assert verify_lineage(_head(run_dir)) == []


@pytest.mark.parametrize("name", ["skills.jsonl", "stats.json"])
def test_one_changed_byte_in_the_skill_bank_is_named(run_dir, name):
    _flip_byte(run_dir / "coevolver" / "iter_0002" / name)
    found = verify_lineage(_head(run_dir))
    assert [(m.what, Path(m.path).name) for m in found] == [("co-evolver file", name)]


def test_a_rewritten_coevolver_version_is_detected(run_dir, tmp_path):
    bank = build_coevolver(tiny_config(tmp_path).coevolver_list[0], 0)
    bank.save(run_dir / "coevolver" / "iter_0001")  # self-consistent manifest, but not the version iter 1 used
    found = verify_lineage(_head(run_dir))
    assert [(m.what, Path(m.path).name) for m in found] == [("co-evolver version", "iter_0001")]


def test_changed_rollouts_shard_is_detected(run_dir):
    _shard(run_dir / "rollouts" / "iter_0001.parquet", 99)
    found = verify_lineage(_head(run_dir))
    assert [(m.what, Path(m.path).name) for m in found] == [("rollouts shard", "iter_0001.parquet")]


def test_changed_data_file_is_detected_once(run_dir, tmp_path):
    _flip_byte(tmp_path / "data" / "test.parquet", 10)
    found = verify_lineage(_head(run_dir))
    # the file's own sha256, and DVC's hash of the data directory the bootstrap recorded
    assert [(m.what, Path(m.path).name) for m in found] == [("data", "test.parquet"), ("data (DVC hash)", "data")]


def test_tampered_params_values_are_detected(run_dir):
    meta_path = run_dir / "checkpoints" / "iter_0001" / "coevo.json"
    meta = json.loads(meta_path.read_text())
    meta["lineage"]["params"]["values"]["seed"] = 7
    meta_path.write_text(json.dumps(meta))
    found = verify_lineage(_head(run_dir))
    assert [(m.what, m.path) for m in found] == [("params", str(meta_path.resolve()))]


def test_deleted_parent_is_reported_not_a_crash(run_dir):
    shutil.rmtree(run_dir / "checkpoints" / "iter_0001")
    chain = lineage_chain(_head(run_dir))
    assert [entry["missing"] for entry in chain] == [False, True]
    assert chain[1]["weights_sha256"] == read_record(_head(run_dir))["parent"]["weights_sha256"]
    found = verify_lineage(_head(run_dir))
    assert [(m.what, Path(m.path).name, m.actual) for m in found] == [("parent link", "iter_0001", "missing")]


def test_moved_run_dir_still_verifies(run_dir, tmp_path):
    moved = tmp_path / "elsewhere" / "moved_run"
    moved.parent.mkdir()
    shutil.move(run_dir, moved)
    chain = lineage_chain(_head(moved))
    assert all(Path(entry["checkpoint"]).is_relative_to(moved.resolve()) for entry in chain) and len(chain) == 3
    assert verify_lineage(_head(moved)) == []


# ---- CLI ----


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command("lineage")(lineage)

    @app.callback()
    def main() -> None:
        """Mounts `lineage` as a sub-command, as the main CLI does."""

    return app


def test_cli_json_and_verify_exit_codes(run_dir):
    runner, head = CliRunner(), str(_head(run_dir))
    shown = runner.invoke(_app(), ["lineage", head, "--json"])
    assert shown.exit_code == 0, shown.output
    out = json.loads(shown.output)
    assert [entry["lineage"]["iteration"] for entry in out["chain"]] == [2, 1, 0] and "mismatches" not in out
    clean = runner.invoke(_app(), ["lineage", head, "--verify", "--json"])
    assert clean.exit_code == 0 and json.loads(clean.output)["mismatches"] == []
    tree = runner.invoke(_app(), ["lineage", head, "--verify"])
    assert tree.exit_code == 0 and "iter 0" in tree.output and "verified: 3 checkpoint(s)" in tree.output
    _flip_byte(run_dir / "checkpoints" / "iter_0001" / "config.json")
    tampered = runner.invoke(_app(), ["lineage", head, "--verify", "--json"])
    assert tampered.exit_code == 1
    assert [m["what"] for m in json.loads(tampered.output)["mismatches"]] == ["checkpoint file"]
    printed = runner.invoke(_app(), ["lineage", head, "--verify"])
    assert printed.exit_code == 1 and "iter_0001/config.json" in printed.output


def test_cli_unknown_checkpoint_exits_2(tmp_path):
    result = CliRunner().invoke(_app(), ["lineage", str(tmp_path / "nope")])
    assert result.exit_code == 2 and "no such checkpoint directory" in result.output


# ---- resolving references ----


def _registry(tmp_path: Path, checkpoint: Path | None) -> str:
    """A SQLite MLflow registry with model "coevo-policy" version 1 (alias "best"), tagged with `checkpoint`."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow.MlflowClient(uri)
    client.create_registered_model("coevo-policy")
    version = client.create_model_version("coevo-policy", source=str(checkpoint or tmp_path), run_id=None)
    if checkpoint is not None:
        client.set_model_version_tag("coevo-policy", version.version, "coevo.checkpoint_path", str(checkpoint))
    client.set_registered_model_alias("coevo-policy", "best", version.version)
    return uri


def test_resolve_checkpoint_from_dir_and_model_uris(run_dir, tmp_path):
    head = _head(run_dir)
    assert resolve_checkpoint(str(head)) == head
    uri = _registry(tmp_path, head)
    assert resolve_checkpoint("models:/coevo-policy@best", uri) == head
    assert resolve_checkpoint("models:/coevo-policy/1", uri) == head
    with pytest.raises(ValueError, match="not found in the model registry"):
        resolve_checkpoint("models:/coevo-policy@worst", uri)
    with pytest.raises(ValueError, match="expected models:/NAME@ALIAS"):
        resolve_checkpoint("models:/coevo-policy", uri)
    with pytest.raises(FileNotFoundError, match="no such checkpoint directory"):
        resolve_checkpoint(str(tmp_path / "nope"))
    shutil.rmtree(head)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_checkpoint("models:/coevo-policy@best", uri)


def test_resolve_checkpoint_without_tag_is_a_clear_error(tmp_path):
    uri = _registry(tmp_path, None)
    with pytest.raises(ValueError, match="has no 'coevo.checkpoint_path' tag"):
        resolve_checkpoint("models:/coevo-policy/1", uri)
