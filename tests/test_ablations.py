"""The ablation switches end to end with the plain driver (frozen policy, frozen co-evolver after N
iterations, PMD), and the memory and ablation settings as MLflow params."""

from __future__ import annotations

import json

from rich.console import Console

from coevo import driver
from coevo.coevolvers.base import read_manifest
from coevo.config import load_config
from coevo.layout import RunLayout
from coevo.model.checkpoint import read_meta
from coevo.tracking.mlflow_tracker import Tracker

from .conftest import TINY_PARAMS, tiny_config

PMD = {"objective": {"name": "opsd"}, "coevolver": {"kind": "memory"}}


def run(cfg) -> RunLayout:
    driver.train(cfg, Console(quiet=True))
    return RunLayout(cfg.run.out_dir)


def metrics(cfg) -> list[dict]:
    return [json.loads(line) for line in (cfg.run.out_dir / "metrics.jsonl").read_text().splitlines()]


def entries(layout: RunLayout, it: int) -> list[dict]:
    """Co-evolver `it`'s memory entries (skills.jsonl), as saved."""
    return [json.loads(line) for line in (layout.coevolver(it) / "skills.jsonl").read_text().splitlines()]


def contents(layout: RunLayout, iterations: range) -> list[str]:
    return [read_manifest(layout.coevolver(it))["content_hash"] for it in iterations]


def test_frozen_policy_keeps_the_bootstrap_weights_while_memory_evolves(tmp_path):
    cfg = tiny_config(
        tmp_path, **PMD, policy={"frozen": True}, run={"iterations": 3, "retention": {"keep_last": 10}}
    )  # every version stays whole for the comparison
    layout = run(cfg)
    weights = [read_meta(layout.checkpoint(it))["weights_sha256"] for it in range(4)]
    assert len(set(weights)) == 1
    assert [m["policy/steps"] for m in metrics(cfg)] == [0.0, 0.0, 0.0]
    assert entries(layout, 0) == [] and len(entries(layout, 1)) > 0
    hashes = contents(layout, range(4))
    assert len(set(hashes)) == 4, hashes  # every iteration changed the memory's content


def test_frozen_coevolver_evolves_until_frozen_after_then_stays(tmp_path):
    frozen = {"kind": "memory", "frozen": True, "frozen_after": 1}
    cfg = tiny_config(
        tmp_path, objective=PMD["objective"], coevolver=frozen, run={"iterations": 3, "retention": {"keep_last": 10}}
    )
    layout = run(cfg)
    assert [json.loads(layout.report(it).read_text())["frozen"] for it in (1, 2, 3)] == [False, True, True]
    assert entries(layout, 0) == [] and len(entries(layout, 1)) > 0  # iteration 1 (<= frozen_after) evolves
    hashes = contents(layout, range(4))
    assert hashes[0] != hashes[1] and hashes[1] == hashes[2] == hashes[3]  # ... and from iteration 2 on, nothing
    weights = [read_meta(layout.checkpoint(it))["weights_sha256"] for it in range(4)]
    assert len(set(weights)) == 4  # the policy still trains


def test_pmd_run_distils_from_its_memory(tmp_path):
    """With an admission that takes every measured entry (one matched group, any gap), entries written
    at iteration 1 are admitted at iteration 2 and reach the self-teacher: the divergence is exactly 0
    while the memory holds no admitted entry (the teacher is the student) and positive once it does."""
    admit_all = {
        "min_count": 1,
        "admit_threshold": -2.0,
        "retire_threshold": -2.0,
        "admission": "threshold",
        "retire_z": None,
        "skip_saturated": False,
    }
    cfg = tiny_config(
        tmp_path,
        objective=PMD["objective"],
        coevolver={"kind": "memory", "skill_bank": admit_all},
        rollout={"problems_per_iter": 8},
    )
    layout = run(cfg)
    admitted = [[e["text"] for e in entries(layout, it) if e["status"] in ("active", "stable")] for it in (1, 2)]
    assert admitted[0] == [] and len(admitted[1]) > 0
    divergence = [m["policy/distill_divergence"] for m in metrics(cfg)]
    assert divergence[0] == 0.0 and divergence[1] > 0.0, divergence
    assert all(m["policy/steps"] > 0 for m in metrics(cfg))


def test_memory_and_ablation_settings_reach_mlflow_params(tmp_path):
    overrides = {
        "policy": {"frozen": True},
        "objective": {"name": "opsd", "teacher": {"sources": ["answer", "coevolver"], "apply_to": "correct"}},
        "coevolver": {
            "kind": "memory",
            "frozen": True,
            "frozen_after": 7,
            "memory": {"levels": [1, 3], "reflector": "policy"},
        },
        "tracking": {"mlflow_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"},
    }
    cfg = load_config(TINY_PARAMS, overrides)
    tracker = Tracker(cfg.tracking, tmp_path / "run")
    params = tracker.client.get_run(tracker.start(cfg.model_dump(mode="json"), run_name="ablation")).data.params
    assert params["policy.frozen"] == "True"
    assert params["coevolver.kind"] == "memory" and params["coevolver.frozen_after"] == "7"
    assert params["coevolver.memory.levels"] == "[1, 3]" and params["coevolver.memory.reflector"] == "policy"
    assert (
        params["objective.teacher.sources"] == '["answer", "coevolver"]'
        and params["objective.teacher.apply_to"] == "correct"
    )
