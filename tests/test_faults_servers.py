"""Fault matrix (issue 17, item 3): the servers a run talks to fail under it, on the real components.

- The MLflow tracking server (a real `mlflow server` process on loopback: SQLite store, served
  artifacts in a temp dir) SIGKILLed between two requests of one iteration's logging and restarted
  on the same port and store. Behaviour chosen: the logging call fails (after MLflow's own HTTP
  retries, about 4 minutes by default; none here) with an error naming the server, the flow stops,
  and the same command run again resumes the same MLflow run and logs what was missing, nothing twice.
- The Prefect API server (a real `prefect server start`) SIGKILLed and restarted on the same port and
  database while the flow is frozen (SIGSTOP) inside a stage: the flow goes on and completes, and a
  rerun restores every stage from the result cache, ending with the weights of a run alone. Not
  tested here: a flow that calls the API while the server is still down (Prefect's client retries;
  what the flow does after them is not checked).
- A co-evolver endpoint (skill writer, memory reflector) that is down, slow past its timeout or
  answers garbage: retried with backoff, then the co-evolution stage fails with EndpointError naming
  the URL, and no co-evolver version (nor report) is written for that iteration. The endpoint is a
  real HTTP server on loopback (the real openai client talks to it); "down" is a closed port.
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from coevo.coevolvers import build_coevolver
from coevo.coevolvers.writers import ATTEMPTS, ChatEndpoint, EndpointError
from coevo.layout import RunLayout
from coevo.stages.coevolve import coevolve_stage
from coevo.stages.in_force import in_force
from coevo.stages.prepare import prepare_stage
from schemas.rewards import write_rewards
from schemas.rollouts import write_rollouts

from .conftest import TINY_PARAMS, tiny_config

MLFLOW = Path(sys.executable).with_name("mlflow")
PREFECT = Path(sys.executable).with_name("prefect")
STARTUP_S = 180  # `mlflow server` starts in ~20 s on a loaded 2-core machine, `prefect server start` in ~8 s


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def closed_port_url() -> str:
    return f"http://127.0.0.1:{free_port()}/v1"  # nobody listens there once the probe socket is closed


# ---- MLflow tracking server ----


class MlflowServer:
    """`mlflow server` on 127.0.0.1:port, SQLite store and artifacts under root; SIGKILL and restart."""

    def __init__(self, root: Path, port: int):
        self.root, self.port, self.process = root, port, None
        self.url = f"http://127.0.0.1:{port}"

    def start(self) -> None:
        command = [str(MLFLOW), "server", "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"]
        command += [
            "--backend-store-uri",
            f"sqlite:///{self.root / 'mlflow.db'}",
            "--artifacts-destination",
            str(self.root / "artifacts"),
        ]
        env = {
            **os.environ,
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        }  # no job workers to start (or to orphan on SIGKILL)
        log = (self.root / "server.log").open("a")
        self.process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"mlflow server exited with {self.process.returncode}; see {self.root / 'server.log'}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2):
                    return
            except OSError:
                time.sleep(0.2)
        pytest.fail(f"mlflow server not up after {STARTUP_S}s; see {self.root / 'server.log'}")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)  # the CLI and its uvicorn process together
            self.process.wait()


@pytest.fixture
def mlflow_server(tmp_path, monkeypatch) -> Iterator[MlflowServer]:
    import mlflow

    root = tmp_path / "mlflow-server"
    root.mkdir()
    mlflow.MlflowClient(
        f"sqlite:///{root / 'mlflow.db'}"
    ).search_experiments()  # migrate the store here: the server starts faster
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # fail at once rather than after ~4 minutes of retries
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
    server = MlflowServer(root, free_port())
    server.start()
    yield server
    server.kill()


def test_mlflow_server_killed_mid_iteration_then_rerun_logs_the_rest_once(mlflow_server, tiny_policy_dir, tmp_path):
    import mlflow
    from mlflow.exceptions import MlflowException

    from coevo.tracking.mlflow_tracker import Tracker
    from tasks.tracking import FlowTracking

    cfg = tiny_config(
        tmp_path, tracking={"mlflow_uri": mlflow_server.url, "experiment": "faults", "model_name": "tiny"}
    )
    results, layout = tmp_path / "results", RunLayout(cfg.run.out_dir)
    checkpoints = _checkpoints(tiny_policy_dir, layout)
    build_coevolver(cfg.coevolver_list[0], cfg.seed).save(layout.coevolver(1))
    metrics = {it: {"eval/acc": 0.1 * (it + 1), "eval/pass@2": 0.2 * it} for it in (0, 1, 2)}
    calls = [
        (0, metrics[0], None, None, False),
        (1, metrics[1], {"path": str(checkpoints[0])}, {"path": str(layout.coevolver(1))}, False),
        (2, metrics[2], {"path": str(checkpoints[1])}, {"path": str(layout.coevolver(1))}, True),
    ]

    track = FlowTracking(cfg, results)  # the first flow run
    for it, m, checkpoint, coevolver, final in calls[:2]:
        track(it, m, checkpoint, coevolver, final=final)
    # iteration 2: its metrics request went through, then the server died before the checkpoint's
    partial = Tracker(cfg.tracking, layout.root)
    partial.start(cfg.model_dump(mode="json"), run_name="run")  # resumes the same (unfinished) run
    partial.log_iteration(2, metrics[2])
    mlflow_server.kill()
    with pytest.raises(MlflowException, match=rf"127.0.0.1:{mlflow_server.port}"):
        track(*calls[2][:4], final=True)

    mlflow_server.start()  # same port, same store
    rerun = FlowTracking(cfg, results)  # the same command again: a new flow run, a new process
    for it, m, checkpoint, coevolver, final in calls:
        rerun(it, m, checkpoint, coevolver, final=final)

    client = mlflow.MlflowClient(mlflow_server.url)
    [run] = client.search_runs([client.get_experiment_by_name("faults").experiment_id])
    assert run.info.status == "FINISHED"  # the rerun continued the killed flow's MLflow run and ended it
    for key in ("eval/acc", "eval/pass_at_2"):
        assert sorted(m.step for m in client.get_metric_history(run.info.run_id, key)) == [
            0,
            1,
            2,
        ]  # one point per iteration
    versions = client.search_model_versions("name='tiny'")
    assert sorted(int(v.tags["coevo.iteration"]) for v in versions) == [1, 2]  # each checkpoint registered once
    assert [a.path for a in client.list_artifacts(run.info.run_id, "checkpoints")] == [
        "checkpoints/iter_0001",
        "checkpoints/iter_0002",
    ]


def _checkpoints(tiny_policy_dir: Path, layout: RunLayout) -> list[Path]:
    """Checkpoints 1 and 2: the tiny bootstrap's weights, nudged (distinct weights hashes)."""
    import torch

    from coevo.model.checkpoint import load_policy, save_checkpoint

    policy = load_policy(tiny_policy_dir, device="cpu")
    found = []
    for it in (1, 2):
        with torch.no_grad():
            next(policy.model.parameters()).add_(0.01)
        save_checkpoint(layout.checkpoint(it), policy, {"iteration": it})
        found.append(layout.checkpoint(it))
    return found


# ---- co-evolver endpoints ----

COMPLETION = {"id": "c", "object": "chat.completion", "created": 0, "model": "writer"}
GARBAGE = {  # name -> (content type, body) of a 200 reply
    "not_json": ("application/json", b"<html>502 Bad Gateway</html>"),
    "html": ("text/html", b"<html>login required</html>"),
    "wrong_shape": ("application/json", json.dumps({"result": "Multiply tens first."}).encode()),
    "no_choices": ("application/json", json.dumps({**COMPLETION, "choices": []}).encode()),
    "empty_text": (
        "application/json",
        json.dumps(
            {
                **COMPLETION,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "  \n"}, "finish_reason": "stop"}],
            }
        ).encode(),
    ),
}
REASONS = {
    "not_json": "not JSON",
    "html": "not a chat completion",
    "wrong_shape": "not a chat completion",
    "no_choices": "not a chat completion",
    "empty_text": "no text",
}


class Endpoint(http.server.ThreadingHTTPServer):
    """A chat endpoint on loopback that answers every POST with `reply` after `delay_s`, counting hits."""

    daemon_threads = True

    def __init__(self, reply: tuple[str, bytes], delay_s: float = 0.0):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.reply, self.delay_s, self.hits = reply, delay_s, 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Endpoint

    def do_POST(self):  # noqa: N802 (http.server's name)
        self.server.hits += 1
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        time.sleep(self.server.delay_s)
        content_type, body = self.server.reply
        try:
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:  # the client gave up (timeout) and closed the connection
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def serve(loopback):
    """Start a Endpoint on loopback (shut down at teardown)."""

    def start(reply: tuple[str, bytes], delay_s: float = 0.0) -> Endpoint:
        return loopback(Endpoint(reply, delay_s))

    return start


@pytest.mark.parametrize("garbage", sorted(GARBAGE))
def test_garbage_reply_is_retried_then_fails_naming_the_endpoint(serve, garbage):
    server = serve(GARBAGE[garbage])
    endpoint = ChatEndpoint(server.base_url, "writer", "EMPTY", timeout_s=5, backoff_s=0.01)
    with pytest.raises(
        EndpointError,
        match=(
            rf"request to {server.base_url} \(model 'writer'\) failed after {ATTEMPTS} "
            rf"attempt\(s\).*{REASONS[garbage]}"
        ),
    ):
        endpoint.ask("system", "write a skill")
    assert server.hits == ATTEMPTS


def test_slow_endpoint_times_out_each_attempt_then_fails_naming_it(serve):
    good = json.dumps(
        {
            **COMPLETION,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "late"}, "finish_reason": "stop"}],
        }
    )
    server = serve(("application/json", good.encode()), delay_s=2.0)
    endpoint = ChatEndpoint(server.base_url, "writer", "EMPTY", timeout_s=0.2, backoff_s=0.01)
    with pytest.raises(
        EndpointError, match=rf"request to {server.base_url} .*failed after {ATTEMPTS} attempt\(s\).*timed out"
    ):
        endpoint.ask("system", "write a skill")
    deadline = time.monotonic() + 10  # the last attempt's handler may start only after the client gave up on it
    while server.hits < ATTEMPTS and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.hits == ATTEMPTS


def _iteration_one(tmp_path, coevolver: dict) -> tuple:
    """A tiny run's problems, co-evolver version 0 and iteration 1's rollouts and rewards (two of each
    problem's four completions right), without the policy: only the co-evolution stage runs."""
    cfg = tiny_config(tmp_path, coevolver=coevolver)
    data = prepare_stage(cfg)
    layout = RunLayout(cfg.run.out_dir)
    build_coevolver(cfg.coevolver_list[0], cfg.seed).save(layout.coevolver(0))
    train = pd.read_parquet(data.train.path).head(3)
    rollouts, rewards = [], []
    for row in train.itertuples():
        for k, right in enumerate([True, True, False, False]):
            rid = f"0001-{row.id}-{k}"
            completion = str(row.answer) if right else "0"
            rollouts.append(
                {
                    "rollout_id": rid,
                    "iteration": 1,
                    "problem_id": row.id,
                    "family": row.family,
                    "variant": "solo",
                    "probe_skill": "",
                    "skills": [],
                    "question": row.prompt,
                    "prompt": row.prompt,
                    "completion": completion,
                    "prompt_ids": [1, 2],
                    "completion_ids": [3],
                    "sampling_logprobs": [-0.5],
                    "finished": True,
                    "policy_version": "test",
                }
            )
            rewards.append(
                {
                    "rollout_id": rid,
                    "iteration": 1,
                    "problem_id": row.id,
                    "reward": float(right),
                    "passed": right,
                    "verifier": "test",
                    "details": "",
                    "components": "{}",
                }
            )
    write_rollouts(layout.rollouts(1), pd.DataFrame(rollouts))
    write_rewards(layout.rewards(1), pd.DataFrame(rewards))
    return cfg, layout, data


@pytest.mark.parametrize("who", ["skill_writer", "memory_reflector"])
@pytest.mark.parametrize("fault", ["down", "garbage"])
def test_coevolution_stage_fails_without_writing_a_version(serve, tmp_path, who, fault):
    base_url = closed_port_url() if fault == "down" else serve(GARBAGE["wrong_shape"]).base_url
    writer = {"base_url": base_url, "model": "writer", "timeout_s": 2}
    if who == "skill_writer":
        coevolver = {"kind": "skill_bank", "writer": {**writer, "kind": "openai"}}
    else:
        coevolver = {"kind": "memory", "writer": writer, "memory": {"reflector": "openai", "levels": [2]}}
    cfg, layout, data = _iteration_one(tmp_path, coevolver)
    with pytest.raises(
        EndpointError, match=rf"request to {base_url} \(model 'writer'\) failed after {ATTEMPTS} attempt\(s\)"
    ):
        coevolve_stage(cfg, in_force(cfg, 1, data), str(layout.rollouts(1)), str(layout.rewards(1)), data.test.path)
    assert not layout.coevolver(1).exists()
    assert not layout.report(1).exists()
    assert not list(layout.root.glob("coevolver/.*"))  # no temporary half-written version either


# ---- Prefect API server ----


class PrefectServer:
    """`prefect server start` on 127.0.0.1:port with its SQLite database under root; SIGKILL and restart."""

    def __init__(self, root: Path, port: int):
        self.root, self.port, self.process = root, port, None
        self.api = f"http://127.0.0.1:{port}/api"

    def start(self) -> None:
        command = [str(PREFECT), "server", "start", "--host", "127.0.0.1", "--port", str(self.port), "--no-services"]
        env = {
            **os.environ,
            "PREFECT_HOME": str(self.root),
            "PREFECT_UI_ENABLED": "false",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        }
        env.pop("PREFECT_API_URL", None)
        log = (self.root / "server.log").open("a")
        self.process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"prefect server exited with {self.process.returncode}; see {self.root / 'server.log'}")
            try:
                with urllib.request.urlopen(f"{self.api}/health", timeout=2):
                    return
            except OSError:
                time.sleep(0.2)
        pytest.fail(f"prefect server not up after {STARTUP_S}s; see {self.root / 'server.log'}")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def _flow_params(tmp_path: Path) -> str:
    import yaml

    from .conftest import TINY

    raw = yaml.safe_load(TINY_PARAMS.read_text())
    overrides = {
        **TINY,
        "run": {**TINY["run"], "iterations": 2, "out_dir": str(tmp_path / "run")},
        "problems": {**TINY["problems"], "data_dir": str(tmp_path / "data")},
        "tracking": {"mlflow_uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "experiment": "faults", "model_name": "tiny"},
        "pipeline": {"retries": 0, "retry_delay_s": 0.1},
    }
    for section, values in overrides.items():
        raw[section].update(values)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def _train(params: str, api: str, pause: str | None = None) -> subprocess.Popen:
    env = {**os.environ, "PREFECT_API_URL": api}
    env.pop("COEVO_PAUSE", None)
    if pause:
        env["COEVO_PAUSE"] = pause
    command = [sys.executable, "-m", "coevo.cli", "train", "--params", params, "--json"]
    return subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )


def _weights(run: Path) -> dict[str, str]:
    return {
        p.parent.name: json.loads(p.read_text())["weights_sha256"]
        for p in sorted(run.glob("checkpoints/iter_*/coevo.json"))
    }


def _outputs(run: Path) -> dict[str, tuple[int, int]]:
    """(inode, mtime_ns) of the stage outputs: a stage run again replaces its output by a rename."""
    found = [
        *run.glob("rollouts/*.parquet"),
        *run.glob("rewards/*.parquet"),
        *run.glob("reports/*.json"),
        *run.glob("evals/*.json"),
    ]
    found += [*run.glob("coevolver/iter_*/manifest.json"), *run.glob("checkpoints/iter_*/coevo.json")]
    return {p.relative_to(run).as_posix(): (p.stat().st_ino, p.stat().st_mtime_ns) for p in found}


def test_prefect_server_restarted_mid_run_then_rerun_restores_every_stage(tmp_path):
    """The flow, frozen (SIGSTOP) inside iteration 2's co-evolution stage while its API server is
    SIGKILLed and restarted on the same port and database, goes on and completes; the same command
    run again restores every stage from the result cache and ends with the weights of a run alone."""
    from coevo.driver import train

    root = tmp_path / "prefect"
    root.mkdir()
    server = PrefectServer(root, free_port())
    server.start()
    try:
        (tmp_path / "flow").mkdir()
        params = _flow_params(tmp_path / "flow")
        flow = _train(params, server.api, pause="coevolve:2:1")
        for line in flow.stderr:
            if line.strip() == "coevo-pause coevolve 2":
                os.killpg(flow.pid, signal.SIGSTOP)  # frozen while its API server goes away and comes back
                break
        else:
            pytest.fail(f"the flow ended without reaching the pause: exit {flow.wait()}")
        server.kill()
        server.start()
        os.killpg(flow.pid, signal.SIGCONT)
        _, err = flow.communicate(timeout=600)
        assert flow.returncode == 0, err[-3000:]  # the flow went on against the restarted server
        run = tmp_path / "flow" / "run"
        done = _outputs(run)
        rerun = _train(params, server.api)
        _, err = rerun.communicate(timeout=600)
        assert rerun.returncode == 0, err[-3000:]
    finally:
        server.kill()
    assert _outputs(run) == done  # every stage restored from the Prefect result cache, none recomputed
    alone = tiny_config(tmp_path / "alone", run={"iterations": 2, "checkpoint_every": 1})
    train(alone)  # the plain driver computes what the flow does (tests/flows/test_plain_equals_flow.py)
    assert _weights(run) == _weights(alone.run.out_dir) and len(_weights(run)) == 2
