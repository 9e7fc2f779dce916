"""Curriculum (SEC bandit): TD(0) values by hand, seeded choice, frozen ablation, persistence, errors,
and one real plain-driver run."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from coevo.coevolvers import Curriculum, build_coevolver, load_coevolver
from coevo.coevolvers.base import CoevolverDirError
from coevo.coevolvers.curriculum import boltzmann, categories
from coevo.config import CoevolverConfig, CurriculumConfig
from coevo.errors import InputError
from coevo.problems.arithmetic import generate_arithmetic
from coevo.store.catalog import Catalog, IterationFiles
from coevo.store.query_cli import query_app
from coevo.update.objectives.group_signal import zero_variance_share
from schemas import SchemaError

from ..conftest import tiny_config

TRAIN, _ = generate_arithmetic(["add", "mul"], [1, 2], n_train=40, n_test=4, seed=0)  # 10 problems per arm


def config(frozen: bool = False, **curriculum: object) -> CoevolverConfig:
    return CoevolverConfig(kind="curriculum", frozen=frozen, curriculum=CurriculumConfig(**curriculum))


def frames(groups: dict[str, list[float]], iteration: int = 1) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Problems, rollouts and rewards for {problem id: rewards of its group}."""
    problems = TRAIN.set_index("id").loc[list(groups)].reset_index()
    rollouts, rewards = [], []
    for pid, values in groups.items():
        for value in values:
            rid = f"r{len(rollouts):03d}"
            rollouts.append({"rollout_id": rid, "iteration": iteration, "problem_id": pid, "role": "solver"})
            rewards.append({"rollout_id": rid, "reward": float(value)})
    return problems, pd.DataFrame(rollouts), pd.DataFrame(rewards)


def arm_ids(arm: str) -> list[str]:
    family, level = arm.split("/")
    return sorted(TRAIN.loc[(TRAIN["family"] == family) & (TRAIN["level"] == int(level)), "id"])


ADD1, MUL2 = arm_ids("add/1"), arm_ids("mul/2")


def test_td0_values_by_hand():
    curriculum = Curriculum(config(alpha=0.5, temperature=0.2), seed=0)
    # add/1: [1,0,0,0] mean .25, |A| = .75,.25,.25,.25 -> .375; [1,1,1,1] -> 0 (zero variance); arm reward .1875
    # mul/2: [1,1,0,0] |A| = .5 each -> .5; values: .5*0 + .5*.1875 = .09375 and .5*.5 = .25
    report = curriculum.update(1, *frames({ADD1[0]: [1, 0, 0, 0], ADD1[1]: [1, 1, 1, 1], MUL2[0]: [1, 1, 0, 0]}))
    arms = {a["category"]: a for a in report["arms"]}
    assert arms["add/1"]["value"] == pytest.approx(0.09375) and arms["add/1"]["reward"] == pytest.approx(0.1875)
    assert arms["mul/2"]["value"] == pytest.approx(0.25) and arms["add/1"]["count"] == 2 and arms["mul/2"]["count"] == 1
    assert report["zero_var_share"] == pytest.approx(1 / 3)
    assert {d["category"]: d["zero_var_share"] for d in report["drawn"]} == {"add/1": 0.5, "mul/2": 0.0}
    # softmax over (.09375, .25) / .2: e^(.78125) = 2.18420, p_add = 1/3.18420 = .314051;
    # floor: .95*.314051 + .025 = .323348
    assert arms["add/1"]["prob"] == pytest.approx(0.323348, abs=1e-6) and arms["mul/2"]["prob"] == pytest.approx(
        0.676652, abs=1e-6
    )
    # add/1 again: [1,1,0,0] -> .5; value .5*.09375 + .5*.5 = .296875; mul/2 not drawn keeps .25
    report = curriculum.update(2, *frames({ADD1[2]: [1, 1, 0, 0]}, iteration=2))
    arms = {a["category"]: a for a in report["arms"]}
    assert arms["add/1"]["value"] == pytest.approx(0.296875) and arms["mul/2"]["value"] == pytest.approx(0.25)
    assert curriculum.arms["add/1"]["cursor"] == 3 and curriculum.arms["mul/2"]["cursor"] == 1


def test_boltzmann_floor_keeps_every_arm_alive():
    probs = boltzmann(np.array([0.0, 0.5, 0.5]), temperature=0.01, epsilon=0.3)
    assert probs.sum() == pytest.approx(1.0) and probs[0] == pytest.approx(0.1)  # epsilon / K, softmax mass ~0


def test_choose_reproducible_no_repeats_and_follows_values():
    a, b = Curriculum(config(), seed=7), Curriculum(config(), seed=7)
    first = a.choose(TRAIN, 20, iteration=3)
    assert first["id"].tolist() == b.choose(TRAIN, 20, iteration=3)["id"].tolist()
    assert first["id"].is_unique and first["id"].tolist() != a.choose(TRAIN, 20, iteration=4)["id"].tolist()
    assert sorted(a.choose(TRAIN, 40, iteration=1)["id"]) == sorted(TRAIN["id"])  # arms run out, mass moves on
    greedy = Curriculum(config(temperature=0.01, epsilon=0.0), seed=7)
    greedy.arms = {"mul/2": {"value": 0.5, "count": 1, "reward": 0.5, "cursor": 0}}
    assert set(greedy.choose(TRAIN, 8, iteration=1)["id"]) <= set(MUL2)


def test_within_arm_cursor_walks_on_across_iterations():
    only = Curriculum(config(category=["family"], temperature=0.01, epsilon=0.0), seed=1)
    only.arms = {"add": {"value": 0.5, "count": 0, "reward": None, "cursor": 0}}
    seen = []
    for iteration in range(1, 5):  # 4 x 5 = the 20 add problems, each once
        batch = only.choose(TRAIN, 5, iteration)
        assert set(batch["family"]) == {"add"}
        seen += batch["id"].tolist()
        only.update(iteration, *frames({pid: [1, 0] for pid in batch["id"]}, iteration))
    assert sorted(seen) == sorted(TRAIN.loc[TRAIN["family"] == "add", "id"])


def test_frozen_stops_values_but_not_the_cursor():
    curriculum = Curriculum(config(frozen=True), seed=0)
    curriculum.arms = {"add/1": {"value": 0.1, "count": 3, "reward": 0.2, "cursor": 4}}
    report = curriculum.update(1, *frames({ADD1[0]: [1, 0, 0, 0], MUL2[0]: [1, 1, 0, 0]}))
    assert report["frozen"] and curriculum.arms["add/1"] == {"value": 0.1, "count": 3, "reward": 0.2, "cursor": 5}
    assert curriculum.arms["mul/2"] == {"value": 0.0, "count": 0, "reward": None, "cursor": 1}


def test_save_load_round_trip_resumes_the_same_batch(tmp_path):
    curriculum = build_coevolver(config(), seed=5)
    curriculum.update(1, *frames({ADD1[0]: [1, 0, 0, 0], MUL2[0]: [1, 1, 0, 0]}))
    digest = curriculum.save(tmp_path / "v1")
    loaded = load_coevolver(tmp_path / "v1", curriculum.cfg, seed=5)
    assert isinstance(loaded, Curriculum) and loaded == curriculum and loaded.save(tmp_path / "v2") == digest
    assert loaded.choose(TRAIN, 12, 2)["id"].tolist() == curriculum.choose(TRAIN, 12, 2)["id"].tolist()
    manifest = json.loads((tmp_path / "v1" / "manifest.json").read_text())
    assert manifest["kind"] == "curriculum" and sorted(manifest["files"]) == ["state.json"]
    with pytest.raises(CoevolverDirError, match="coevolver.curriculum.category"):
        load_coevolver(tmp_path / "v1", config(category=["family"]), seed=5)


def test_tampered_state_rejected(tmp_path):
    curriculum = Curriculum(config(), seed=0)
    curriculum.update(1, *frames({ADD1[0]: [1, 0, 0, 0]}))
    curriculum.save(tmp_path / "c")
    path = tmp_path / "c" / "state.json"
    path.write_text(path.read_text().replace('"cursor": 1', '"cursor": 2'))
    with pytest.raises(CoevolverDirError, match="state.json"):
        load_coevolver(tmp_path / "c", curriculum.cfg, seed=0)


def test_missing_category_column_names_setting_and_file():
    train = TRAIN.copy()
    train.attrs["path"] = "data/problems/train.parquet"
    with pytest.raises(
        InputError, match=r"data/problems/train.parquet: coevolver.curriculum.category names column 'topic'"
    ):
        Curriculum(config(category=["topic"]), seed=0).choose(train, 4, 1)
    train["user_fields"] = [
        json.dumps({"topic": "t" + str(i % 3)}) for i in range(len(train))
    ]  # a user file's own field
    assert categories(train, ["topic", "level"]).nunique() == 6


def test_plain_driver_runs_curriculum(tmp_path):
    from coevo.driver import train

    cfg = tiny_config(tmp_path, coevolver={"kind": "curriculum"}, problems={"max_digits": 2})
    train(cfg)
    report = json.loads((cfg.run.out_dir / "reports" / "iter_0002.json").read_text())
    assert report["iteration"] == 2 and report["arms"] and all(a["category"].count("/") == 1 for a in report["arms"])
    assert sum(d["groups"] for d in report["drawn"]) == cfg.rollout.problems_per_iter
    metrics = [json.loads(line) for line in (cfg.run.out_dir / "metrics.jsonl").read_text().splitlines()]
    assert all(0.0 <= m["coevo/zero_var_share"] <= 1.0 for m in metrics)
    for arm in report["arms"]:  # each category's value and draw probability: one curve per arm
        assert metrics[-1][f"curriculum/value/{arm['category']}"] == pytest.approx(arm["value"])
        assert metrics[-1][f"curriculum/prob/{arm['category']}"] == pytest.approx(arm["prob"])
    state = json.loads((cfg.run.out_dir / "coevolver" / "iter_0002" / "state.json").read_text())
    assert sum(arm["cursor"] for arm in state["arms"].values()) == 2 * cfg.rollout.problems_per_iter
    out = cfg.run.out_dir
    with Catalog(tmp_path / "catalog.duckdb") as catalog:  # the report lands in the curriculum_values view
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
        values = catalog.curriculum_values()
    last = values[values["iteration"] == 2].set_index("category")
    assert last["value"].to_dict() == {a["category"]: a["value"] for a in report["arms"]}
    shown = CliRunner().invoke(query_app, ["curriculum", "--catalog", str(tmp_path / "catalog.duckdb"), "--json"])
    assert shown.exit_code == 0 and len(json.loads(shown.stdout)) == len(values)
    report["arms"][0]["count"] = "many"
    (out / "reports" / "iter_0002.json").write_text(json.dumps(report))
    with Catalog(tmp_path / "catalog.duckdb") as catalog, pytest.raises(SchemaError, match="iter_0002.json"):
        catalog.ingest_iteration(
            2,
            out / "rollouts" / "iter_0002.parquet",
            out / "rewards" / "iter_0002.parquet",
            out / "reports" / "iter_0002.json",
        )


def test_zero_variance_share_counts_constant_groups():
    _, rollouts, rewards = frames({ADD1[0]: [0, 0], ADD1[1]: [1, 0], ADD1[2]: [1, 1], ADD1[3]: [0, 1]})
    assert zero_variance_share(rollouts, rewards) == 0.5
    tester = rollouts.assign(rollout_id=rollouts["rollout_id"] + "t", role="tester")  # a group per problem and role
    both = (
        pd.concat([rollouts, tester]),
        pd.concat([rewards, rewards.assign(rollout_id=tester["rollout_id"], reward=1.0)]),
    )
    assert zero_variance_share(*both) == 0.75


def test_config_rejects_bad_curriculum_settings():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="temperature"):
        CurriculumConfig(temperature=0)
    with pytest.raises(ValidationError, match="categry"):
        CurriculumConfig(categry=["family"])
    with pytest.raises(ValidationError, match="category"):
        CurriculumConfig(category=[])


PROPOSING = {"enabled": True, "band": 0.45, "promote_above": 0.95, "min_samples": 2, "per_iter": 8}


def test_proposer_grows_the_training_split_the_stages_draw_from(tmp_path):
    from coevo.driver import train
    from coevo.io import hash_file
    from coevo.layout import RunLayout
    from coevo.problems.splits import SPLITS
    from coevo.records import Artifact, Splits
    from coevo.stages.in_force import in_force
    from coevo.stages.verify import verify_stage
    from coevo.store.tables import problems, training_split

    # 16 problems a batch and band 0.49 (pass rates 0.01-0.99 are the frontier): whether the tiny
    # 30-step bootstrap's first batch of 4 passed 5% of a category was luck of the draw, and the unseen
    # splits drew one that does not
    proposing = {**PROPOSING, "band": 0.49, "promote_above": 0.99}
    cfg = tiny_config(
        tmp_path,
        coevolver={"kind": "curriculum", "curriculum": {"proposer": proposing}},
        rollout={"problems_per_iter": 16},
    )
    train(cfg)
    layout, data = RunLayout(cfg.run.out_dir), cfg.problems.data_dir
    split = {name: Artifact(str(data / f"{name}.parquet"), hash_file(data / f"{name}.parquet")) for name in SPLITS}
    prepared = Splits(**split, dvc_md5="")  # in_force reads the train split only
    report = json.loads(layout.report(1).read_text())["proposer"]
    assert (
        report["accepted"] == report["total"] > 0
        and sum(t["accepted"] for t in report["targets"]) == report["accepted"]
    )
    saved = load_coevolver(layout.coevolver(1), cfg.coevolver_list[0], cfg.seed).proposals
    assert len(saved) == report["total"] and saved["id"].str.startswith("p1-").all()
    held_out = pd.concat([problems(data / "test.parquet"), problems(data / "val.parquet")])
    assert not _operand_keys(saved) & _operand_keys(held_out)  # test and validation stay held out
    train_split = problems(data / "train.parquet")
    assert len(training_split(in_force(cfg, 1, prepared))) == len(
        train_split
    )  # iteration 1 draws from the bootstrap's version
    grown = training_split(in_force(cfg, 2, prepared))
    assert len(grown) == len(train_split) + len(saved) and grown["id"].is_unique
    metrics = [json.loads(line) for line in (cfg.run.out_dir / "metrics.jsonl").read_text().splitlines()]
    assert metrics[0]["coevo/proposals_total"] == report["total"]
    # a rollout of a proposed problem is verified against the proposal's own answer
    rollouts = (
        pd.read_parquet(layout.rollouts(2))
        .head(1)
        .assign(problem_id=saved["id"][0], completion=f"{saved['answer'][0]}")
    )
    rollouts.to_parquet(tmp_path / "one.parquet")
    rewards = pd.read_parquet(verify_stage(cfg, in_force(cfg, 2, prepared), str(tmp_path / "one.parquet")).path)
    assert rewards["passed"].tolist() == [True]


def _operand_keys(frame: pd.DataFrame) -> set[tuple]:
    """Each problem's family and operands (commuted operands of + and * alike), whatever its wording."""
    from coevo.problems.proposer import parse_question, problem_key

    return {problem_key(family, operands) for _, family, operands in map(parse_question, frame["prompt"])}


def test_proposer_settings_need_arithmetic_and_another_kind_reads_none_of_them(tmp_path):
    from coevo.coevolvers.composite import build_coevolvers
    from coevo.config import ConfigError

    cfg = tiny_config(tmp_path, coevolver={"kind": "skill_bank", "curriculum": {"proposer": PROPOSING}})
    assert type(build_coevolvers(cfg)).__name__ == "SkillBank"  # no curriculum, so no proposer, is built
    with pytest.raises(ConfigError, match="needs problems.source: arithmetic .*proposer.enabled=false"):
        tiny_config(
            tmp_path,
            problems={"source": "constraints"},
            coevolver={"kind": "curriculum", "curriculum": {"proposer": PROPOSING}},
        )
    with pytest.raises(ConfigError, match="coevolver\\[1\\].curriculum.proposer.enabled needs .*source 'constraints'"):
        tiny_config(
            tmp_path,
            problems={"source": "constraints"},
            coevolver=[{"kind": "skill_bank"}, {"kind": "curriculum", "curriculum": {"proposer": PROPOSING}}],
        )
