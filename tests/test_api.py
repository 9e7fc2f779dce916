"""The Python API (coevo/api.py) from a notebook-style script: train the tiny policy 2 iterations,
read the result, evaluate the checkpoint, verify its lineage; each object is the CLI's --json one
(`train` and `eval` compared with `coevo train --plain --json` and `coevo eval --json`, `lineage` with
`coevo lineage --verify --json`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from .test_cli import _params


def test_notebook_trains_evaluates_and_verifies_lineage(tmp_path):
    import coevo  # as a notebook does: the package, not its modules

    params = _params(tmp_path, coevolver={"kind": "none"})
    result = coevo.train(params=params, overrides={"run.iterations": 2, "eval": {"every": 2}}, plain=True)
    assert set(result) == {
        "final_checkpoint",
        "final_coevolver",
        "checkpoints",
        "initial_eval",
        "final_eval",
        "wall_time_s",
        "iterations",
    }
    assert result["iterations"] == 2 and len(result["checkpoints"]) == 3 and Path(result["final_checkpoint"]).is_dir()

    metrics = coevo.evaluate(result["final_checkpoint"], params=params)
    assert (
        metrics["checkpoint"] == result["final_checkpoint"]
        and metrics["metrics"]["eval/acc"] == result["final_eval"]["eval/acc"]
    )  # greedy: the same accuracy

    chain = coevo.lineage(result["final_checkpoint"], verify=True)
    assert chain["mismatches"] == [] and [
        entry["lineage"]["iteration"] for entry in chain["chain"] if entry["lineage"]
    ][:2] == [2, 1]

    from coevo.cli import app

    cli = CliRunner().invoke(app, ["lineage", result["final_checkpoint"], "--verify", "--json"])
    assert cli.exit_code == 0 and json.loads(cli.stdout) == json.loads(
        json.dumps(chain, default=str)
    )  # the CLI prints the same object

    shown = CliRunner().invoke(app, ["eval", result["final_checkpoint"], "--params", params, "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout) == json.loads(json.dumps(metrics))  # the same object, key for key

    again = tmp_path / "cli-run"  # the same params and seed through the CLI: the same object but for where and when
    trained = CliRunner().invoke(
        app,
        ["train", "--plain", "--json", "--params", params, "--set", f"run.out_dir={again}"]
        + ["--set", "run.iterations=2", "--set", "eval.every=2"],
    )
    assert trained.exit_code == 0, trained.output
    assert _portable(json.loads(trained.stdout), again) == _portable(json.loads(json.dumps(result)), tmp_path / "run")


def _portable(summary: dict, out_dir: Path) -> dict:
    """A `train --json` object with its run directory's paths relative to it and the wall time dropped."""
    text = json.dumps({k: v for k, v in summary.items() if k != "wall_time_s"}).replace(str(out_dir), "RUN")
    return json.loads(text)


def test_overrides_are_validated_like_set(tmp_path):
    import coevo
    from coevo.config import ConfigError

    with pytest.raises(ConfigError, match=r"rollout\.group_size"):
        coevo.train(params=_params(tmp_path), overrides={"rollout.group_size": 1})
    assert not (tmp_path / "run").exists()
