"""Several co-evolvers in one run (`coevolver:` a list): params validation, roles, the saved list, a run.

The list's members are real co-evolvers (a curriculum and a skill bank); the run goes through the
plain driver with the tiny policy and is audited with the real lineage check.
"""

from __future__ import annotations

import json

import pytest

from coevo.coevolvers.base import CoevolverDirError, read_manifest
from coevo.coevolvers.composite import CoEvolverList, CoevolverRoleError, build_coevolvers, load_coevolvers
from coevo.config import ConfigError
from coevo.stages.prepare import prepare_stage
from coevo.store.lineage import read_record, verify_lineage

from ..conftest import tiny_config

PAIR = [{"kind": "curriculum"}, {"kind": "skill_bank"}]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"coevolver": []}, r"tiny.yaml: coevolver: an empty list"),
        (
            {"coevolver": [{"kind": "curriculum"}, {"kind": "none"}]},
            r"coevolver\[1\]\.kind: 'none' cannot be combined",
        ),
        (
            {"coevolver": [{"kind": "skill_bank"}, {"kind": "curriculum"}, {"kind": "skill_bank"}]},
            r"coevolver\[2\]\.kind: 'skill_bank' is already coevolver\[0\]",
        ),
        ({"coevolver": [{"kind": "curriculum"}, {"kind": "skil_bank"}]}, r"tiny.yaml: coevolver\.1\.kind: Input"),
        ({"coevolver": {"kind": "skil_bank"}}, r"tiny.yaml: coevolver\.kind: Input"),  # one error, not one per shape
        ({"coevolver": 3}, r"tiny.yaml: coevolver: Input should be a valid dictionary"),
    ],
)
def test_bad_coevolver_settings_are_clear_params_errors(tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message) as raised:
        tiny_config(tmp_path, **overrides)
    assert len(str(raised.value).splitlines()) == 1


def test_the_former_coevolvers_key_is_an_error_that_says_where_the_list_goes(tmp_path):
    with pytest.raises(
        ConfigError, match=r"tiny.yaml: coevolvers: no longer a setting; write the list under `coevolver`"
    ):
        tiny_config(tmp_path, coevolvers=[{"kind": "curriculum"}, {"kind": "skill_bank"}])
    with pytest.raises(ConfigError, match=r"tiny.yaml: coevolvers: no longer a setting"):
        tiny_config(tmp_path, coevolvers=None)  # the old params.yaml's `coevolvers: null` too


def test_the_single_coevolver_params_keep_working(tmp_path):
    cfg = tiny_config(tmp_path, coevolver={"kind": "memory"})
    assert [entry.kind for entry in cfg.coevolver_list] == ["memory"]
    assert build_coevolvers(cfg).kind == "memory"  # not wrapped: its artifacts and hashes are as before
    assert cfg.model_dump()["coevolver"]["kind"] == "memory"  # dumps (lineage, MLflow, compare) as the mapping
    one = tiny_config(tmp_path, coevolver=[{"kind": "memory"}])  # a one-entry list is the same setting
    assert one == cfg and one.model_dump() == cfg.model_dump()


def test_the_run_coevolver_kind_override_still_sets_the_single_coevolver(tmp_path):
    """`--set coevolver.kind=curriculum` over params.yaml's mapping."""
    from coevo.config import parse_overrides

    cfg = tiny_config(tmp_path, **parse_overrides(["coevolver.kind=curriculum", "coevolver.frozen=true"]))
    assert [(entry.kind, entry.frozen) for entry in cfg.coevolver_list] == [("curriculum", True)]


def test_a_list_validates_each_entry_and_round_trips_through_its_dump(tmp_path):
    from coevo.config import Config

    cfg = tiny_config(tmp_path, coevolver=[{"kind": "curriculum"}, {"kind": "skill_bank", "frozen": True}])
    assert [(entry.kind, entry.frozen) for entry in cfg.coevolver_list] == [("curriculum", False), ("skill_bank", True)]
    dumped = cfg.model_dump(mode="json")
    assert [entry["kind"] for entry in dumped["coevolver"]] == ["curriculum", "skill_bank"]
    assert Config.model_validate(dumped) == cfg  # the flows and the update ranks re-read the dump


def test_two_members_of_one_role_stop_the_run_before_anything_is_written(tmp_path):
    cfg = tiny_config(tmp_path, coevolver=[{"kind": "skill_bank"}, {"kind": "memory"}])
    with pytest.raises(
        CoevolverRoleError,
        match=r"coevolver\[0\] \(skill_bank\) and coevolver\[1\] \(memory\) both play the 'context' role",
    ):
        prepare_stage(cfg)
    assert not cfg.problems.data_dir.exists()


def test_a_saved_list_round_trips_and_names_a_tampered_member_file(tmp_path):
    cfg = tiny_config(tmp_path, coevolver=PAIR)
    first = build_coevolvers(cfg)
    assert isinstance(first, CoEvolverList) and first.roles == {"problems", "context"}
    content_hash = first.save(tmp_path / "v0")
    manifest = read_manifest(tmp_path / "v0")
    assert manifest["kind"] == "list" and [m["kind"] for m in manifest["members"]] == ["curriculum", "skill_bank"]
    assert all(name.split("/")[0] in {"0-curriculum", "1-skill_bank"} for name in manifest["files"])
    assert load_coevolvers(tmp_path / "v0", cfg).save(tmp_path / "v1") == content_hash  # load + save is the identity

    member_file = next(p for p in sorted((tmp_path / "v0" / "1-skill_bank").iterdir()) if p.name != "manifest.json")
    member_file.write_bytes(member_file.read_bytes() + b" ")
    with pytest.raises(CoevolverDirError, match=rf"{member_file}: content does not match"):
        load_coevolvers(tmp_path / "v0", cfg)
    swapped = tiny_config(tmp_path, coevolver=list(reversed(PAIR)))
    with pytest.raises(
        CoevolverDirError,
        match=r"holds co-evolvers \['curriculum', 'skill_bank'\] but params list \['skill_bank', 'curriculum'\]",
    ):
        load_coevolvers(tmp_path / "v1", swapped)


def test_a_run_with_two_coevolvers_records_both_versions_in_the_lineage(tmp_path):
    """... and obeys both roles: the curriculum chooses the batch the rollouts draw, the skill bank
    plans the variants they sample (a stage that drew uniformly, or rolled out solo, fails here). A
    longer bootstrap makes some groups pass, so the bank writes a candidate iteration 2 probes."""
    from coevo.driver import train
    from schemas.rollouts import read_rollouts

    cfg = tiny_config(tmp_path, coevolver=PAIR, bootstrap={"steps": 300}, run={"retention": {"keep_last": None}})
    summary = train(cfg)
    assert_roles_obeyed(cfg, 2)
    assert "probe" in set(read_rollouts(cfg.run.out_dir / "rollouts" / "iter_0002.parquet")["variant"]), (
        "no skill probed: the context check compared solo with solo"
    )
    layout_root = cfg.run.out_dir
    record = read_record(layout_root / "checkpoints" / "iter_0002")
    members = record["coevolver"]["members"]
    assert [m["kind"] for m in members] == ["curriculum", "skill_bank"]
    saved = read_manifest(layout_root / record["coevolver"]["path"])["members"]
    assert [m["content_hash"] for m in members] == [m["content_hash"] for m in saved]
    assert verify_lineage(layout_root / "checkpoints" / "iter_0002") == []
    report = json.loads((layout_root / "reports" / "iter_0002.json").read_text())
    assert set(report["members"]) == {"0-curriculum", "1-skill_bank"}
    assert summary["final_eval"]["iteration"] == 2


def assert_roles_obeyed(cfg, iterations: int) -> None:
    """Each iteration's rollouts are the batch the `problems` player chose and the variants the
    `context` player planned, both re-asked from the co-evolver version the iteration ran with (their
    choices are pure functions of the saved version, the seed and the iteration). Read where the
    choice is used: the problems and variants actually sampled, not the co-evolver's own counts."""
    import pandas as pd

    from coevo.coevolvers.base import uniform_batch
    from coevo.coevolvers.composite import coevolver_at
    from coevo.io import hash_file
    from coevo.layout import RunLayout
    from coevo.records import Artifact, Splits
    from coevo.stages.in_force import in_force
    from coevo.store.tables import training_split
    from schemas.rollouts import read_rollouts

    layout = RunLayout(cfg.run.out_dir)
    train = cfg.problems.data_dir / "train.parquet"
    split = Artifact(str(train), hash_file(train))
    data = Splits(split, split, split, dvc_md5="")  # in_force reads the train split only
    for it in range(1, iterations + 1):
        evolver = coevolver_at(cfg, it, layout.coevolver(it - 1))
        chooser = evolver.player["problems"] if isinstance(evolver, CoEvolverList) else evolver
        split, n = training_split(in_force(cfg, it, data)), cfg.rollout.problems_per_iter
        chosen = chooser.choose(split, n, it)
        uniform = set(uniform_batch(split, n, cfg.seed, it)["id"])
        assert set(chosen["id"]) != uniform, "the check cannot tell the chooser from the uniform sampler here"
        drawn = read_rollouts(layout.rollouts(it))
        assert sorted(drawn["problem_id"].unique()) == sorted(chosen["id"]), (
            f"iteration {it} drew other problems than the chooser chose"
        )
        planner = evolver.player["context"] if isinstance(evolver, CoEvolverList) else evolver
        planned = pd.DataFrame(
            [
                {
                    "problem_id": v.problem_id,
                    "variant": v.variant,
                    "probe_skill": v.probe_skill,
                    "skills": list(v.skills),
                }
                for v in planner.plan(chosen, cfg.rollout.group_size)
                for _ in range(v.n)
            ]
        )
        sampled = drawn[["problem_id", "variant", "probe_skill", "skills"]].assign(
            skills=lambda f: f["skills"].map(list)
        )
        key = lambda f: sorted(map(repr, f.to_dict("records")))  # noqa: E731
        assert key(sampled) == key(planned), f"iteration {it} sampled other context variants than the planner planned"
