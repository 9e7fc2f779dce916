"""One writer per run directory (coevo/runlock.py): real processes contend for a real flock."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coevo.cli import app
from coevo.runlock import EXIT_LOCKED, LOCK_NAME, RunLocked, read_holder, run_lock
from coevo.store.catalog import Catalog
from flows.train import SKIPPED_RUNS, nightly_deployment, train_flow

from .conftest import ROOT, TINY_PARAMS, tiny_config
from .test_cli import _params

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
HOLD = (
    "import sys; from coevo.runlock import run_lock\nwith run_lock(sys.argv[1], 'holder under test'):\n    "
    "print('held', flush=True); sys.stdin.read()"
)


class Holder:
    """Another process holding the run lock until closed (or killed)."""

    def __init__(self, out_dir: Path):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(out_dir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=ENV,
        )
        assert self.proc.stdout.readline().strip() == "held"

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


@pytest.fixture
def holder(tmp_path):
    held = Holder(tmp_path / "run")
    yield held
    held.close()


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("command", [["train"], ["train", "--plain"], ["bootstrap"]])
def test_second_writer_is_refused_naming_the_holder_and_writes_nothing(tmp_path, holder, command):
    params = _params(tmp_path)
    before = snapshot(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "coevo.cli", *command, "--params", params],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
    )
    assert done.returncode == EXIT_LOCKED, done.stdout + done.stderr
    message = " ".join((done.stdout + done.stderr).split())
    assert f"pid {holder.proc.pid} on host {socket.gethostname()} since" in message
    assert "holder under test" in message
    assert snapshot(tmp_path) == before  # not a byte written: no data, no run files, lock record intact


def test_lock_of_a_killed_process_does_not_block_and_is_reported(tmp_path):
    held = Holder(tmp_path / "run")
    held.proc.send_signal(signal.SIGKILL)
    held.proc.wait(timeout=30)
    assert read_holder(tmp_path / "run")["pid"] == held.proc.pid  # its record outlives it, its flock does not
    heard: list[str] = []
    with run_lock(tmp_path / "run", "next", log=heard.append) as record:
        assert record["pid"] == os.getpid() and record["command"] == "next"
    assert len(heard) == 1 and f"pid {held.proc.pid}" in heard[0]
    assert not (tmp_path / "run" / LOCK_NAME).exists()  # released cleanly: nothing to report next time


def test_lock_is_reentrant_in_a_process_and_exclusive_across_processes(tmp_path):
    with run_lock(tmp_path / "run", "outer"):
        with run_lock(tmp_path / "run", "inner") as record:
            assert record["command"] == "outer"
        probe = subprocess.run(
            [sys.executable, "-c", HOLD, str(tmp_path / "run")], capture_output=True, text=True, env=ENV, timeout=120
        )
        assert probe.returncode != 0 and "RunLocked" in probe.stderr and f"pid {os.getpid()}" in probe.stderr
        assert read_holder(tmp_path / "run")["command"] == "outer"  # still held after the inner exit
    with run_lock(tmp_path / "run", "again"):
        pass


def test_read_only_commands_work_during_a_run(tmp_path, holder, tiny_policy_dir):
    problems = tmp_path / "mine.jsonl"
    problems.write_text('{"id": "a", "prompt": "2+2=", "answer": 4, "family": "add"}\n')
    params = _params(tmp_path)
    result = CliRunner().invoke(
        app, ["eval", str(tiny_policy_dir), "--problems", str(problems), "--params", params, "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["n"] == 1
    with Catalog(tmp_path / "run" / "catalog.duckdb"):
        pass  # the run's (empty) catalog, as the holder would have written it
    query = CliRunner().invoke(
        app, ["query", "pass-rate", "--catalog", str(tmp_path / "run" / "catalog.duckdb"), "--json"]
    )
    assert query.exit_code == 0, query.output
    assert json.loads(query.output) == []


def test_scheduled_run_that_would_overlap_is_skipped_and_recorded(prefect_server, tmp_path, holder):
    cfg = tiny_config(tmp_path)
    overrides = {"run": {"out_dir": str(cfg.run.out_dir)}, "problems": {"data_dir": str(cfg.problems.data_dir)}}
    assert nightly_deployment(str(TINY_PARAMS), cfg, overrides).parameters["skip_if_locked"] is True
    before = snapshot(tmp_path)
    with pytest.raises(RunLocked, match=f"pid {holder.proc.pid}"):
        train_flow(str(TINY_PARAMS), overrides)
    assert snapshot(tmp_path) == before
    result = train_flow(str(TINY_PARAMS), overrides, continue_latest=True, skip_if_locked=True)
    assert result["skipped"]["holder"]["pid"] == holder.proc.pid
    lines = (cfg.run.out_dir / SKIPPED_RUNS).read_text().splitlines()
    assert [json.loads(line) for line in lines] == [result["skipped"]]
    assert set(snapshot(tmp_path)) == set(before) | {f"run/{SKIPPED_RUNS}"}  # the record is the only write
