"""Synthetic code family, code prepare (parquet splits under both schemas) and the verification
stage dispatching code families to the sandboxed verifier with verdict details."""

from __future__ import annotations

import pandas as pd
import pytest

from coevo.code.problems import (
    from_problems_frame,
    generate_synthetic,
    program_of,
    to_problems_frame,
)
from coevo.code.sources import prepare_code_problems
from coevo.sandbox import Job, run_jobs
from coevo.verification.stage import verify_rollouts
from schemas.code import validate_code_problems
from schemas.errors import SchemaError
from schemas.problems import read_problems
from schemas.rewards import parse_details, validate_rewards
from tests.conftest import tiny_config


def test_synthetic_family_is_deterministic_disjoint_and_solved_by_its_reference():
    train, test = generate_synthetic(["code-add", "code-sub", "code-mul"], 60, 12, 4, 4, seed=3)
    again, _ = generate_synthetic(["code-add", "code-sub", "code-mul"], 60, 12, 4, 4, seed=3)
    pd.testing.assert_frame_equal(train, again)
    assert set(train["prompt"]).isdisjoint(test["prompt"])
    row = train.iloc[0]
    assert row["prompt"].startswith("#f(0)=") and row["prompt"].endswith("def f(x): return ") and len(row["tests"]) == 4
    both = pd.concat([train, test])
    verdicts = run_jobs(
        [Job(program_of(p, s), tuple(t)) for p, s, t in zip(both["prompt"], both["solution"], both["tests"])]
    )
    assert all(v.passed for v in verdicts)
    wrong = run_jobs(
        [
            Job(program_of(p, s + "+1"), tuple(t))
            for p, s, t in zip(train["prompt"][:6], train["solution"][:6], train["tests"][:6])
        ]
    )
    assert all(v.status == "failed" and v.failed_test == 0 for v in wrong)


def test_prepare_writes_validated_parquet_splits(tmp_path):
    cfg = tiny_config(tmp_path, problems={"source": "code-synth"}, code={"synth": {"n_train": 30, "n_test": 6}})
    train, test = prepare_code_problems(cfg)
    assert (len(train), len(test)) == (30, 6)
    stored = read_problems(cfg.problems.data_dir / "train.parquet")  # the ordinary problems table
    pd.testing.assert_frame_equal(from_problems_frame(stored), train)
    he = tiny_config(tmp_path / "he", problems={"source": "humaneval", "test_fraction": 0.25})
    he_train, he_test = prepare_code_problems(he)
    he_val = read_problems(he.problems.data_dir / "val.parquet")  # problems.val_fraction 0.1: 16 of 164
    assert len(he_train) + len(he_val) + len(he_test) == 164 and len(he_test) == 41 and len(he_val) == 16


def test_code_schema_rejects_bad_rows():
    train, _ = generate_synthetic(["code-add"], 3, 1, 4, 4, seed=0)
    bad = train.copy()
    bad.at[1, "tests"] = []
    bad.at[2, "entry_point"] = " "
    with pytest.raises(SchemaError) as err:
        validate_code_problems(bad, "mine")
    assert "row 1, field 'tests'" in str(err.value) and "row 2, field 'entry_point'" in str(err.value)


def test_verification_stage_dispatches_by_family():
    train, _ = generate_synthetic(["code-add"], 2, 1, 4, 4, seed=0)
    math = pd.DataFrame({"id": ["m1"], "family": ["add"], "level": [1], "prompt": ["2+2="], "answer": ["4"]})
    problems = pd.concat([to_problems_frame(train), math], ignore_index=True)
    p0, p1 = train["id"]
    rollouts = pd.DataFrame({
        "rollout_id": ["r0", "r1", "r2", "r3"], "iteration": [1] * 4, "problem_id": [p0, "m1", p1, p0],
        "completion": [train.loc[0, "solution"], "4", "x*(", "while True: pass"],
    })  # fmt: skip
    rewards = validate_rewards(verify_rollouts(rollouts, problems), "test")
    assert rewards["passed"].tolist() == [True, True, False, False]
    assert rewards["verifier"].tolist() == ["code_tests", "math_exact", "code_tests", "code_tests"]
    details = [parse_details(d) for d in rewards["details"]]
    assert details[0]["verdict"] == "passed" and details[0]["passed"] == "4/4"
    assert details[2]["verdict"] == "invalid"
    assert details[3]["verdict"] in ("failed", "invalid")  # "return while True: pass" does not compile
    assert parse_details(rewards["details"][1]) == {"extracted": "4", "expected": "4"}
