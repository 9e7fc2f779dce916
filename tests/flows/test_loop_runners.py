"""The plain driver and the Prefect flow are two runners of one loop (coevo/loop.py): through a run,
a `--continue`, a SIGKILL in the middle of a continued iteration and a `--continue` after it, their
metrics.jsonl agree line for line (stage times aside), and so do their final weights; a spent
run.time_budget_s stops both after the same iteration with the same metrics line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from prefect.settings import PREFECT_API_URL
from typer.testing import CliRunner

from coevo.cli import app
from coevo.layout import RunLayout
from coevo.model.checkpoint import read_meta

from .test_continue import _params
from .test_resume import _kill_at_pause

RUNNERS = {"flow": [], "plain": ["--plain"]}


def _train(params: str, runner: str, *options: str) -> None:
    result = CliRunner().invoke(app, ["train", *RUNNERS[runner], "--params", params, *options, "--json"])
    assert result.exit_code == 0, result.output


def _killed(params: str, runner: str, pause: str, *options: str) -> None:
    """The same command in a process of its own, SIGKILLed where it reaches `pause` (coevo/faults.py)."""
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(), "COEVO_PAUSE": f"{pause}:300"}
    command = [sys.executable, "-m", "coevo.cli", "train", *RUNNERS[runner], "--params", params, *options, "--json"]
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    _kill_at_pause(process, pause)


def _lines(layout: RunLayout) -> list[dict]:
    """metrics.jsonl without the stage times (time/*), which differ from run to run."""
    lines = (layout.root / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if not k.startswith("time/")} for line in lines]


def test_flow_and_driver_agree_through_continue_kill_and_resume(prefect_server, tmp_path):
    runs = {}
    for runner in RUNNERS:
        (tmp_path / runner).mkdir()
        params = _params(tmp_path / runner)
        schedule = ("--set", "eval.every=2")  # iterations 1 and 3 are evaluated only as the last of their run
        _train(params, runner, *schedule)  # iterations 1, 2
        _train(params, runner, "--continue", "--set", "run.iterations=1", *schedule)  # 3
        _killed(params, runner, "update:5", "--continue", "--set", "run.iterations=2", *schedule)  # 4, killed in 5
        _train(params, runner, "--continue", "--set", "run.iterations=2", *schedule)  # 5, 6
        runs[runner] = RunLayout(tmp_path / runner / "run")

    flow, plain = _lines(runs["flow"]), _lines(runs["plain"])
    assert [line["iteration"] for line in flow] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert [("eval/acc" in line) for line in flow] == [False, True, True, True, False, True]
    assert plain == flow
    weights = {runner: read_meta(layout.checkpoint(6))["weights_sha256"] for runner, layout in runs.items()}
    assert weights["plain"] == weights["flow"]


def test_a_spent_time_budget_stops_both_runners_alike(prefect_server, tmp_path):
    """Iteration 1 is not due for evaluation (eval.every=2), so the stop itself evaluates it."""
    lines = {}
    for runner in RUNNERS:
        (tmp_path / runner).mkdir()
        params = _params(tmp_path / runner)
        _train(params, runner, "--set", "run.iterations=3", "--set", "eval.every=2", "--set", "run.time_budget_s=1e-9")
        layout = RunLayout(tmp_path / runner / "run")
        summary = json.loads((layout.root / "summary.json").read_text())
        assert (summary["stopped_by"], summary["iterations"]) == ("time_budget", 1)
        lines[runner] = _lines(layout)
    assert len(lines["flow"]) == 1 and "eval/acc" in lines["flow"][0]
    assert lines["plain"] == lines["flow"]
