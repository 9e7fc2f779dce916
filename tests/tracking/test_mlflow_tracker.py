"""Tracker against a real MLflow SQLite store in tmp_path with real tiny checkpoints (no mocks)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import matplotlib.image
import mlflow.artifacts
import pandas as pd
import pytest
import torch
from transformers import AutoModelForCausalLM

from coevo.coevolvers.base import save_artifact
from coevo.config import TrackingConfig
from coevo.model.checkpoint import TRAINER_STATE, load_policy, policy_version, save_checkpoint
from coevo.tracking.mlflow_tracker import (
    METRICS_MARKER,
    RUN_FILE,
    TAG_EVAL,
    TAG_ITERATION,
    TAG_PATH,
    TAG_WEIGHTS,
    Tracker,
    flatten_params,
    metric_name,
)

MODEL = "tiny-policy"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cfg(tmp_path) -> TrackingConfig:
    return TrackingConfig(
        mlflow_uri=f"sqlite:///{tmp_path / 'mlflow' / 'mlflow.db'}", experiment="test", model_name=MODEL
    )


@pytest.fixture
def tracker(cfg, tmp_path) -> Tracker:
    tracker = Tracker(cfg, tmp_path / "run")
    tracker.start({"seed": 0}, run_name="test")
    return tracker


@pytest.fixture(scope="module")
def checkpoints(tiny_policy_dir, tmp_path_factory) -> list[Path]:
    """Three real checkpoints (iterations 1..3) with distinct weights and an optimizer state each."""
    root = tmp_path_factory.mktemp("ckpts")
    policy = load_policy(tiny_policy_dir, device="cpu")
    optimizer = torch.optim.AdamW(policy.model.parameters())
    dirs = []
    for it in (1, 2, 3):
        with torch.no_grad():
            next(policy.model.parameters()).add_(0.01)
        dirs.append(root / f"iter_{it:04d}")
        save_checkpoint(dirs[-1], policy, {"iteration": it}, optimizer=optimizer)
    return dirs


def _artifact_paths(tracker: Tracker, path: str) -> list[str]:
    return sorted(a.path for a in tracker.client.list_artifacts(tracker.run_id, path))


# ---- pure helpers ----
def test_flatten_params_dotted_strings_truncated():
    flat = flatten_params(
        {"optim": {"lr": 1e-3, "betas": (0.9, 0.99)}, "run": {"out_dir": Path("/r")}, "long": "x" * 7000}
    )
    assert flat["optim.lr"] == "0.001"
    assert flat["optim.betas"] == "[0.9, 0.99]"
    assert flat["run.out_dir"] == "/r"
    assert len(flat["long"]) == 6000 and flat["long"].endswith("...[truncated]")


def test_metric_name_keeps_namespaces_and_replaces_rejected_characters():
    assert metric_name("eval/acc/add") == "eval/acc/add"
    assert metric_name("eval/pass@4") == "eval/pass_at_4"
    assert metric_name("time/rollout (s)") == "time/rollout _s_"


# ---- run ----
def test_start_creates_run_with_flattened_params(cfg, tmp_path):
    tracker = Tracker(cfg, tmp_path / "run")
    run_id = tracker.start(
        {"optim": {"lr": 0.001}, "problems": {"families": ["add", "sub"]}, "long": "y" * 7000}, run_name="first"
    )
    run = tracker.client.get_run(run_id)
    assert run.info.run_name == "first" and run.info.status == "RUNNING"
    assert run.data.params["optim.lr"] == "0.001"
    assert run.data.params["problems.families"] == '["add", "sub"]'
    assert len(run.data.params["long"]) == 6000
    assert json.loads((tmp_path / "run" / RUN_FILE).read_text())["run_id"] == run_id
    assert run.info.artifact_uri.startswith(
        (tmp_path / "mlflow" / "mlartifacts").as_uri()
    )  # beside the DB, not ./mlruns


def test_start_resumes_the_same_unfinished_run(cfg, tmp_path):
    params = {"optim": {"lr": 0.001}, "long": "z" * 7000}
    first = Tracker(cfg, tmp_path / "run")
    run_id = first.start(params, run_name="r")
    first.end("FAILED")  # a crashed flow
    second = Tracker(cfg, tmp_path / "run")
    assert second.start({**params, "new": 1}, run_name="r") == run_id  # identical params re-logged without error
    run = second.client.get_run(run_id)
    assert run.info.status == "RUNNING" and run.data.params["new"] == "1"
    assert Tracker(cfg, tmp_path / "run").start(params, run_name="r") == run_id  # while RUNNING, too


def test_finished_run_is_not_resumed(cfg, tmp_path):
    first = Tracker(cfg, tmp_path / "run")
    old = first.start({"a": 1}, run_name="r")
    first.end()
    new = Tracker(cfg, tmp_path / "run").start({"a": 2}, run_name="r")
    assert new != old
    assert first.client.get_run(old).info.status == "FINISHED"
    assert json.loads((tmp_path / "run" / RUN_FILE).read_text())["run_id"] == new


def test_resume_keeps_logged_values_of_changed_params(cfg, tmp_path, caplog):
    run_id = Tracker(cfg, tmp_path / "run").start({"optim": {"lr": 0.001}}, run_name="r")
    resumed = Tracker(cfg, tmp_path / "run")
    with caplog.at_level("WARNING", logger="coevo.tracking.mlflow_tracker"):
        assert resumed.start({"optim": {"lr": 0.5}}, run_name="r") == run_id
    assert resumed.client.get_run(run_id).data.params["optim.lr"] == "0.001"
    assert "optim.lr" in caplog.text


def test_deleted_run_is_not_resumed(cfg, tmp_path):
    first = Tracker(cfg, tmp_path / "run")
    old = first.start({}, run_name="r")
    first.client.delete_run(old)
    assert Tracker(cfg, tmp_path / "run").start({}, run_name="r") != old


# ---- metrics and data ----
def test_log_iteration_steps_and_namespaces(tracker):
    tracker.log_iteration(1, {"eval/acc": 0.25, "eval/pass@4": 0.5, "time/rollout": 1.5, "rollout/reward_mean": 0.1})
    tracker.log_iteration(2, {"eval/acc": 0.75, "eval/pass@4": 1.0})
    history = tracker.client.get_metric_history(tracker.run_id, "eval/acc")
    assert [(m.step, m.value) for m in sorted(history, key=lambda m: m.step)] == [(1, 0.25), (2, 0.75)]
    assert [m.step for m in tracker.client.get_metric_history(tracker.run_id, "eval/pass_at_4")] == [1, 2]
    assert set(tracker.client.get_run(tracker.run_id).data.metrics) - {METRICS_MARKER} == {
        "eval/acc",
        "eval/pass_at_4",
        "time/rollout",
        "rollout/reward_mean",
    }
    tracker.log_iteration(2, {"eval/acc": 0.5})  # a step already logged is not logged again
    assert [m.value for m in tracker.client.get_metric_history(tracker.run_id, "eval/acc") if m.step == 2] == [0.75]


KILLED_LOGGER = """
import os, signal, sys
from pathlib import Path

from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

from coevo.config import TrackingConfig
from coevo.tracking.mlflow_tracker import Tracker

uri, run_dir, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
commit_metrics = SqlAlchemyStore._log_metrics


def killed_after_the_commit(self, run_id, metrics):
    commit_metrics(self, run_id, metrics)  # the store's own transaction for a batch's metrics
    if any(m.key.startswith("eval/") for m in metrics):  # not the params' batches (start logs those with no metrics)
        os.kill(os.getpid(), signal.SIGKILL)  # nothing after it runs: no tag, no next batch


SqlAlchemyStore._log_metrics = killed_after_the_commit
tracker = Tracker(TrackingConfig(mlflow_uri=uri, experiment="test", model_name="m"), Path(run_dir))
tracker.start({"seed": 0}, run_name="test")
tracker.log_iteration(1, {f"eval/m{i}": float(i) for i in range(n)})
"""


@pytest.mark.parametrize(
    "n", [3, 1500]
)  # one batch; two batches (MLflow takes 1000 metrics a request), killed after the first
def test_a_kill_right_after_the_metrics_commit_logs_no_step_twice(cfg, tmp_path, n):
    """A real process logging iteration 1 is SIGKILLed the moment the store has committed a batch's
    metrics; the rerun (same run directory, the run resumed) logs the iteration again, and every
    metric holds exactly one point at step 1."""
    import signal
    import subprocess
    import sys

    run_dir = tmp_path / "run"
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_LOGGER, cfg.mlflow_uri, str(run_dir), str(n)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    rerun = Tracker(cfg, run_dir)
    rerun.start({"seed": 0}, run_name="test")  # the killed process's run, still RUNNING
    rerun.log_iteration(1, {f"eval/m{i}": float(i) for i in range(n)})
    for key in ("eval/m0", f"eval/m{n - 1}"):
        assert [m.step for m in rerun.client.get_metric_history(rerun.run_id, key)] == [1], key


def test_log_dataset_records_inputs_with_the_digest_once(tracker, tmp_path):
    frame = pd.DataFrame(
        {
            "id": ["p0", "p1"],
            "prompt": ["1+1=", "2*3="],
            "answer": ["2", "6"],
            "family": ["add", "mul"],
            "level": [1, 1],
        }
    )
    train, test = tmp_path / "train.parquet", tmp_path / "test.parquet"
    frame.to_parquet(train)
    frame.iloc[:1].to_parquet(test)
    digest = "0123456789abcdef0123456789abcdef.dir"
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        tracker.log_dataset(train, test, digest)
    assert [str(w.message) for w in shown if "Inferred schema" in str(w.message)] == []  # an integer column, no hint
    moved = tmp_path / "moved"
    moved.mkdir()
    train.rename(moved / train.name), test.rename(moved / test.name)
    tracker.log_dataset(
        train, test, digest
    )  # the digest is logged: nothing is read or logged again (the files are gone)
    (moved / train.name).rename(train), (moved / test.name).rename(test)
    inputs = tracker.client.get_run(tracker.run_id).inputs.dataset_inputs
    contexts = {i.dataset.name: {t.key: t.value for t in i.tags}["mlflow.data.context"] for i in inputs}
    assert contexts == {"problems": "train", "problems-test": "test"}
    assert {i.dataset.digest for i in inputs} == {digest}
    train_input = next(i for i in inputs if i.dataset.name == "problems")
    assert str(train) in train_input.dataset.source
    assert json.loads(train_input.dataset.profile)["num_rows"] == 2


# ---- checkpoints and registry ----
def test_log_checkpoint_twice_registers_one_version_and_one_artifact_set(tracker, checkpoints):
    ckpt = checkpoints[0]
    assert tracker.log_checkpoint(1, ckpt, 0.5) == "1"
    assert tracker.log_checkpoint(1, ckpt, 0.5) == "1"
    resumed = Tracker(tracker.cfg, tracker.run_dir)
    resumed.start({"seed": 0}, run_name="test")
    assert resumed.log_checkpoint(1, ckpt, 0.5) == "1"  # after a resume, too
    versions = tracker.client.search_model_versions(f"name = '{MODEL}'")
    assert [str(v.version) for v in versions] == ["1"]
    tags = versions[0].tags
    assert tags[TAG_WEIGHTS] == policy_version(ckpt) and tags[TAG_ITERATION] == "1"
    assert tags[TAG_PATH] == str(ckpt.resolve()) and float(tags[TAG_EVAL]) == 0.5
    assert versions[0].source == f"runs:/{tracker.run_id}/checkpoints/iter_0001"
    assert _artifact_paths(tracker, "") == ["checkpoints"]
    assert _artifact_paths(tracker, "checkpoints") == ["checkpoints/iter_0001"]
    logged = {Path(p).name for p in _artifact_paths(tracker, "checkpoints/iter_0001")}
    assert logged == {p.name for p in ckpt.iterdir()} - {TRAINER_STATE}
    assert TRAINER_STATE not in logged and "coevo.json" in logged


def test_aliases_latest_follows_newest_best_follows_highest_eval(tracker, checkpoints):
    def aliases() -> tuple[str, str]:
        by_alias = tracker.client.get_model_version_by_alias
        return str(by_alias(MODEL, "latest").version), str(by_alias(MODEL, "best").version)

    assert tracker.log_checkpoint(1, checkpoints[0], 0.5) == "1"
    assert aliases() == ("1", "1")
    assert tracker.log_checkpoint(2, checkpoints[1], 0.4) == "2"
    assert aliases() == ("2", "1")
    assert tracker.log_checkpoint(1, checkpoints[0], 0.5) == "1"  # a re-log moves nothing
    assert aliases() == ("2", "1")
    assert tracker.log_checkpoint(3, checkpoints[2], 0.7) == "3"
    assert aliases() == ("3", "3")
    assert tracker.client.get_registered_model(MODEL).aliases == {"best": 3}  # "latest" is MLflow's built-in


def test_checkpoint_without_eval_sets_no_best(tracker, checkpoints):
    tracker.log_checkpoint(1, checkpoints[0], None)
    assert tracker.client.get_registered_model(MODEL).aliases == {}
    assert TAG_EVAL not in tracker.client.get_model_version(MODEL, "1").tags


@pytest.mark.parametrize("uri", [f"models:/{MODEL}@latest", f"models:/{MODEL}@best", f"models:/{MODEL}/2"])
def test_registered_version_loads_with_transformers(tracker, checkpoints, tmp_path, uri, monkeypatch):
    tracker.log_checkpoint(1, checkpoints[0], 0.5)
    tracker.log_checkpoint(2, checkpoints[1], 0.9)
    # models:/ URIs resolve through the global registry URI (download_artifacts' registry_uri is ignored)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracker.uri)
    local = mlflow.artifacts.download_artifacts(uri, dst_path=str(tmp_path / "dl"))
    assert not (Path(local) / TRAINER_STATE).exists()
    loaded = AutoModelForCausalLM.from_pretrained(local, local_files_only=True)
    expected = AutoModelForCausalLM.from_pretrained(checkpoints[1], local_files_only=True)
    for (name, got), (_, want) in zip(loaded.state_dict().items(), expected.state_dict().items(), strict=True):
        assert torch.equal(got, want), name


# ---- co-evolvers and plots ----
def test_log_coevolver_twice_lists_artifacts_once(tracker, tmp_path):
    directory = tmp_path / "coevolver" / "iter_0001"
    save_artifact(directory, "skill_bank", {"skills.json": b"[]"})
    tracker.log_coevolver(1, directory)
    tracker.log_coevolver(1, directory)
    assert _artifact_paths(tracker, "coevolver") == ["coevolver/iter_0001"]
    assert _artifact_paths(tracker, "coevolver/iter_0001") == [
        "coevolver/iter_0001/manifest.json",
        "coevolver/iter_0001/skills.json",
    ]


def test_log_curve_writes_and_logs_the_png(tracker):
    curve = [
        {"iteration": 0, "eval/acc": 0.1, "eval/acc/add": 0.2},
        {"iteration": 1, "eval/acc": 0.3, "eval/acc/add": 0.4},
    ]
    path = tracker.log_curve(curve[:1])
    path = tracker.log_curve(curve)
    assert path == tracker.run_dir / "learning_curve.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert matplotlib.image.imread(path).shape[:2] == (500, 800)
    assert _artifact_paths(tracker, "plots") == ["plots/learning_curve.png"]
    local = mlflow.artifacts.download_artifacts(
        run_id=tracker.run_id, artifact_path="plots/learning_curve.png", tracking_uri=tracker.uri
    )
    assert Path(local).read_bytes() == path.read_bytes()


def test_methods_need_a_started_run(cfg, tmp_path):
    with pytest.raises(RuntimeError, match="start"):
        Tracker(cfg, tmp_path / "run").log_iteration(1, {"eval/acc": 1.0})
