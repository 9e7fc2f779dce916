"""The coevo-train flow on the real Prefect test server, MLflow on SQLite, DuckDB, the tiny model."""

from __future__ import annotations

import json
import logging

import mlflow
import torch
from prefect import flow, task
from safetensors.torch import load_file

import flows
from coevo.layout import RunLayout
from coevo.store.catalog import Catalog
from coevo.store.lineage import verify_lineage
from flows.train import train_flow

from ..conftest import TINY, TINY_PARAMS


def _overrides(tmp_path) -> dict:
    return {
        **TINY,
        "seed": 1,  # seed 0's first two batches of the unseen splits are all zero-variance groups: nothing would move
        "run": {**TINY["run"], "out_dir": str(tmp_path / "run")},
        "problems": {**TINY["problems"], "data_dir": str(tmp_path / "data")},
        "tracking": {"mlflow_uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "experiment": "test", "model_name": "tiny"},
        "pipeline": {"retries": 1, "retry_delay_s": 0.1},
    }


def test_two_iteration_flow_tracks_catalogs_and_resumes_from_cache(prefect_server, tmp_path):
    overrides = _overrides(tmp_path)
    result = train_flow(str(TINY_PARAMS), overrides)
    layout = RunLayout(tmp_path / "run")
    assert result["last_iteration"] == 2

    # parameters moved, and the lineage of the final checkpoint verifies back to the bootstrap
    start, end = (
        load_file(layout.checkpoint(0) / "model.safetensors"),
        load_file(layout.checkpoint(2) / "model.safetensors"),
    )
    assert any(not torch.equal(start[k], end[k]) for k in start)
    assert verify_lineage(layout.checkpoint(2)) == []

    # every rollout and reward of both iterations is in the catalog, exactly once
    per_iter = TINY["rollout"]["problems_per_iter"] * TINY["rollout"]["group_size"]
    with Catalog(tmp_path / "run" / "catalog.duckdb", read_only=True) as catalog:
        counts = catalog.counts()
    assert counts["rollouts"] == counts["rewards"] == 2 * per_iter

    # MLflow: one run with namespaced metrics, registered checkpoints with aliases
    client = mlflow.MlflowClient(overrides["tracking"]["mlflow_uri"])
    runs = client.search_runs([client.get_experiment_by_name("test").experiment_id])
    assert len(runs) == 1
    assert {"verify/pass_rate", "policy/loss", "eval/acc", "time/rollout"} <= set(runs[0].data.metrics)
    latest = client.get_model_version_by_alias("tiny", "latest")
    assert (
        latest.tags["coevo.weights_sha256"]
        == json.loads((layout.checkpoint(2) / "coevo.json").read_text())["weights_sha256"]
    )
    versions = client.search_model_versions("name='tiny'")
    history = [(m.step, m.value) for m in client.get_metric_history(runs[0].info.run_id, "verify/pass_rate")]
    assert [step for step, _ in history] == [1, 2]

    # a re-run of the same flow restores every stage: no file rewritten, no row, version or metric point added
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "run").rglob("*.parquet")}
    stamps[layout.checkpoint(2) / "model.safetensors"] = (layout.checkpoint(2) / "model.safetensors").stat().st_mtime_ns
    train_flow(str(TINY_PARAMS), overrides)
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items())
    with Catalog(tmp_path / "run" / "catalog.duckdb", read_only=True) as catalog:
        assert catalog.counts() == counts
    assert len(client.search_model_versions("name='tiny'")) == len(versions)
    assert len(client.search_runs([runs[0].info.experiment_id])) == 1
    assert [(m.step, m.value) for m in client.get_metric_history(runs[0].info.run_id, "verify/pass_rate")] == history


def test_nightly_run_continues_from_the_latest_checkpoint(prefect_server, tmp_path):
    overrides = _overrides(tmp_path)
    train_flow(str(TINY_PARAMS), overrides)
    nightly = train_flow(str(TINY_PARAMS), overrides, continue_latest=True)
    assert (nightly["first_iteration"], nightly["last_iteration"]) == (3, 4)
    layout = RunLayout(tmp_path / "run")
    record = json.loads((layout.checkpoint(3) / "coevo.json").read_text())["lineage"]
    assert (
        record["parent"]["weights_sha256"]
        == json.loads((layout.checkpoint(2) / "coevo.json").read_text())["weights_sha256"]
    )
    assert record["coevolver"]["path"].endswith("coevolver/iter_0003")
    assert verify_lineage(layout.checkpoint(4)) == []
    with Catalog(tmp_path / "run" / "catalog.duckdb", read_only=True) as catalog:
        assert sorted(catalog.pass_rate_by_family()["iteration"].unique()) == [1, 2, 3, 4]
    client = mlflow.MlflowClient(overrides["tracking"]["mlflow_uri"])
    assert len(client.search_runs([client.get_experiment_by_name("test").experiment_id])) == 2  # one run per flow run


def test_nightly_deployment_schedule_and_parameters(tmp_path):
    from coevo.config import load_config
    from flows.train import nightly_deployment

    cfg = load_config(TINY_PARAMS)
    deployment = nightly_deployment(str(TINY_PARAMS), cfg)
    assert deployment.name == cfg.pipeline.deployment_name
    assert [s.schedule.cron for s in deployment.schedules] == [cfg.pipeline.schedule_cron]
    assert deployment.parameters["continue_latest"] is True


def test_completed_task_runs_log_nothing_but_retries_and_failures_do(prefect_server):
    """flows.CompletedTaskRuns drops only Prefect's "Finished in state Completed()" line."""
    messages: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())
    logger = logging.getLogger("prefect.task_runs")
    logger.addHandler(handler)
    attempts = []

    @task(retries=1, retry_delay_seconds=0)
    def flaky() -> int:
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("transient")
        return 1

    @task
    def failing() -> None:
        raise ValueError("broken")

    @flow
    def stages() -> None:
        flaky()
        failing(return_state=True)

    try:
        stages()
    finally:
        logger.removeHandler(handler)
    assert any(isinstance(f, flows.CompletedTaskRuns) for f in logger.filters)
    assert flows.COMPLETED not in messages
    assert any("Retry 1/1" in m for m in messages)
    assert any(m.startswith("Finished in state Failed(") for m in messages)
