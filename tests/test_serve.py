"""`coevo serve` serves the nightly deployment: a real `coevo serve` process against the real Prefect
test server (on loopback), a run of the deployment triggered through the API, and that flow run
executed by the serving process to Completed, with its checkpoint on disk."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml
from prefect.client.orchestration import get_client
from prefect.exceptions import ObjectNotFound
from prefect.settings import PREFECT_API_URL

from coevo.layout import RunLayout
from coevo.store.lineage import verify_lineage

from .conftest import ROOT, TINY, TINY_PARAMS

DEPLOYMENT = "coevo-serve-test"


def _params(tmp_path) -> str:
    raw = yaml.safe_load(TINY_PARAMS.read_text())
    overrides = {
        **TINY,
        "run": {**TINY["run"], "iterations": 1, "out_dir": str(tmp_path / "run")},
        "problems": {**TINY["problems"], "data_dir": str(tmp_path / "data")},
        "tracking": {"mlflow_uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "experiment": "serve", "model_name": "tiny"},
        "pipeline": {"deployment_name": DEPLOYMENT},
    }
    for section, values in overrides.items():
        raw[section].update(values)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def _until(condition, process: subprocess.Popen, what: str, seconds: float = 300):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(
                f"`coevo serve` exited {process.returncode} while waiting for {what}: {process.stdout.read()[-3000:]}"
            )
        found = condition()
        if found:
            return found
        time.sleep(0.5)
    pytest.fail(f"no {what} after {seconds:.0f}s")


def _deployment(client):
    try:
        return client.read_deployment_by_name(f"coevo-train/{DEPLOYMENT}")
    except ObjectNotFound:
        return None


def test_serve_runs_a_triggered_run_of_the_deployment(prefect_server, tmp_path):
    params = _params(tmp_path)
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(), "PREFECT_RUNNER_POLL_FREQUENCY": "1"}
    env.pop("COEVO_PAUSE", None)
    command = [sys.executable, "-m", "coevo.cli", "serve", "--params", params]
    serving = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        with get_client(sync_client=True) as client:
            deployment = _until(lambda: _deployment(client), serving, f"deployment coevo-train/{DEPLOYMENT}", 120)
            assert deployment.parameters["continue_latest"] is True
            assert deployment.parameters["params_file"] == str(tmp_path / "params.yaml")
            cron = yaml.safe_load(TINY_PARAMS.read_text())["pipeline"]["schedule_cron"]
            assert [s.schedule.cron for s in deployment.schedules] == [cron]
            run = client.create_flow_run_from_deployment(deployment.id)
            final = _until(
                lambda: (s := client.read_flow_run(run.id).state) and s.is_final() and s, serving, "finished flow run"
            )
            assert final.is_completed(), f"{final.name}: {final.message}"
    finally:
        os.killpg(serving.pid, signal.SIGTERM)
        try:
            serving.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(serving.pid, signal.SIGKILL)
            serving.wait()

    layout = RunLayout(tmp_path / "run")
    summary = json.loads((layout.root / "summary.json").read_text())
    assert (summary["first_iteration"], summary["last_iteration"]) == (1, 1)
    assert verify_lineage(layout.checkpoint(1)) == []
