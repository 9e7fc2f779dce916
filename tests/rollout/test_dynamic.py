"""Dynamic sampling (coevo/rollout/dynamic.py): the gate, the rounds, and what the update trains on,
through the real stages on the tiny policy."""

from __future__ import annotations

import pandas as pd
import pytest

from coevo.config import ConfigError, DynamicSamplingConfig
from coevo.io import hash_file
from coevo.layout import RunLayout
from coevo.model.cache import forget_policies
from coevo.rollout.dynamic import kept_rows, mixed_problems, sample_rounds
from coevo.stages.in_force import in_force
from coevo.stages.prepare import bootstrap_stage, prepare_stage
from coevo.stages.rollout import rollout_stage
from coevo.stages.update import update_stage
from coevo.stages.verify import verify_stage
from coevo.store.tables import batch_of
from schemas.rewards import read_rewards
from schemas.rollouts import read_rollouts

from ..conftest import tiny_config


def _group(pid: str, passed: list[bool], reward: list[float]) -> tuple[pd.DataFrame, pd.DataFrame]:
    ids = [f"{pid}-{i}" for i in range(len(passed))]
    rollouts = pd.DataFrame({"rollout_id": ids, "problem_id": pid, "completion_ids": [[1, 2]] * len(ids)})
    return rollouts, pd.DataFrame({"rollout_id": ids, "passed": passed, "reward": reward})


def _tables(groups: dict[str, tuple[list[bool], list[float]]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    parts = [_group(pid, *outcome) for pid, outcome in groups.items()]
    return pd.concat([p[0] for p in parts], ignore_index=True), pd.concat([p[1] for p in parts], ignore_index=True)


def test_the_pass_gate_drops_a_group_whose_shaped_rewards_differ_but_whose_answers_all_fail():
    rollouts, rewards = _tables(
        {
            "mixed": ([True, False], [1.0, 0.0]),
            "all-fail-shaped": ([False, False], [0.1, 0.3]),  # a format term varies, no answer passes
            "all-pass": ([True, True], [1.0, 1.0]),
        }
    )
    assert mixed_problems(rollouts, rewards, "passed") == {"mixed"}
    assert mixed_problems(rollouts, rewards, "reward") == {"mixed", "all-fail-shaped"}


def test_the_update_keeps_the_first_mixed_groups_in_draw_order():
    rollouts, rewards = _tables(
        {
            "c": ([True, False], [1.0, 0.0]),
            "a": ([False, False], [0.0, 0.0]),
            "b": ([False, True], [0.0, 1.0]),
            "d": ([True, False], [1.0, 0.0]),
        }
    )
    frame, scored = kept_rows(rollouts, rewards, 2, "passed")
    assert list(dict.fromkeys(frame["problem_id"])) == ["c", "b"]  # draw order, not id order; "d" past the batch
    assert set(scored["rollout_id"]) == set(frame["rollout_id"])


def _scripted(mixed_ids: set[str]):
    """sample/score callables over candidates whose groups are mixed where `mixed_ids` says, and the
    rounds sampled."""
    sampled = []

    def sample(problems: pd.DataFrame, round_: int) -> pd.DataFrame:
        sampled.append(round_)
        outcomes = {pid: ([True, False] if pid in mixed_ids else [False, False], [0.0, 0.0]) for pid in problems["id"]}
        return _tables(outcomes)[0]

    def score(frame: pd.DataFrame) -> pd.DataFrame:
        passed = [pid in mixed_ids and rid.endswith("-0") for rid, pid in zip(frame["rollout_id"], frame["problem_id"])]
        return pd.DataFrame({"rollout_id": frame["rollout_id"], "passed": passed, "reward": [float(p) for p in passed]})

    return sample, score, sampled


@pytest.mark.parametrize(
    ("mixed_ids", "rounds_run", "kept"),
    [
        ({"p0", "p1"}, 0, 2),  # round 0 fills the batch: no extra round
        ({"p1", "p3"}, 1, 2),  # one extra round
        ({"p5"}, 3, 1),  # the rounds run out with one mixed group
    ],
)
def test_rounds_stop_when_the_batch_is_full_or_the_rounds_run_out(mixed_ids, rounds_run, kept):
    candidates = pd.DataFrame({"id": [f"p{i}" for i in range(8)]})
    sample, score, sampled = _scripted(mixed_ids)
    frame, metrics = sample_rounds(candidates, 2, DynamicSamplingConfig(enabled=True, max_rounds=3), sample, score)
    assert sampled == list(range(rounds_run + 1))
    assert list(dict.fromkeys(frame["problem_id"])) == list(candidates["id"][: 2 * (rounds_run + 1)])
    assert metrics["rollout/ds_rounds"] == rounds_run
    assert metrics["rollout/ds_groups_kept"] == kept
    assert metrics["rollout/ds_zero_var_share_drawn"] == pytest.approx(1 - len(mixed_ids) / (2 * (rounds_run + 1)))
    assert metrics["rollout/ds_zero_var_share_kept"] == pytest.approx(1 - kept / 2)


def test_sharded_dynamic_sampling_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="dynamic_sampling.enabled needs pipeline.shards: 1"):
        tiny_config(tmp_path, rollout={"dynamic_sampling": {"enabled": True}}, pipeline={"shards": 2})


def test_a_tiny_run_samples_rounds_from_the_chooser_and_trains_only_the_kept_groups(tmp_path):
    """Real stages on the tiny policy: the batch in force holds every round's problems; the rollouts
    table is a prefix of whole rounds; the update trains exactly the kept groups; the rollout stage
    re-run from its inputs writes the same bytes."""
    cfg = tiny_config(
        tmp_path,
        rollout={"problems_per_iter": 4, "group_size": 4, "dynamic_sampling": {"enabled": True, "max_rounds": 2}},
        bootstrap={"steps": 120},  # passes some 1-digit problems: a few groups are mixed, most are not
    )
    forget_policies()
    data = prepare_stage(cfg)
    boot = bootstrap_stage(cfg, data)
    now = in_force(cfg, 1, data)
    assert len(now.batch) == 12 and len(set(now.batch)) == 12  # 4 x (1 + 2 rounds), no repeat
    record = rollout_stage(cfg, now, boot.checkpoint.path)
    frame = read_rollouts(record.path)
    scored = read_rewards(verify_stage(cfg, now, record.path).path)
    metrics, rounds = record.metrics, int(record.metrics["rollout/ds_rounds"])
    assert list(dict.fromkeys(frame["problem_id"])) == list(now.batch[: 4 * (rounds + 1)])
    mixed = mixed_problems(frame, scored, "passed")
    assert metrics["rollout/ds_groups_mixed"] == len(mixed)
    assert rounds == 2 or len(mixed) >= 4  # stopped because the rounds ran out or the batch is full
    assert rounds >= 1 and mixed  # round 0 alone did not fill the batch; a later one found more
    assert metrics["rollout/ds_groups_kept"] == min(len(mixed), 4)
    first = hash_file(record.path)
    forget_policies()
    assert hash_file(rollout_stage(cfg, now, boot.checkpoint.path).path) == first
    rewards = str(RunLayout(cfg.run.out_dir).rewards(1))
    updated = update_stage(cfg, now, boot.checkpoint.path, record.path, rewards, boot.coevolver.path, data)
    assert updated.metrics["policy/groups_total"] == metrics["rollout/ds_groups_kept"]


def test_the_curriculums_draw_is_sampled_in_a_shuffled_order_so_every_round_mixes_its_cells(tmp_path):
    """A curriculum returns its draw grouped by cell; the rounds take slices of it in order, so the
    candidates must be shuffled or round 0 would hold the first cells alone."""
    cfg = tiny_config(
        tmp_path,
        coevolver={"kind": "curriculum"},
        rollout={"problems_per_iter": 4, "group_size": 4, "dynamic_sampling": {"enabled": True, "max_rounds": 2}},
    )
    forget_policies()
    data = prepare_stage(cfg)
    bootstrap_stage(cfg, data)
    now = in_force(cfg, 1, data)
    families = list(batch_of(now)["family"])
    assert len(set(families)) > 1
    assert families != sorted(families)  # not the chooser's grouped order
