"""The cluster deployment of docs/deploy.md rehearsed on one machine: a Ray head
(`ray start --head`, 2 worker CPUs: 2 Ray worker processes), a `prefect server start` and an
`mlflow server` (SQL backend store, artifact store) started as separate processes on free loopback
ports, and `coevo train` (1 iteration, 2 shards on the Ray cluster) run against them with
PREFECT_API_URL, tracking.mlflow_uri and pipeline.ray.address pointing at them. The run's MLflow run
(with its checkpoint artifacts in the artifact store) and its Prefect flow run must exist on those
servers. Prefect and MLflow listen on loopback; Ray's GCS on this machine's own address (Ray
resolves 127.0.0.1 in an address to it: ray/_private/services.py resolve_ip_for_localhost). Every
process started is torn down (its own process group, by id). Select it with
`pytest -m deploy`."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path

import pytest
import yaml

from coevo.config import deep_merge

from .conftest import ROOT, TINY, TINY_PARAMS

pytest.importorskip("ray")
BIN = Path(sys.executable).parent
pytestmark = pytest.mark.deploy


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


Servers = list[tuple[subprocess.Popen, int]]  # each process and the signal that stops it


def started(
    servers: Servers, args: list[str], env: dict, log: Path, stop_signal: int = signal.SIGTERM
) -> subprocess.Popen:
    """A server process in its own process group, added to `servers` (stopped together, `stop`)."""
    proc = subprocess.Popen(args, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    servers.append((proc, stop_signal))
    return proc


def stop(servers: Servers) -> None:
    """Every process group gets its stop signal at once; SIGKILL for the groups still there after 15 s."""
    for kill, wait in ((False, 15), (True, 5)):
        for proc, stop_signal in servers:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL if kill else stop_signal)
        deadline = time.monotonic() + wait
        for proc, _ in servers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        if all(proc.poll() is not None for proc, _ in servers):
            return


def wait_http(url: str, proc: subprocess.Popen, log: Path, deadline_s: float = 120) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        assert proc.poll() is None, f"{proc.args[0]} exited: {log.read_text()[-2000:]}"
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"{url} not up after {deadline_s}s: {log.read_text()[-2000:]}")


def test_the_flow_runs_through_separate_prefect_mlflow_and_ray_processes(tmp_path):
    ray_port, prefect_port, mlflow_port = free_port(), free_port(), free_port()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "RAY_AUTH_MODE": "token",
    }  # Ray's token auth (~/.ray/auth_token): the head and the flow's driver both use it
    env.pop("PREFECT_API_URL", None)
    prefect_url, mlflow_url = f"http://127.0.0.1:{prefect_port}/api", f"http://127.0.0.1:{mlflow_port}"
    with ExitStack() as stack:
        ray_tmp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
        stack.callback(shutil.rmtree, ray_tmp, ignore_errors=True)
        servers: Servers = []
        stack.callback(stop, servers)  # every server started below, stopped side by side
        ray_head = started(
            servers,
            [
                str(BIN / "ray"),
                "start",
                "--head",
                "--block",
                f"--port={ray_port}",
                "--num-cpus=2",
                "--object-store-memory=100000000",
                "--include-dashboard=false",
                f"--temp-dir={ray_tmp}",
            ],
            env,
            tmp_path / "ray.log",
            signal.SIGINT,
        )  # Ctrl-C: `ray start --block` cleans up on it (it ignored SIGTERM for 15 s)
        prefect = started(
            servers,
            [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(prefect_port)],
            env,
            tmp_path / "prefect.log",
        )
        mlflow = started(
            servers,
            [
                str(BIN / "mlflow"),
                "server",
                "--backend-store-uri",
                f"sqlite:///{tmp_path / 'mlflow.db'}",
                "--artifacts-destination",
                str(tmp_path / "artifacts"),
                "--host",
                "127.0.0.1",
                "--port",
                str(mlflow_port),
                "--workers",
                "1",
            ],
            env,
            tmp_path / "mlflow.log",
        )
        wait_http(f"{prefect_url}/health", prefect, tmp_path / "prefect.log")
        wait_http(f"{mlflow_url}/health", mlflow, tmp_path / "mlflow.log")
        assert ray_head.poll() is None, (tmp_path / "ray.log").read_text()

        own = {
            "run": {"out_dir": str(tmp_path / "run"), "iterations": 1},
            "problems": {"data_dir": str(tmp_path / "data")},
            "tracking": {"mlflow_uri": mlflow_url, "experiment": "deploy-rehearsal"},
            "pipeline": {"task_runner": "ray", "shards": 2, "ray": {"address": f"127.0.0.1:{ray_port}"}},
        }
        params = tmp_path / "params.yaml"
        params.write_text(yaml.safe_dump(deep_merge(deep_merge(yaml.safe_load(TINY_PARAMS.read_text()), TINY), own)))
        done = subprocess.run(
            [str(BIN / "coevo"), "train", "--params", str(params), "--json"],
            cwd=tmp_path,
            env={**env, "PREFECT_API_URL": prefect_url},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert_tracked(mlflow_url, prefect_url)


def assert_tracked(mlflow_url: str, prefect_url: str) -> None:
    """The run is on the MLflow server (checkpoint in its artifact store) and the flow run on the Prefect server."""
    from mlflow.tracking import MlflowClient
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName
    from prefect.settings import PREFECT_API_URL, temporary_settings

    client = MlflowClient(tracking_uri=mlflow_url)
    runs = client.search_runs([client.get_experiment_by_name("deploy-rehearsal").experiment_id])
    assert len(runs) == 1 and runs[0].info.status == "FINISHED", runs
    assert "policy/steps" in runs[0].data.metrics or any(k.startswith("verify/") for k in runs[0].data.metrics)
    assert client.list_artifacts(runs[0].info.run_id), "no artifacts in the server's artifact store"
    with temporary_settings({PREFECT_API_URL: prefect_url}), get_client(sync_client=True) as prefect:
        flow_runs = prefect.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["coevo-train"])))
        assert [r.state.name for r in flow_runs] == ["Completed"], flow_runs
        # Prefect 3 records task runs from the events the flow emitted, asynchronously (the server's
        # task run recorder): the flow run can be Completed before its last task runs are stored.
        wanted, end = {"rollout", "verify", "merge", "policy-update"}, time.monotonic() + 60
        while (
            not wanted <= (names := {t.name.rsplit("-", 1)[0] for t in prefect.read_task_runs()})
            and time.monotonic() < end
        ):
            time.sleep(1)
        assert wanted <= names, names
