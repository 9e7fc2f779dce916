"""Load-independent bootstrap: steps only by default; a time budget that stops the warm start is
recorded (stopped_by, steps) and replaying that step count reproduces the checkpoint bit for bit."""

from __future__ import annotations

import json

import yaml

from coevo.config import Config
from coevo.model.bootstrap import bootstrap_policy
from coevo.model.checkpoint import policy_version
from coevo.prepare import prepare_problems
from tests.conftest import TINY_PARAMS, tiny_config


def test_defaults_have_no_time_budget_on_results():
    raw = yaml.safe_load(TINY_PARAMS.read_text())
    assert raw["bootstrap"]["time_budget_s"] is None and raw["bootstrap"]["replay_steps"] is None
    assert Config.model_fields["bootstrap"].default_factory().time_budget_s is None


def _bootstrap(tmp_path, name: str, **boot) -> tuple[dict, str]:
    cfg = tiny_config(tmp_path / name, bootstrap={"steps": 40, **boot})
    train, _ = prepare_problems(cfg)
    bootstrap_policy(cfg, train)
    return json.loads((cfg.bootstrap_dir / "coevo.json").read_text())["bootstrap"], policy_version(cfg.bootstrap_dir)


def test_a_time_budget_stop_is_recorded_and_replays_exactly(tmp_path):
    full, _ = _bootstrap(tmp_path, "full", time_budget_s=None)
    assert (full["steps"], full["stopped_by"]) == (40, "steps")
    # a budget far too short for 2000 steps on any machine: where it stops depends on the load ...
    budgeted, budgeted_hash = _bootstrap(tmp_path, "budget", steps=2000, time_budget_s=0.3)
    assert budgeted["stopped_by"] == "time_budget" and budgeted["steps"] < 2000
    # ... and is recorded, so a replay of that step count reproduces the checkpoint bit for bit
    replayed, replayed_hash = _bootstrap(tmp_path, "replay", steps=2000, replay_steps=budgeted["steps"])
    assert (replayed["steps"], replayed["stopped_by"]) == (budgeted["steps"], "replay_steps")
    assert replayed_hash == budgeted_hash


def test_replay_keeps_the_schedule_of_the_full_run(tmp_path):
    """replay_steps=k is the first k steps of the full run (cosine over `steps`), not a k-step run."""
    replayed, replayed_hash = _bootstrap(tmp_path, "replay", replay_steps=5)
    _, short_hash = _bootstrap(tmp_path, "short", steps=5)
    assert replayed["steps"] == 5 and replayed_hash != short_hash
