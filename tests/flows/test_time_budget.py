"""run.time_budget_s stops both runners alike: after the iteration that spent it, with that
iteration's evaluation as the final one, its metrics line kept, and `stopped_by: time_budget` and the
iterations done in summary.json (so `run.iterations=<done>` reproduces the run on any machine)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from coevo.cli import app
from coevo.layout import RunLayout

from .test_continue import _params


@pytest.mark.parametrize("runner", ["flow", "plain"])
def test_a_spent_time_budget_stops_after_the_iteration_and_says_so(prefect_server, tmp_path, runner):
    params = _params(tmp_path)
    extra = ["--plain"] if runner == "plain" else []
    result = CliRunner().invoke(
        app,
        ["train", *extra, "--params", params, "--set", "run.iterations=3", "--set", "run.time_budget_s=1e-9", "--json"],
    )
    assert result.exit_code == 0, result.output

    layout = RunLayout(tmp_path / "run")
    summary = json.loads((layout.root / "summary.json").read_text())
    assert (summary["stopped_by"], summary["iterations"]) == ("time_budget", 1)
    assert summary["final_eval"]["iteration"] == 1 and "eval/acc" in summary["final_eval"]
    assert summary["checkpoints"] == [str(layout.checkpoint(k)) for k in (0, 1)]
    assert not layout.checkpoint(2).exists()
    assert [json.loads(line)["iteration"] for line in (layout.root / "metrics.jsonl").read_text().splitlines()] == [1.0]
