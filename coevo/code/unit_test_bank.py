"""The CURE test bank: generated unit tests that proved accurate and discriminating, versioned.

Method: the unit-tester side of CURE keeps what its reward
measures. A generated test enters the bank when, in the iteration's pass table, it was
- accurate on a decidable table: at least one sampled solution passed every ground-truth test, and
  every such solution passed this test (coevo/code/cure.py), and
- discriminating: it rejected at least one wrong solution.
Bank tests are re-run against every later iteration's solutions (the code loop appends them to the
jobs); one that rejects a solution passing every ground-truth test is retired (`retire`). The bank
is a co-evolver artifact: a directory with tests.jsonl, retired.jsonl and the manifest written by
coevo/coevolvers/base.py (content hash over the files), one version per iteration.

Choices where the paper is silent (it keeps no bank; its tests live one step):
1. Admission needs a decidable table; the paper's reward treats an empty correct set vacuously.
2. At most `cure.bank_max_per_problem` tests per problem; beyond it the oldest are dropped.
3. The bank is teacher context (the problem's kept tests), not rollout context: `plan` is one solo
   variant per problem, `context_for` is empty, so the coder is evaluated without the tests.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from coevo.code.problems import TESTER_CUE
from coevo.coevolvers.base import read_artifact, save_artifact
from coevo.config import CoevolverConfig, CureConfig
from coevo.types import ContextVariant
from schemas.rewards import parse_details

TESTER_SUFFIX = "::tester"  # problem_id of a problem's tester-role rollouts


class TestBank:
    """Not in the co-evolver registry: `coevolver.kind` selects the arithmetic loop's co-evolver, and the
    code loop builds this one itself."""

    kind = "test_bank"
    roles: frozenset[str] = frozenset({"context"})  # plans the tester-role rollouts
    __test__ = False  # not a pytest class

    def __init__(self, cfg: CoevolverConfig, seed: int, cure: CureConfig | None = None):
        self.cfg, self.seed, self.frozen = cfg, seed, cfg.frozen
        self.cure = cure or CureConfig()
        self.tests: dict[str, list[dict]] = {}  # problem id -> entries {test, added_iter, rejected}
        self.retired: list[dict] = []
        self.version = 0

    # ---- contents ----
    def tests_for(self, problem_id: str) -> list[str]:
        return [entry["test"] for entry in self.tests.get(problem_id, [])]

    def size(self) -> int:
        return sum(len(entries) for entries in self.tests.values())

    def retire(self, iteration: int, problem_id: str, test: str, reason: str) -> bool:
        entries = self.tests.get(problem_id, [])
        kept = [e for e in entries if e["test"] != test]
        if len(kept) == len(entries) or self.frozen:
            return False
        self.tests[problem_id] = kept
        self.retired.append({"problem_id": problem_id, "test": test, "retired_iter": iteration, "reason": reason})
        return True

    # ---- the co-evolver protocol ----
    def plan(self, problems: pd.DataFrame, group_size: int) -> list[ContextVariant]:
        return [ContextVariant(problem_id=str(pid), variant="solo", n=group_size) for pid in problems["id"]]

    def context_for(self, problem: Mapping) -> list[str]:
        return []

    def teacher_context(self, problem: Mapping) -> list[str]:
        return self.tests_for(str(problem["id"]))

    def update(self, iteration: int, problems: pd.DataFrame, rollouts: pd.DataFrame, rewards: pd.DataFrame) -> dict:
        """Admit the tester rollouts whose details say accurate, decidable and rejecting >= 1 wrong solution."""
        report = {"iteration": iteration, "frozen": self.frozen, "admitted": [], "duplicates": 0}
        if not self.frozen:
            joined = rollouts[["rollout_id", "problem_id", "completion"]].merge(
                rewards[["rollout_id", "details"]], on="rollout_id"
            )
            for row in joined[joined["problem_id"].str.endswith(TESTER_SUFFIX)].itertuples():
                facts = parse_details(row.details)
                if facts.get("accurate") != "1" or facts.get("decidable") != "1" or int(facts.get("rejected", 0)) < 1:
                    continue
                pid, test = row.problem_id[: -len(TESTER_SUFFIX)], TESTER_CUE + row.completion
                if test in self.tests_for(pid):
                    report["duplicates"] += 1
                    continue
                entries = self.tests.setdefault(pid, [])
                entries.append({"test": test, "added_iter": iteration, "rejected": int(facts["rejected"])})
                del entries[: max(0, len(entries) - self.cure.bank_max_per_problem)]
                report["admitted"].append({"problem_id": pid, "test": test})
            self.version += 1
        report["size"] = self.size()
        return report

    def save(self, directory: Path) -> str:
        rows = [{"problem_id": pid, **entry} for pid in sorted(self.tests) for entry in self.tests[pid]]
        files = {
            "tests.jsonl": "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows).encode(),
            "retired.jsonl": "".join(json.dumps(r, sort_keys=True) + "\n" for r in self.retired).encode(),
        }
        return save_artifact(directory, self.kind, files, extra={"version": self.version, "size": self.size()})

    @classmethod
    def load(cls, directory: Path, cfg: CoevolverConfig, seed: int, cure: CureConfig | None = None) -> TestBank:
        manifest, files = read_artifact(directory, cls.kind)
        bank = cls(cfg, seed, cure)
        bank.version = int(manifest.get("version", 0))
        for line in files["tests.jsonl"].decode().splitlines():
            row = json.loads(line)
            bank.tests.setdefault(row.pop("problem_id"), []).append(row)
        bank.retired = [json.loads(line) for line in files["retired.jsonl"].decode().splitlines()]
        return bank
