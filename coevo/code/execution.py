"""CURE's verification of one iteration: the pass table in the sandbox, then both roles' rewards rows.

Per problem, each solver sample is one sandbox job whose tests are, in this order, the hidden
ground-truth tests (B*), the tester's G generated tests (B) and the test bank's tests in force (for
re-validation); the reference solution is one more job against the generated tests (the tester's
accuracy as measured, never a reward). Ground-truth tests run first, so a hostile generated test
cannot change whether a solution counts as correct; a test that hangs or forks is a sandbox verdict
(timeout, crashed) of the solution that ran it.

What judges the solutions in training (`code.cure.truth`):
- hidden: the ground-truth tests (CURE as published);
- generated: no ground-truth test. The tests judged accurate are those the consensus solutions pass:
  solutions are grouped by their pass vector over the valid generated and bank tests, a group scores
  (its size) x (tests it passes), and the best group's passed tests play B* (CodeT's dual execution
  agreement; ties go to the group of the earliest sample). A table where no solution passes any test
  is undecidable. The hidden tests then only give the logged `verify/coder_pass_rate`.
Rewards follow coevo/code/cure.py. `details` records, for a solver row, its ground-truth verdict,
whether the judge in force calls it correct, and which bank tests it failed (`bank_fail`, indices
into the bank's tests of the problem, which the test bank retires when a correct solution fails
them); for a tester row the CURE facts and whether the reference solution passes the test.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from coevo.code.cure import cure_rewards
from coevo.code.problems import from_problems_frame, generated_test, program_of
from coevo.code.verifier import sandbox_limits
from coevo.config import Config
from coevo.rollout.roles import SOLVER, TESTER
from coevo.sandbox import Job, Verdict, run_jobs
from schemas.rewards import COMPONENTS, LOGGED


@dataclass
class ProblemTable:
    problem_id: str
    truth: np.ndarray  # [n, t] ground-truth pass table B*
    table: np.ndarray  # [n, m] generated-test pass table B
    bank: np.ndarray  # [n, r] bank-test pass table
    verdicts: list[Verdict]  # one per solution
    valid: np.ndarray  # [m] generated test compiles
    reference: np.ndarray  # [m] the reference solution passes the generated test


def execute_tables(
    problems: pd.DataFrame, rollouts: pd.DataFrame, bank_tests: Callable[[str], list[str]], cfg: Config
) -> list[ProblemTable]:
    """One ProblemTable per problem of `problems` (decoded code problems) that has solver rollouts."""
    jobs, shapes = [], []
    for problem in problems.itertuples():
        mine = rollouts[rollouts["problem_id"] == problem.id]
        solutions = mine.loc[mine["role"] == SOLVER, "completion"].tolist()
        tests = [generated_test(c) for c in mine.loc[mine["role"] == TESTER, "completion"]]
        bank = list(bank_tests(problem.id))
        jobs += [Job(program_of(problem.prompt, s), (*problem.tests, *tests, *bank)) for s in solutions]
        jobs.append(Job(program_of(problem.prompt, problem.solution), tuple(tests)))
        shapes.append((problem.id, len(solutions), len(problem.tests), len(tests), len(bank)))
    sandbox = cfg.code.sandbox
    verdicts = run_jobs(jobs, sandbox_limits(sandbox), sandbox.mode, sandbox.workers)
    out, cursor = [], 0
    for pid, n, t, m, r in shapes:
        rows, reference = verdicts[cursor : cursor + n], verdicts[cursor + n]
        cursor += n + 1
        passes = np.array([v.pass_vector() for v in rows], dtype=bool).reshape(n, t + m + r)  # [n, t+m+r]
        valid = np.array([not any(v.outcomes[t + k] == "invalid" for v in rows) for k in range(m)], dtype=bool)  # [m]
        out.append(
            ProblemTable(
                pid,
                passes[:, :t],
                passes[:, t : t + m],
                passes[:, t + m :],
                rows,
                valid,
                np.array(reference.pass_vector(), dtype=bool),
            )
        )
    return out


def consensus_truth(table: ProblemTable) -> np.ndarray:
    """The pass table [n, t'] of the tests the consensus solutions pass (valid generated and bank
    tests; t' = 0 when no solution passes any): what plays B* under code.cure.truth generated."""
    tests = np.concatenate([table.table[:, table.valid], table.bank], axis=1)  # [n, m' + r]
    vectors = [tuple(row) for row in tests]
    score = {vector: vectors.count(vector) * sum(vector) for vector in vectors}
    best = max(vectors, key=lambda vector: score[vector])  # max keeps the first of equal scores
    return tests[:, np.array(best, dtype=bool)] if tests.shape[1] else tests


def ground_truth_verdict(verdict: Verdict, n_truth: int) -> tuple[str, int | None]:
    """The verdict restricted to the first n_truth (ground-truth) tests: (status, first failing test)."""
    if verdict.status == "spoofed":
        return "spoofed", verdict.failed_test
    for i, outcome in enumerate(verdict.outcomes[:n_truth]):
        if outcome == "pass":
            continue
        if outcome in ("fail", "error", "invalid"):
            return "failed", i
        if outcome in ("timeout", "memory"):
            return outcome, i
        return (verdict.status if verdict.status in ("timeout", "memory", "crashed", "invalid") else "crashed"), i
    return "passed", None


def cure_frame(
    rollouts: pd.DataFrame, problems: pd.DataFrame, bank_tests: Callable[[str], list[str]], cfg: Config
) -> tuple[pd.DataFrame, dict[str, float]]:
    """Rewards rows (schemas/rewards.py) for both roles, in rollout order, and the iteration's CURE
    metrics. `problems`: problems-table rows of the rollouts' problems; `bank_tests`: the test bank's
    tests of a problem in force (none without a bank)."""
    iteration = int(rollouts["iteration"].iloc[0])
    binary = cfg.code.cure.binary_from_iter is not None and iteration >= cfg.code.cure.binary_from_iter
    code = from_problems_frame(problems.drop_duplicates("id"))
    tables = execute_tables(code[code["id"].isin(set(rollouts["problem_id"]))], rollouts, bank_tests, cfg)
    by_rollout: dict[str, tuple[float, bool, str, str]] = {}
    stats: dict[str, list[float]] = {
        "verify/coder_pass_rate": [],
        "verify/decidable": [],
        "verify/tester_accuracy": [],
        "verify/tester_reference_accuracy": [],
        "verify/discriminating_tests": [],
    }
    for table in tables:
        judge = table.truth if cfg.code.cure.truth == "hidden" else consensus_truth(table)
        if judge.shape[1]:
            cure = cure_rewards(table.table, judge, binary, table.valid)
        else:  # generated truth, no solution passes any test: nothing is judged correct, no test accurate
            cure = cure_rewards(table.table, np.zeros((len(table.table), 1), dtype=bool), binary, table.valid)
        mine = rollouts[rollouts["problem_id"] == table.problem_id]
        hidden_correct = table.truth.all(axis=1)  # [n]
        for rid, verdict, reward, correct, truth_row, bank_row in zip(
            mine.loc[mine["role"] == SOLVER, "rollout_id"],
            table.verdicts,
            cure.solution,
            cure.correct,
            table.truth,
            table.bank,
        ):
            status, failed = ground_truth_verdict(verdict, table.truth.shape[1])
            where = f" test={failed}" if failed is not None else ""
            bank_fail = ",".join(str(i) for i in np.flatnonzero(~bank_row)) or "-"
            details = (
                f"role=solver verdict={status}{where} passed={int(truth_row.sum())}/{len(truth_row)} "
                f"correct={int(correct)} bank_fail={bank_fail} mode={verdict.mode}"
            )
            by_rollout[rid] = (float(reward), bool(correct), "cure_solver", details)
        discriminating = table.reference & (~table.table[~hidden_correct]).any(axis=0)  # [m]
        for rid, reward, accurate, rejected, valid, reference in zip(
            mine.loc[mine["role"] == TESTER, "rollout_id"],
            cure.test,
            cure.accurate,
            cure.rejected_wrong,
            table.valid,
            table.reference,
        ):
            details = (
                f"role=tester valid={int(valid)} accurate={int(accurate)} rejected={int(rejected)} "
                f"decidable={int(cure.decidable)} wrong={int((~cure.correct).sum())} reference={int(reference)}"
            )
            by_rollout[rid] = (float(reward), bool(accurate and cure.decidable), "cure_tester", details)
        stats["verify/coder_pass_rate"].append(float(hidden_correct.mean()))
        stats["verify/decidable"].append(float(cure.decidable))
        if cure.decidable:
            stats["verify/tester_accuracy"].append(float(cure.accurate.mean()))
        stats["verify/tester_reference_accuracy"].append(float((table.reference & table.valid).mean()))
        stats["verify/discriminating_tests"].append(float(discriminating.sum()))
    values = [by_rollout[rid] for rid in rollouts["rollout_id"]]
    frame = pd.DataFrame(
        {
            "rollout_id": rollouts["rollout_id"].to_numpy(),
            "iteration": rollouts["iteration"].to_numpy(),
            "problem_id": rollouts["problem_id"].to_numpy(),
            "role": rollouts["role"].to_numpy(),
            "reward": [v[0] for v in values],
            "passed": [v[1] for v in values],
            "verifier": [v[2] for v in values],
            "details": [v[3] for v in values],
            COMPONENTS: [json.dumps({"cure": v[0]}, separators=(",", ":")) for v in values],
            LOGGED: "{}",
        }
    )
    return frame, {name: float(np.mean(v)) for name, v in stats.items() if v}
