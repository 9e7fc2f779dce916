"""The code loop's verification: execute the pass table in the sandbox and turn it into rewards rows.

Per problem, each sampled solution is one sandbox job whose tests are, in this order, the hidden
ground-truth tests (B*), the tester's G generated tests (B) and the problem's test-bank tests (for
re-validation). Ground-truth tests run first, so a hostile generated test cannot change whether a
solution counts as correct. Rewards follow coevo/code/cure.py; `details` records the sandbox
verdict of every coder rollout against the ground truth and the CURE facts of every tester rollout.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from coevo.code.cure import cure_rewards
from coevo.code.problems import TESTER_CUE, program_of
from coevo.code.unit_test_bank import TESTER_SUFFIX
from coevo.sandbox import Job, Limits, Verdict, run_jobs


@dataclass
class ProblemTable:
    problem_id: str
    truth: np.ndarray  # [n, t] ground-truth pass table B*
    table: np.ndarray  # [n, m] generated-test pass table B
    bank: np.ndarray  # [n, r] bank-test pass table
    bank_tests: list[str]
    verdicts: list[Verdict]  # one per solution
    valid: np.ndarray  # [m] generated test compiles


def execute_tables(
    problems: pd.DataFrame, rollouts: pd.DataFrame, bank_tests: dict[str, list[str]], limits: Limits, mode: str
) -> list[ProblemTable]:
    """One ProblemTable per problem of `problems`; rollouts hold both roles (tester ids carry TESTER_SUFFIX)."""
    jobs, shapes = [], []
    for problem in problems.itertuples():
        solutions = rollouts.loc[rollouts["problem_id"] == problem.id, "completion"].tolist()
        tests = [
            TESTER_CUE + c for c in rollouts.loc[rollouts["problem_id"] == problem.id + TESTER_SUFFIX, "completion"]
        ]
        bank = list(bank_tests.get(problem.id, []))
        jobs += [Job(program_of(problem.prompt, s), (*problem.tests, *tests, *bank)) for s in solutions]
        shapes.append((problem.id, len(solutions), len(problem.tests), len(tests), bank))
    verdicts = run_jobs(jobs, limits, mode)
    out, cursor = [], 0
    for pid, n, t, m, bank in shapes:
        rows = verdicts[cursor : cursor + n]
        cursor += n
        passes = np.array([v.pass_vector() for v in rows], dtype=bool).reshape(n, t + m + len(bank))  # [n, t+m+r]
        valid = np.array([not any(v.outcomes[t + k] == "invalid" for v in rows) for k in range(m)], dtype=bool)  # [m]
        out.append(ProblemTable(pid, passes[:, :t], passes[:, t : t + m], passes[:, t + m :], bank, rows, valid))
    return out


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


def rewards_frame(rollouts: pd.DataFrame, tables: list[ProblemTable], binary: bool) -> tuple[pd.DataFrame, dict]:
    """Rewards rows (schemas/rewards.py) for both roles, in rollout order, and per-iteration stats."""
    by_rollout: dict[str, tuple[float, bool, str, str]] = {}
    stats = {"verify/coder_pass_rate": [], "verify/tester_accuracy": [], "verify/decidable": []}
    for table in tables:
        cure = cure_rewards(table.table, table.truth, binary, table.valid)
        coder = rollouts.loc[rollouts["problem_id"] == table.problem_id, "rollout_id"].tolist()
        tester = rollouts.loc[rollouts["problem_id"] == table.problem_id + TESTER_SUFFIX, "rollout_id"].tolist()
        for rid, verdict, reward, correct, truth_row in zip(
            coder, table.verdicts, cure.solution, cure.correct, table.truth
        ):
            status, failed = ground_truth_verdict(verdict, table.truth.shape[1])
            where = f" test={failed}" if failed is not None else ""
            details = (
                f"role=coder verdict={status}{where} passed={int(truth_row.sum())}/{len(truth_row)} mode={verdict.mode}"
            )
            by_rollout[rid] = (float(reward), bool(correct), "cure_coder", details)
        for rid, reward, accurate, rejected, valid in zip(
            tester, cure.test, cure.accurate, cure.rejected_wrong, table.valid
        ):
            details = (
                f"role=tester valid={int(valid)} accurate={int(accurate)} rejected={int(rejected)} "
                f"decidable={int(cure.decidable)} wrong={int((~cure.correct).sum())}"
            )
            by_rollout[rid] = (float(reward), bool(accurate and cure.decidable), "cure_tester", details)
        stats["verify/coder_pass_rate"].append(float(cure.correct.mean()))
        stats["verify/decidable"].append(float(cure.decidable))
        if cure.decidable:
            stats["verify/tester_accuracy"].append(float(cure.accurate.mean()))
    values = [by_rollout[rid] for rid in rollouts["rollout_id"]]
    frame = pd.DataFrame(
        {
            "rollout_id": rollouts["rollout_id"].to_numpy(),
            "iteration": rollouts["iteration"].to_numpy(),
            "problem_id": rollouts["problem_id"].to_numpy(),
            "reward": [v[0] for v in values],
            "passed": [v[1] for v in values],
            "verifier": [v[2] for v in values],
            "details": [v[3] for v in values],
        }
    )
    return frame, {k: float(np.mean(v)) if v else 0.0 for k, v in stats.items()}


def inaccurate_bank_tests(table: ProblemTable) -> list[str]:
    """Bank tests that reject a solution passing every ground-truth test (to retire)."""
    correct = table.truth.all(axis=1)  # [n]
    if not correct.any() or not table.bank_tests:
        return []
    ok = table.bank[correct].all(axis=0)  # [r]
    return [test for test, good in zip(table.bank_tests, ok) if not good]
