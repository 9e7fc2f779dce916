"""The test-bank co-evolver: admission from CURE facts, cap, retirement, versioned save/load."""

from __future__ import annotations

import pandas as pd
import pytest

from coevo.code.unit_test_bank import TESTER_SUFFIX, TestBank
from coevo.coevolvers.base import CoEvolver, read_manifest
from coevo.config import CoevolverConfig, CureConfig


def frames(rows: list[tuple[str, str, str]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """rows: (problem id, tester completion, details)."""
    ids = [f"r{i}" for i in range(len(rows))]
    rollouts = pd.DataFrame(
        {
            "rollout_id": ids,
            "problem_id": [p + TESTER_SUFFIX for p, _, _ in rows],
            "completion": [c for _, c, _ in rows],
        }
    )
    return rollouts, pd.DataFrame({"rollout_id": ids, "details": [d for _, _, d in rows]})


GOOD = "role=tester accurate=1 rejected=2 decidable=1 wrong=3"


def test_admits_only_accurate_decidable_discriminating_tests(tmp_path):
    bank = TestBank(CoevolverConfig(), seed=0, cure=CureConfig(bank_max_per_problem=2))
    assert isinstance(bank, CoEvolver)
    rollouts, rewards = frames([
        ("p", "3)==6", GOOD),
        ("p", "4)==9", "role=tester accurate=0 rejected=0 decidable=1 wrong=3"),  # inaccurate
        ("p", "5)==8", "role=tester accurate=1 rejected=2 decidable=0 wrong=8"),  # no correct solution
        ("p", "6)==9", "role=tester accurate=1 rejected=0 decidable=1 wrong=0"),  # rejects nothing
        ("p", "3)==6", GOOD),  # duplicate
        ("q", "1)==1", GOOD),
    ])  # fmt: skip
    report = bank.update(1, pd.DataFrame(), rollouts, rewards)
    assert bank.tests_for("p") == ["assert f(3)==6"] and bank.tests_for("q") == ["assert f(1)==1"]
    assert report["duplicates"] == 1 and report["size"] == 2
    rollouts, rewards = frames([("p", "7)==10", GOOD), ("p", "8)==11", GOOD)])
    bank.update(2, pd.DataFrame(), rollouts, rewards)
    assert bank.tests_for("p") == ["assert f(7)==10", "assert f(8)==11"]  # capped at 2, oldest dropped
    assert bank.retire(3, "p", "assert f(7)==10", "rejected a correct solution")
    assert not bank.retire(3, "p", "assert f(7)==10", "again")
    assert bank.teacher_context({"id": "p"}) == ["assert f(8)==11"] and bank.context_for({"id": "p"}) == []

    first = bank.save(tmp_path / "v2")
    loaded = TestBank.load(tmp_path / "v2", CoevolverConfig(), 0)
    assert loaded.tests == bank.tests and loaded.retired == bank.retired and loaded.version == 2
    assert loaded.save(tmp_path / "again") == first  # same content, same hash
    assert read_manifest(tmp_path / "v2")["size"] == 2
    (tmp_path / "v2" / "tests.jsonl").write_text("{}\n")
    with pytest.raises(ValueError, match="tests.jsonl: content does not match"):
        TestBank.load(tmp_path / "v2", CoevolverConfig(), 0)


def test_frozen_bank_never_changes():
    bank = TestBank(CoevolverConfig(frozen=True), seed=0)
    rollouts, rewards = frames([("p", "3)==6", GOOD)])
    assert bank.update(1, pd.DataFrame(), rollouts, rewards)["admitted"] == [] and bank.size() == 0
