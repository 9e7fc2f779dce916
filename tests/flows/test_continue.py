"""`coevo train --continue` continues from the newest *complete* iteration of a run directory.

A run killed inside iteration N+1 leaves part of that iteration on disk: its shards and report, maybe
its co-evolver version, maybe a checkpoint directory without its metadata (coevo.json). None of it may
count as an iteration to continue from: `latest_complete` stays at N, and `coevo train --continue`
(the nightly deployment's `continue_latest`) numbers its iterations from N+1, links them to checkpoint
N and replaces the partial files. The partial pieces here are iteration 2's real files copied under
iteration 3's names, so only the layout is made up, never their content.
"""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from coevo.cli import app
from coevo.config import load_config
from coevo.layout import RunLayout
from coevo.model.checkpoint import META
from coevo.stages.resume import latest_complete
from coevo.store.catalog import Catalog
from coevo.store.lineage import verify_lineage
from flows.train import train_flow

from ..conftest import TINY, TINY_PARAMS


def _params(tmp_path) -> str:
    raw = yaml.safe_load(TINY_PARAMS.read_text())
    overrides = {
        **TINY,
        "run": {**TINY["run"], "iterations": 2, "out_dir": str(tmp_path / "run")},
        "problems": {**TINY["problems"], "data_dir": str(tmp_path / "data")},
        "tracking": {
            "mlflow_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
            "experiment": "continue",
            "model_name": "tiny",
        },
    }
    for section, values in overrides.items():
        raw[section].update(values)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def _partial_iteration(layout: RunLayout, it: int, pieces: tuple[str, ...]) -> None:
    """Iteration `it`'s pieces as a kill would leave them, copied from iteration it-1's real files."""
    copy = {
        "shards": lambda: [shutil.copy2(f(it - 1), f(it)) for f in (layout.rollouts, layout.rewards, layout.report)],
        "coevolver": lambda: shutil.copytree(layout.coevolver(it - 1), layout.coevolver(it)),
        "checkpoint": lambda: shutil.copytree(layout.checkpoint(it - 1), layout.checkpoint(it)),
    }
    for piece in pieces:
        copy[piece]()
    if "checkpoint" in pieces:
        (layout.checkpoint(it) / META).unlink()  # weights on disk, metadata not: a checkpoint nobody finished


@pytest.fixture(scope="module")
def finished_run(prefect_server, tmp_path_factory):
    """A real two-iteration run of the flow (the bootstrap + iterations 1 and 2)."""
    tmp = tmp_path_factory.mktemp("continue")
    train_flow(_params(tmp))
    return tmp


PARTIAL = {
    "shards only (killed in co-evolve)": ("shards",),
    "shards and co-evolver (killed in the update)": ("shards", "coevolver"),
    "checkpoint without its metadata": ("shards", "coevolver", "checkpoint"),
}


@pytest.mark.parametrize("case", sorted(PARTIAL))
def test_latest_complete_skips_a_partial_iteration(finished_run, tmp_path, case):
    shutil.copytree(
        finished_run / "run", tmp_path / "run", ignore=shutil.ignore_patterns(".prefect-results", "catalog.duckdb*")
    )
    cfg = load_config(_params(finished_run), {"run": {"out_dir": str(tmp_path / "run")}})
    layout = RunLayout(tmp_path / "run")
    assert latest_complete(cfg) == 2
    _partial_iteration(layout, 3, PARTIAL[case])
    assert latest_complete(cfg) == 2
    if "checkpoint" in PARTIAL[case]:  # the same iteration with its metadata written: now it counts
        shutil.copy2(layout.checkpoint(2) / META, layout.checkpoint(3) / META)
        assert latest_complete(cfg) == 3


def test_cli_continue_numbers_after_the_newest_complete_iteration(prefect_server, tmp_path):
    params = _params(tmp_path)
    train_flow(params)
    layout = RunLayout(tmp_path / "run")
    _partial_iteration(layout, 3, ("shards", "coevolver", "checkpoint"))
    partial = {p: p.stat().st_ino for p in (layout.rollouts(3), layout.rewards(3), layout.report(3))}

    result = CliRunner().invoke(app, ["train", "--params", params, "--continue", "--set", "run.iterations=2", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads((layout.root / "summary.json").read_text())
    assert summary["iterations"] == 2
    assert summary["checkpoints"] == [str(layout.checkpoint(k)) for k in (2, 3, 4)]

    # iteration 3 was trained from checkpoint 2 and co-evolver 2, and its partial files were replaced
    parent = json.loads((layout.checkpoint(2) / META).read_text())["weights_sha256"]
    lineage = json.loads((layout.checkpoint(3) / META).read_text())["lineage"]
    assert (lineage["parent"]["path"], lineage["parent"]["weights_sha256"]) == (
        "checkpoints/iter_0002",
        parent,
    )  # relative to run.out_dir
    assert lineage["coevolver"]["path"].endswith("coevolver/iter_0003")
    assert all(p.stat().st_ino != ino for p, ino in partial.items())
    assert set(pd.read_parquet(layout.rollouts(3))["policy_version"]) == {parent}
    assert verify_lineage(layout.checkpoint(4)) == []
    # metrics.jsonl keeps the first run's lines and appends the continued iterations' (it used to hold 3 and 4 only)
    assert [json.loads(line)["iteration"] for line in (layout.root / "metrics.jsonl").read_text().splitlines()] == [
        1.0,
        2.0,
        3.0,
        4.0,
    ]

    per_iter = TINY["rollout"]["problems_per_iter"] * TINY["rollout"]["group_size"]
    with Catalog(layout.root / "catalog.duckdb", read_only=True) as catalog:
        assert catalog.counts()["rollouts"] == 4 * per_iter
        assert sorted(catalog.pass_rate_by_family()["iteration"].unique()) == [1, 2, 3, 4]


def test_plain_continue_after_a_kill_equals_the_straight_run(tmp_path):
    """`coevo train --plain --continue` (the driver) continues as the flow does: a run stopped after
    iteration 1 with a partial iteration 2 on disk, continued for one iteration, ends with the same
    checkpoint 2 as a straight two-iteration run."""

    def plain(run: str, *extra: str) -> None:
        params = _params(tmp_path / run)
        result = CliRunner().invoke(app, ["train", "--plain", "--params", params, *extra, "--json"])
        assert result.exit_code == 0, result.output

    (tmp_path / "straight").mkdir(), (tmp_path / "resumed").mkdir()
    plain("straight")
    plain("resumed", "--set", "run.iterations=1")
    layout = RunLayout(tmp_path / "resumed" / "run")
    _partial_iteration(layout, 2, ("shards", "coevolver"))  # iteration 1's files under iteration 2's names
    plain("resumed", "--continue", "--set", "run.iterations=1")

    summary = json.loads((layout.root / "summary.json").read_text())
    assert summary["checkpoints"] == [str(layout.checkpoint(k)) for k in (1, 2)]
    straight = RunLayout(tmp_path / "straight" / "run")
    meta = {
        name: json.loads((lay.checkpoint(2) / META).read_text())
        for name, lay in (("straight", straight), ("resumed", layout))
    }
    assert meta["resumed"]["lineage"]["parent"]["path"] == "checkpoints/iter_0001"
    assert meta["resumed"]["weights_sha256"] == meta["straight"]["weights_sha256"]
    assert len((layout.root / "metrics.jsonl").read_text().splitlines()) == 2  # iteration 1's line kept, 2's appended
