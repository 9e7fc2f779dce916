"""Co-evolver registry and the "none" co-evolver (plain GRPO)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from coevo.coevolvers import (
    NoCoEvolver,
    SkillBank,
    build_coevolver,
    coevolver_kinds,
    load_coevolver,
    register_coevolver,
)
from coevo.config import CoevolverConfig

PROBLEMS = pd.DataFrame(
    {"id": ["p1", "p2"], "family": ["add", "mul"], "level": [1, 1], "prompt": ["3+4=", "7*8="], "answer": ["7", "56"]}
)


def test_builtin_kinds_registered():
    assert coevolver_kinds() == ["curriculum", "harness", "memory", "none", "rubrics", "skill_bank", "unit_tests"]
    assert isinstance(build_coevolver(CoevolverConfig(), seed=0), SkillBank)
    assert isinstance(build_coevolver(CoevolverConfig(kind="none"), seed=0), NoCoEvolver)


def test_duplicate_registration_rejected():
    with pytest.raises(ValueError, match="already registered"):
        register_coevolver("skill_bank")(type("Impostor", (), {}))
    assert build_coevolver(CoevolverConfig(), seed=0).__class__ is SkillBank


def test_none_plans_solo_and_never_evolves(tmp_path):
    none = build_coevolver(CoevolverConfig(kind="none"), seed=0)
    variants = none.plan(PROBLEMS, group_size=8)
    assert [(v.problem_id, v.variant, v.n, v.skills, v.probe_skill) for v in variants] == [
        ("p1", "solo", 8, (), ""),
        ("p2", "solo", 8, (), ""),
    ]
    problem = PROBLEMS.iloc[0].to_dict()
    assert none.context_for(problem) == none.teacher_context(problem) == []
    rollouts = pd.DataFrame({"rollout_id": ["r0"], "problem_id": ["p1"], "variant": ["solo"], "completion": ["7"]})
    assert (
        none.update(1, PROBLEMS, rollouts, pd.DataFrame({"rollout_id": ["r0"], "reward": [1.0], "passed": [True]}))
        == {}
    )
    digest = none.save(tmp_path / "none")
    assert sorted(p.name for p in (tmp_path / "none").iterdir()) == ["manifest.json"]
    assert json.loads((tmp_path / "none" / "manifest.json").read_text())["kind"] == "none"
    loaded = load_coevolver(tmp_path / "none", CoevolverConfig(kind="none"), seed=0)
    assert isinstance(loaded, NoCoEvolver) and loaded.save(tmp_path / "again") == digest


def test_load_rejects_kind_mismatch(tmp_path):
    build_coevolver(CoevolverConfig(kind="none"), seed=0).save(tmp_path / "none")
    with pytest.raises(ValueError, match="holds a 'none' co-evolver"):
        load_coevolver(tmp_path / "none", CoevolverConfig(kind="skill_bank"), seed=0)
