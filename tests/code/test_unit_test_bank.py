"""The test-bank co-evolver (kind unit_tests): admission from CURE facts, cap, retirement, versioned save/load."""

from __future__ import annotations

import pandas as pd
import pytest

from coevo.coevolvers.base import CoEvolver, CoevolverDirError, KeepsTests, read_manifest
from coevo.coevolvers.unit_tests import TestBank
from coevo.config import CoevolverConfig


def frames(rows: list[tuple[str, str, str, str]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """rows: (problem id, role, completion, details)."""
    ids = [f"r{i}" for i in range(len(rows))]
    rollouts = pd.DataFrame(
        {
            "rollout_id": ids,
            "problem_id": [p for p, *_ in rows],
            "role": [r for _, r, _, _ in rows],
            "completion": [c for *_, c, _ in rows],
        }
    )
    return rollouts, pd.DataFrame({"rollout_id": ids, "details": [d for *_, d in rows]})


GOOD = "role=tester accurate=1 rejected=2 decidable=1 wrong=3"


def test_admits_only_accurate_decidable_discriminating_tests(tmp_path):
    bank = TestBank(CoevolverConfig(kind="unit_tests", unit_tests={"max_per_problem": 2}), seed=0)
    assert isinstance(bank, CoEvolver) and isinstance(bank, KeepsTests)
    rollouts, rewards = frames([
        ("p", "tester", "3)==6", GOOD),
        ("p", "tester", "4)==9", "role=tester accurate=0 rejected=0 decidable=1 wrong=3"),  # inaccurate
        ("p", "tester", "5)==8", "role=tester accurate=1 rejected=2 decidable=0 wrong=8"),  # no correct solution
        ("p", "tester", "6)==9", "role=tester accurate=1 rejected=0 decidable=1 wrong=0"),  # rejects nothing
        ("p", "tester", "3)==6", GOOD),  # duplicate
        ("q", "tester", "1)==1", GOOD),
        ("q", "solver", "x+1", "role=solver verdict=passed passed=4/4 correct=1 bank_fail=-"),
    ])  # fmt: skip
    report = bank.update(1, pd.DataFrame(), rollouts, rewards)
    assert bank.tests_for("p") == ["assert f(3)==6"] and bank.tests_for("q") == ["assert f(1)==1"]
    assert report["duplicates"] == 1 and report["size"] == 2
    assert [e["reason"] for e in report["admitted"]] == ["unit test: assert f(3)==6", "unit test: assert f(1)==1"]
    rollouts, rewards = frames([("p", "tester", "7)==10", GOOD), ("p", "tester", "8)==11", GOOD)])
    bank.update(2, pd.DataFrame(), rollouts, rewards)
    assert bank.tests_for("p") == ["assert f(7)==10", "assert f(8)==11"]  # capped at 2, oldest dropped
    # a correct solution failed bank test 0 of p: retired; a wrong one failing test 1 retires nothing
    rollouts, rewards = frames([
        ("p", "solver", "x+3", "role=solver verdict=passed passed=4/4 correct=1 bank_fail=0"),
        ("p", "solver", "x+4", "role=solver verdict=failed passed=0/4 correct=0 bank_fail=1"),
    ])  # fmt: skip
    report = bank.update(3, pd.DataFrame(), rollouts, rewards)
    assert bank.tests_for("p") == ["assert f(8)==11"] and [e["test"] for e in report["retired"]] == ["assert f(7)==10"]
    assert bank.retired[0]["retired_iter"] == 3
    assert bank.teacher_context({"id": "p"}) == ["assert f(8)==11"] and bank.context_for({"id": "p"}) == []

    first = bank.save(tmp_path / "v3")
    loaded = TestBank.load(tmp_path / "v3", CoevolverConfig(kind="unit_tests"), 0)
    assert loaded.tests == bank.tests and loaded.retired == bank.retired and loaded.version == 3
    assert loaded.save(tmp_path / "again") == first  # same content, same hash
    assert read_manifest(tmp_path / "v3")["size"] == 2
    (tmp_path / "v3" / "tests.jsonl").write_text("{}\n")
    with pytest.raises(CoevolverDirError, match="tests.jsonl: content does not match"):
        TestBank.load(tmp_path / "v3", CoevolverConfig(kind="unit_tests"), 0)
    (tmp_path / "again" / "manifest.json").write_text('{"kind": "unit_tests", "files": ')  # damaged manifest
    with pytest.raises(CoevolverDirError, match="again/manifest.json: cannot read the co-evolver manifest"):
        TestBank.load(tmp_path / "again", CoevolverConfig(kind="unit_tests"), 0)


def test_frozen_bank_never_changes():
    bank = TestBank(CoevolverConfig(kind="unit_tests", frozen=True), seed=0)
    rollouts, rewards = frames([("p", "tester", "3)==6", GOOD)])
    assert bank.update(1, pd.DataFrame(), rollouts, rewards)["admitted"] == [] and bank.size() == 0
