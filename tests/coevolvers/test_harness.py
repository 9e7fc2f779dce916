"""The harness co-evolver: diagnosis rules on hand-made evidence, the acceptance rule, and a real run
with an injected bad temperature that the harness backtests on the tiny policy and fixes."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from coevo.coevolvers import Harness, build_coevolver, load_coevolver
from coevo.coevolvers.base import CoevolverDirError
from coevo.coevolvers.harness import HARNESS, _ladder, group_evidence
from coevo.config import CoevolverConfig, HarnessConfig, SamplingConfig

from ..conftest import tiny_config

BASE = SamplingConfig(temperature=0.05, max_new_tokens=8)


def batch(groups: dict[str, list[tuple[str, float, bool]]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Rollouts and rewards for {problem id: [(completion, reward, finished), ...]}."""
    rollouts, rewards = [], []
    for pid, rows in groups.items():
        for completion, reward, finished in rows:
            rid = f"r{len(rollouts):03d}"
            rollouts.append({"rollout_id": rid, "problem_id": pid, "completion": completion, "finished": finished})
            rewards.append({"rollout_id": rid, "reward": reward})
    return pd.DataFrame(rollouts), pd.DataFrame(rewards)


COLLAPSED = batch({"a": [("7", 1.0, True)] * 4, "b": [("3", 0.0, True)] * 4, "c": [("1", 0.0, True), ("2", 1.0, True)] * 2})
SPREAD = batch({"a": [("7", 1.0, True), ("8", 0.0, True)] * 2, "b": [("3", 0.0, True), ("4", 1.0, True)] * 2})
CUT = batch({"a": [("77", 1.0, False), ("7", 1.0, True)] * 2, "b": [("3", 0.0, False), ("4", 1.0, True)] * 2})


def harness(**params: object) -> Harness:
    return build_coevolver(CoevolverConfig(kind="harness", harness=HarnessConfig(**params)), seed=0)


def test_evidence_shares_by_hand():
    assert group_evidence(*COLLAPSED) == {"collapsed_share": 2 / 3, "signal_share": 1 / 3, "finished_share": 1.0, "mean_reward": 0.5}
    assert group_evidence(*CUT)["finished_share"] == 0.5


def test_diagnosis_walks_up_the_ladder_past_recent_rejections():
    assert _ladder(0.05, 2.0, 1.0, 0.05) == [0.1, 0.2, 0.4, 0.8, 1.0]
    h = harness()
    assert h.diagnose(group_evidence(*SPREAD), BASE, 1) is None  # every group varies, every completion ends
    change = h.diagnose(group_evidence(*COLLAPSED), BASE, 1)
    assert change["knob"] == "temperature" and change["value"] == 0.1 and "collapsed groups 0.67" in change["why"]
    h.rejected_at = {"temperature=0.1": 1, "temperature=0.2": 2}
    assert h.diagnose(group_evidence(*COLLAPSED), BASE, 3)["value"] == 0.4
    assert h.diagnose(group_evidence(*COLLAPSED), BASE, 6)["value"] == 0.1  # retry_after 5 has passed for 0.1
    truncated = h.diagnose(group_evidence(*CUT), BASE, 1)
    assert (truncated["knob"], truncated["value"]) == ("max_new_tokens", 16)
    assert harness(max_temperature=0.05).diagnose(group_evidence(*COLLAPSED), BASE, 1) is None  # nothing above the cap


def test_acceptance_needs_the_measure_to_gain_without_losing_reward():
    """The rule, on fixed evidence: a candidate arm whose groups vary but whose reward falls by more
    than max_reward_drop is rejected (a harmful change), one that gains with the reward kept is kept."""
    arms = {0.05: COLLAPSED, 0.1: batch({"a": [("1", 0.0, True), ("2", 0.0, True)] * 2, "b": [("3", 0.0, True), ("4", 0.0, True)] * 2})}

    def sample(problems: pd.DataFrame, sampling: SamplingConfig) -> tuple[pd.DataFrame, pd.DataFrame]:
        return arms[sampling.temperature]

    h, train = harness(), pd.DataFrame({"id": [f"p{i}" for i in range(20)]})
    report = h.revise(1, *COLLAPSED, train, BASE, sample)
    assert report["entry"]["accepted"] is False and h.overrides == {} and h.rejected_at == {"temperature=0.1": 1}
    arms[0.2] = SPREAD  # all groups vary, mean reward 0.5 >= 0.5 - 0.05
    report = h.revise(2, *COLLAPSED, train, BASE, sample)
    assert report["entry"]["value"] == 0.2 and report["entry"]["accepted"] is True and h.overrides == {"temperature": 0.2}
    assert h.sampling(BASE) == SamplingConfig(temperature=0.2, max_new_tokens=8)
    assert len(h.backtest_slice(train)) == 16 and h.backtest_slice(train).equals(h.backtest_slice(train.iloc[::-1]))


def test_a_run_with_a_collapsing_temperature_is_diagnosed_backtested_and_fixed(tmp_path):
    from coevo.driver import train
    from coevo.store.lineage import read_record

    cfg = tiny_config(tmp_path, run={"iterations": 4}, sampling={"temperature": 0.05}, coevolver={"kind": "harness", "harness": {"temperature_step": 4.0}})
    train(cfg)
    out = cfg.run.out_dir
    reports = [json.loads((out / "reports" / f"iter_{it:04d}.json").read_text())["harness"] for it in range(1, 5)]
    first = reports[0]["entry"]
    assert first["measure"] == "signal_share" and first["before"]["collapsed_share"] == 1.0 and first["value"] == 0.2
    saved = load_coevolver(out / "coevolver" / "iter_0004", cfg.coevolver, cfg.seed)
    accepted = [e for e in saved.entries if e["accepted"]]
    assert accepted, f"no backtest accepted a higher temperature: {saved.entries}"
    fixed_at = accepted[0]["iteration"]
    assert all(r["in_force"]["temperature"] == 0.05 for r in reports[:fixed_at])
    if fixed_at < 4:  # the next iteration samples and trains with the accepted temperature
        assert reports[fixed_at]["in_force"]["temperature"] == accepted[0]["value"]
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["coevo/harness_accepted"] for m in metrics].index(1.0) + 1 == fixed_at
    assert read_record(out / "checkpoints" / "iter_0004")["coevolver"]["kind"] == "harness"  # the version trained under


def test_saved_harness_round_trips_and_refuses_unknown_knobs(tmp_path):
    h = harness()
    h.overrides, h.rejected_at = {"temperature": 0.4}, {"temperature=0.2": 3}
    h.save(tmp_path / "v1")
    assert load_coevolver(tmp_path / "v1", h.cfg, 0) == h
    state = json.loads((tmp_path / "v1" / HARNESS).read_text())
    state["overrides"]["top_k"] = 5
    Harness(h.cfg, 0).save(tmp_path / "v2")
    from coevo.coevolvers.base import save_artifact

    save_artifact(tmp_path / "v2", "harness", files={HARNESS: json.dumps(state).encode()})
    with pytest.raises(CoevolverDirError, match="harness.json: field 'overrides': unknown knobs \\['top_k'\\]"):
        load_coevolver(tmp_path / "v2", h.cfg, 0)
