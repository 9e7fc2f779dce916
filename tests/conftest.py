"""Shared fixtures: a tiny config and a tiny bootstrapped policy (real torch + transformers)."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pandas as pd
import pytest
import torch

from coevo.config import Config, load_config

ROOT = Path(__file__).resolve().parents[1]

TINY = {
    "policy": {
        "shape": {"hidden_size": 32, "num_layers": 2, "num_heads": 2, "intermediate_size": 64, "max_position": 64},
        "threads": 1,
    },
    "problems": {"n_train": 120, "n_test": 30, "n_val": 10, "max_digits": 1},
    "bootstrap": {"steps": 30, "time_budget_s": 600, "batch_size": 16, "lr": 1e-2},
    "rollout": {"problems_per_iter": 4, "group_size": 4},
    "optim": {"minibatch_size": 8, "lr": 1e-3},
    "sampling": {"max_new_tokens": 4},
    "eval": {"every": 1, "pass_k": 2},
    "run": {"iterations": 2, "checkpoint_every": 1},
}


def tiny_config(tmp_path: Path, **overrides) -> Config:
    """The project's params.yaml, shrunk to seconds-long runs, with outputs under tmp_path."""
    from coevo.config import deep_merge

    paths = {"run": {"out_dir": str(tmp_path / "run")}, "problems": {"data_dir": str(tmp_path / "data")}}
    return load_config(ROOT / "params.yaml", deep_merge(deep_merge(TINY, paths), overrides))


@pytest.fixture(scope="session")
def prefect_server():
    """Prefect's real local test server (SQLite), shared by the flow and DVC tests."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture
def tiny_cfg(tmp_path) -> Config:
    return tiny_config(tmp_path)


@pytest.fixture(scope="session")
def tiny_policy_dir(tmp_path_factory) -> Path:
    """A bootstrapped tiny checkpoint, built once per session."""
    from coevo.policy.bootstrap import bootstrap_policy
    from coevo.prepare import prepare_problems

    cfg = tiny_config(tmp_path_factory.mktemp("boot"))
    train, _ = prepare_problems(cfg)
    bootstrap_policy(cfg, train)
    return cfg.bootstrap_dir


@pytest.fixture
def loopback():
    """Start an HTTP server (bound to 127.0.0.1) in a thread: `loopback(server)` returns it; every
    server started is shut down and closed at teardown."""
    import threading

    servers = []

    def start(server):
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


class JSONHandler(BaseHTTPRequestHandler):
    """Base of the tests' loopback HTTP servers: JSON replies, no request log on stderr."""

    def _send(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def first_iteration(cfg: Config) -> tuple[dict, dict, str, pd.DataFrame]:
    """Prepare, bootstrap, and iteration 1's rollouts and rewards through the stages:
    (data, bootstrap record, rollouts path, rewards frame)."""
    from coevo import stages
    from schemas.rewards import read_rewards

    stages._POLICIES.clear()
    data = stages.prepare_stage(cfg)
    boot = stages.bootstrap_stage(cfg, data)
    now = stages.in_force(cfg, 1, data)
    rollouts = stages.rollout_stage(cfg, now, boot["checkpoint"])["path"]
    scored = stages.verify_stage(cfg, now, rollouts)["path"]
    return data, boot, rollouts, read_rewards(scored)
