"""Rollout and verification on Ray workers (pipeline.task_runner: ray, flows/fanout.py), on one local
Ray cluster of 2 worker processes (num_cpus=1 each, 100 MB object store, no dashboard), loopback only:

- 2 iterations with pipeline.shards: 2 through Prefect's RayTaskRunner, with a Ray worker process
  SIGKILLed in the middle of a rollout shard (paused there by coevo/faults.py) and its task re-run
  (pipeline.retries), give the same rollouts, rewards, catalog rows and checkpoint weights as the
  local runner with the same shards, and the plain driver (`coevo train --plain`) gives the same as
  the flow;
- the default (local) flow run neither imports Ray nor starts it: tests/flows/test_resume.py, on the
  last of its flow processes (`python -X importtime`).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import duckdb
import pytest

from coevo.config import Config, deep_merge, load_config
from coevo.driver import train as plain_train
from coevo.io import hash_file
from coevo.layout import RunLayout
from coevo.model.checkpoint import read_meta
from flows.train import train_flow

from ..conftest import ROOT, TINY, TINY_PARAMS

ray = pytest.importorskip("ray")
SHARDS = {"pipeline": {"shards": 2, "retries": 2, "retry_delay_s": 0.1}}


def overrides(tmp: Path, name: str, runner: str) -> dict:
    own = {
        "run": {"out_dir": str(tmp / name / "run")},
        "problems": {"data_dir": str(tmp / name / "data")},
        "tracking": {"mlflow_uri": f"sqlite:///{tmp / name / 'mlflow.db'}", "experiment": f"ray-{name}"},
        "pipeline": {"task_runner": runner},
        "bootstrap": {**TINY["bootstrap"], "steps": 100},  # a warm start that passes some samples, so the policy moves
    }
    return deep_merge(deep_merge(TINY, SHARDS), own)


def outcome(cfg: Config) -> dict:
    """What a run produced: the sha256 of every table and checkpoint, and (flow runs) the catalog rows."""
    layout, its = RunLayout(cfg.run.out_dir), range(1, cfg.run.iterations + 1)
    found = {
        "rollouts": [hash_file(layout.rollouts(it)) for it in its],
        "rewards": [hash_file(layout.rewards(it)) for it in its],
        "weights": [read_meta(layout.checkpoint(it))["weights_sha256"] for it in (0, *its)],  # 0: the bootstrap
    }
    if cfg.catalog_path.is_file():
        with duckdb.connect(str(cfg.catalog_path), read_only=True) as db:
            found["catalog"] = {
                t: db.sql(f"select * from {t} order by all").fetchall() for t in ("rollouts", "rewards", "skill_events")
            }
    return found


@pytest.fixture(scope="module")
def ray_cluster():
    """One local Ray cluster for the module: 2 worker CPUs, a 100 MB object store, no dashboard. The
    flow's RayTaskRunner finds Ray initialised and uses it (and leaves it running)."""
    path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), path) if p
    )  # the worker processes import coevo from here
    ray.init(address="local", num_cpus=2, object_store_memory=100 * 2**20, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()
        os.environ["PYTHONPATH"] = path


@pytest.fixture(scope="module")
def local_run(prefect_server, tmp_path_factory) -> dict:
    """The reference: 2 iterations, 2 shards, local runner."""
    params = overrides(tmp_path_factory.mktemp("local"), "local", "local")
    state = train_flow(str(TINY_PARAMS), params, return_state=True)
    assert state.is_completed(), state
    return outcome(load_config(TINY_PARAMS, params))


def test_plain_driver_equals_the_flow_in_shards(local_run, tmp_path):
    cfg = load_config(TINY_PARAMS, overrides(tmp_path, "plain", "local"))
    plain_train(cfg)
    assert outcome(cfg) == {k: v for k, v in local_run.items() if k != "catalog"}


def test_ray_runner_with_a_killed_worker_equals_the_local_runner(ray_cluster, local_run, prefect_server, tmp_path):
    """2 iterations through the RayTaskRunner, one of whose worker processes is SIGKILLed mid-shard and
    its task re-run, give what the local runner gives (a run without the kill computes the same: every
    task is a pure function of its inputs; one run here covers both, ~30 s of suite time)."""
    from prefect_ray.context import remote_options

    marker = tmp_path / "paused.pid"
    pause = {"COEVO_PAUSE": "rollout:2.1:120", "COEVO_PAUSE_ONCE": str(marker), "PYTHONPATH": os.environ["PYTHONPATH"]}
    killed = []

    def kill_when_paused():
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not (marker.is_file() and marker.read_text().strip()):
            time.sleep(0.1)
        if marker.is_file():
            pid = int(marker.read_text())
            os.kill(pid, signal.SIGKILL)  # the Ray worker process running shard 1 of iteration 2's rollout
            killed.append(pid)

    killer = threading.Thread(target=kill_when_paused, daemon=True)
    killer.start()
    params = overrides(tmp_path, "killed", "ray")
    with remote_options(runtime_env={"env_vars": pause}):  # the worker processes of this run pause there, once
        state = train_flow(str(TINY_PARAMS), params, return_state=True)
    killer.join(timeout=5)
    assert killed and killed[0] != os.getpid(), "no Ray worker reached the pause point"
    assert state.is_completed(), state
    assert outcome(load_config(TINY_PARAMS, params)) == local_run
    assert (
        len(local_run["catalog"]["rollouts"])
        == 2 * TINY["rollout"]["problems_per_iter"] * TINY["rollout"]["group_size"]
    )
    assert len(set(local_run["weights"])) > 1  # the policy moved
