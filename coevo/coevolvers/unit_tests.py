"""The test bank (`coevolver.kind: unit_tests`): generated unit tests that proved accurate and discriminating.

Method: the unit-tester side of CURE keeps what its reward measures. With `rollout.roles: [solver,
tester]`, the verification stage rewards both roles from one pass table (coevo/code/execution.py);
a tester sample's test enters the bank when, in that table, it was
- accurate on a decidable table: at least one solution the judge in force calls correct (the hidden
  tests, or under `code.cure.truth: generated` the consensus of the generated tests), and every such
  solution passed this test, and
- discriminating: it rejected at least one solution the judge calls wrong.
The bank's tests join every later pass table (re-run against the iteration's solutions, and under
`truth: generated` part of the consensus); one that a correct solution fails is retired. The bank
plays the "reward" role of a co-evolver list (it is what the reward judges by); its directory holds
tests.jsonl, retired.jsonl and the manifest (coevo/coevolvers/base.py), one version per iteration.
The evolution report's `admitted` and `retired` entries (id = sha256 of problem and test, first 12
hex digits) are the catalog's events with reason "unit test: <test>" (view `unit_tests`).

Choices where the paper is silent (it keeps no bank; its tests live one step):
1. Admission needs a decidable table; the paper's reward treats an empty correct set vacuously.
2. At most `coevolver.unit_tests.max_per_problem` tests per problem; beyond it the oldest are dropped.
3. The bank is reward and teacher context, not rollout context: `plan` is one solo variant per
   problem and `context_for` is empty, so the solver is evaluated without the tests.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from coevo.code.problems import generated_test
from coevo.coevolvers.base import TextGenerator, read_artifact, register_coevolver, save_artifact
from coevo.config import CoevolverConfig
from coevo.io import hash_bytes
from coevo.rollout.roles import SOLVER, TESTER
from coevo.types import ContextVariant
from schemas.rewards import parse_details
from schemas.skill_events import UNIT_TEST


def test_id(problem_id: str, test: str) -> str:
    return hash_bytes(f"{problem_id}\0{test}".encode())[:12]


@register_coevolver("unit_tests")
class TestBank:
    kind: str
    roles: frozenset[str] = frozenset({"reward"})
    __test__ = False  # not a pytest class

    def __init__(self, cfg: CoevolverConfig, seed: int, generate: TextGenerator | None = None):
        self.cfg, self.seed, self.frozen = cfg, seed, cfg.frozen
        self.tests: dict[str, list[dict]] = {}  # problem id -> entries {test, added_iter, rejected}
        self.retired: list[dict] = []
        self.version = 0

    # ---- contents ----
    def tests_for(self, problem_id: str) -> list[str]:
        """The problem's tests in the bank, oldest first (the order `bank_fail` indices refer to)."""
        return [entry["test"] for entry in self.tests.get(problem_id, [])]

    def size(self) -> int:
        return sum(len(entries) for entries in self.tests.values())

    # ---- the co-evolver protocol ----
    def plan(self, problems: pd.DataFrame, group_size: int) -> list[ContextVariant]:
        return [ContextVariant(problem_id=str(pid), variant="solo", n=group_size) for pid in problems["id"]]

    def context_for(self, problem: Mapping) -> list[str]:
        return []

    def teacher_context(self, problem: Mapping) -> list[str]:
        return self.tests_for(str(problem["id"]))

    def update(self, iteration: int, problems: pd.DataFrame, rollouts: pd.DataFrame, rewards: pd.DataFrame) -> dict:
        """Retire the bank tests a correct solution failed, then admit the tester samples whose details
        say accurate, decidable and rejecting >= 1 wrong solution."""
        report = {"iteration": iteration, "frozen": self.frozen, "admitted": [], "retired": [], "duplicates": 0}
        if not self.frozen:
            joined = rollouts[["rollout_id", "problem_id", "role", "completion"]].merge(
                rewards[["rollout_id", "details"]], on="rollout_id"
            )
            facts = [parse_details(details) for details in joined["details"]]
            failed = {
                (pid, int(i))
                for pid, role, fact in zip(joined["problem_id"], joined["role"], facts)
                if role == SOLVER and fact.get("correct") == "1"
                for i in fact.get("bank_fail", "-").split(",")
                if i != "-"
            }
            for pid, index in sorted(failed, key=lambda key: (key[0], -key[1])):  # later indices first
                entry = self.tests[pid].pop(index)
                self.retired.append({"problem_id": pid, **entry, "retired_iter": iteration})
                report["retired"].append(self._event(pid, entry["test"], "a correct solution failed it"))
            for row, fact in zip(joined.itertuples(), facts):
                if row.role != TESTER or not _admissible(fact):
                    continue
                test = generated_test(row.completion)
                if test in self.tests_for(row.problem_id):
                    report["duplicates"] += 1
                    continue
                entries = self.tests.setdefault(row.problem_id, [])
                entries.append({"test": test, "added_iter": iteration, "rejected": int(fact["rejected"])})
                del entries[: max(0, len(entries) - self.cfg.unit_tests.max_per_problem)]
                report["admitted"].append(self._event(row.problem_id, test, f"rejected {fact['rejected']}"))
            self.version += 1
        report["size"] = self.size()
        return report

    @staticmethod
    def _event(problem_id: str, test: str, why: str) -> dict:
        return {
            "id": test_id(problem_id, test),
            "problem_id": problem_id,
            "test": test,
            "reason": UNIT_TEST + test,
            "why": why,
        }

    def save(self, directory: Path) -> str:
        rows = [{"problem_id": pid, **entry} for pid in sorted(self.tests) for entry in self.tests[pid]]
        files = {
            "tests.jsonl": "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows).encode(),
            "retired.jsonl": "".join(json.dumps(r, sort_keys=True) + "\n" for r in self.retired).encode(),
        }
        return save_artifact(directory, self.kind, files, extra={"version": self.version, "size": self.size()})

    @classmethod
    def load(cls, directory: Path, cfg: CoevolverConfig, seed: int, generate: TextGenerator | None = None) -> TestBank:
        manifest, files = read_artifact(directory, cls.kind)
        bank = cls(cfg, seed)
        bank.version = int(manifest.get("version", 0))
        for line in files["tests.jsonl"].decode().splitlines():
            row = json.loads(line)
            bank.tests.setdefault(row.pop("problem_id"), []).append(row)
        bank.retired = [json.loads(line) for line in files["retired.jsonl"].decode().splitlines()]
        return bank


def _admissible(fact: Mapping[str, str]) -> bool:
    return fact.get("accurate") == "1" and fact.get("decidable") == "1" and int(fact.get("rejected", 0)) >= 1
