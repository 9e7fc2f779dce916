"""Shared fixtures: a tiny config and a tiny bootstrapped policy (real torch + transformers); and how
the suite is split over pytest-xdist workers (`-n 2 --dist loadgroup`, pyproject.toml's addopts)."""

from __future__ import annotations

import json
import os
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pandas as pd
import pytest
import torch

from coevo.config import Config, load_config
from coevo.records import Bootstrapped, Splits

ROOT = Path(__file__).resolve().parents[1]
TINY_PARAMS = ROOT / "examples" / "tiny.yaml"  # the tiny character-level policy's params (params.yaml trains SmolLM2)

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


# Test files whose tests must not run beside each other's on two workers: each set is one xdist group,
# run in turn by one worker. vLLM's CPU server binds its OpenMP threads to the cores, and two of them
# starve each other; two local Ray clusters each want both cores; the sandbox's verdicts ride on CPU and
# wall limits of a few seconds, and its jobs (a fork bomb among them) share the sandbox user's
# RLIMIT_NPROC process count (coevo/sandbox/__init__.py). A test file named in no group is its own
# group (as `--dist loadfile`): its module-scoped fixtures (a bootstrapped policy, a Ray cluster, a
# vLLM server) are built once.
XDIST_GROUPS = {
    "vllm": (
        "rollout/test_vllm.py",
        "rollout/test_vllm_json.py",
        "rollout/test_vllm_episodes.py",
        "flows/test_vllm_flow.py",
        "coevolvers/test_memory_served.py",
    ),
    "ray": ("flows/test_ray.py", "test_deploy_rehearsal.py"),
    "sandbox": ("sandbox/",),
}
# The longest groups (minutes each on a 2-core machine) start first, so that no worker is left running
# one of them alone at the end while the other idles; the rest keep their collection order.
LONGEST_FIRST = ("vllm", "test_dvc.py", "ray", "flows/test_resume.py", "test_faults_servers.py")


def xdist_group(nodeid: str) -> str:
    """The xdist group of a test (its node id: tests/FILE::NAME)."""
    relative = nodeid.split("::", 1)[0].removeprefix("tests/")
    for group, members in XDIST_GROUPS.items():
        if any(relative == m or (m.endswith("/") and relative.startswith(m)) for m in members):
            return group
    return relative


def pytest_configure(config: pytest.Config) -> None:
    """In an xdist worker: each worker's share of the cores for the OpenMP pools of the processes its
    tests start (torch in the worker itself: `_one_thread`), unless exported; and the environment a
    serial run's tests see. pytest imports readline at start, and GNU readline exports LINES and
    COLUMNS into the C environment, which the worker processes inherit into os.environ: a rich
    console made at import would then be 80 columns wide whatever COLUMNS a test sets later."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return
    workers = int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // workers)))
    for name in ("LINES", "COLUMNS"):
        os.environ.pop(name, None)


@pytest.hookimpl(optionalhook=True)  # xdist's hook: unknown to pytest without the plugin (-p no:xdist)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """`--dist loadgroup`, the groups being XDIST_GROUPS and otherwise the test files. (xdist 3.8's own
    loadgroup reads `xdist_group` marks by suffixing `item._nodeid`, which pytest 9 no longer reads.)"""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid)

    return GroupScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In an xdist worker, the longest groups first (every worker collects, and sorts, alike)."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return

    def rank(item: pytest.Item) -> int:
        group = xdist_group(item.nodeid)
        return LONGEST_FIRST.index(group) if group in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)


def tiny_config(tmp_path: Path, **overrides) -> Config:
    """The tiny policy's params (examples/tiny.yaml), shrunk to seconds-long runs, with outputs under
    tmp_path (an error in a key set here names that file, as the overrides stand for its own keys)."""
    from coevo.config import deep_merge

    paths = {"run": {"out_dir": str(tmp_path / "run")}, "problems": {"data_dir": str(tmp_path / "data")}}
    return load_config(TINY_PARAMS, deep_merge(deep_merge(TINY, paths), overrides), overrides_label=None)


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
    from coevo.model.bootstrap import bootstrap_policy
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


def first_iteration(cfg: Config) -> tuple[Splits, Bootstrapped, str, pd.DataFrame]:
    """Prepare, bootstrap, and iteration 1's rollouts and rewards through the stages:
    (data, bootstrap record, rollouts path, rewards frame)."""
    from coevo.model.cache import forget_policies
    from coevo.stages.in_force import in_force
    from coevo.stages.prepare import bootstrap_stage, prepare_stage
    from coevo.stages.rollout import rollout_stage
    from coevo.stages.verify import verify_stage
    from schemas.rewards import read_rewards

    forget_policies()
    data = prepare_stage(cfg)
    boot = bootstrap_stage(cfg, data)
    now = in_force(cfg, 1, data)
    rollouts = rollout_stage(cfg, now, boot.checkpoint.path).path
    scored = verify_stage(cfg, now, rollouts).path
    return data, boot, rollouts, read_rewards(scored)
