"""A short plain-driver run of the rubrics co-evolver on the constraint problems: the tiny policy,
two iterations, a scripted judge and criterion writer on loopback (real HTTP, the real openai client)."""

from __future__ import annotations

import json

import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from coevo.coevolvers import load_coevolver
from coevo.coevolvers.base import read_manifest
from coevo.driver import train
from coevo.store.catalog import Catalog, IterationFiles
from coevo.store.query_cli import query_app
from schemas.rewards import read_rewards

from .conftest import tiny_config
from .test_judge import GraderServer


def grade(user: str) -> str:
    """Judge: the topic criterion is always met (saturated: pruned after iteration 1); otherwise 10
    without a comma, else a score from the response's length. Writer: a fixed new criterion."""
    if "Write one new criterion" in user:
        return "The response ends with a full stop."
    if "about the topic" in user:
        return "10"
    response = user.split("Response:\n", 1)[1].split("\n\nCriterion:", 1)[0]
    return "10" if "," not in response else str(len(response) % 11)


def test_rubrics_run_on_constraints(loopback, tmp_path):
    server = loopback(GraderServer(grade))
    cfg = tiny_config(
        tmp_path,
        problems={"source": "constraints", "n_train": 60, "n_test": 12},
        policy={"shape": {"max_position": 128}},
        sampling={"max_new_tokens": 16},
        coevolver={
            "kind": "rubrics",
            "writer": {"base_url": server.base_url, "model": "grader", "timeout_s": 10},
            "rubrics": {"min_groups": 1},
        },
        rewards=[{"function": "rubric"}],
    )
    summary = train(cfg)
    out = cfg.run.out_dir
    assert summary["iterations"] == 2
    start, end = (
        load_file(out / "bootstrap" / "model.safetensors"),
        load_file(out / "checkpoints" / "iter_0002" / "model.safetensors"),
    )
    assert any(not torch.equal(start[k], end[k]) for k in start)
    report = json.loads((out / "reports" / "iter_0001.json").read_text())
    assert report["retired"] and report["new_candidates"]  # the saturated topic criterion was replaced
    assert all("discrimination" in row for row in report["criteria"])
    for it in (1, 2):
        rewards = read_rewards(out / "rewards" / f"iter_{it:04d}.parquet")
        assert set(rewards["verifier"]) == {"rubric"} and rewards["details"].str.contains("c.").all()
        evolver = load_coevolver(out / "coevolver" / f"iter_{it:04d}", cfg.coevolver_list[0], cfg.seed)
        assert read_manifest(out / "coevolver" / f"iter_{it:04d}")["kind"] == "rubrics"
    texts = {c.text for cs in evolver.rubric.families.values() for c in cs}
    assert "The response ends with a full stop." in texts
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert "verify/reward/rubric" in metrics[-1] and "eval/gold_acc" in metrics[-1]
    assert {"eval/gold_acc/no_commas", "eval/gold_acc/include_word"} <= set(summary["final_eval"])
    with Catalog(out / "catalog.duckdb") as catalog:
        catalog.ingest(
            [
                IterationFiles(
                    it,
                    out / "rollouts" / f"iter_{it:04d}.parquet",
                    out / "rewards" / f"iter_{it:04d}.parquet",
                    out / "reports" / f"iter_{it:04d}.json",
                )
                for it in (1, 2)
            ]
        )
        view = catalog.rubric_criteria()
    assert list(view.columns) == ["iteration", "family", "criterion", "weight", "discrimination"]
    assert set(view["iteration"]) == {1, 2} and view["discrimination"].notna().all()
    shown = CliRunner().invoke(query_app, ["rubric", "--catalog", str(out / "catalog.duckdb"), "--json"])
    assert shown.exit_code == 0 and len(json.loads(shown.output)) == len(view)
    meta = json.loads((out / "checkpoints" / "iter_0002" / "coevo.json").read_text())
    assert (
        meta["lineage"]["coevolver"]["content_hash"] == read_manifest(out / "coevolver" / "iter_0002")["content_hash"]
    )
