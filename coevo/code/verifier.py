"""Code verifier: run each completion's program against its problem's hidden tests in the sandbox.

Reward 1.0 iff the program passes every hidden test (HumanEval's functional correctness), else 0.0;
`details` records the sandbox verdict (`Verdict.summary`: verdict, first failing test, tests passed,
isolation mode). Usable alone: `CodeVerifier().score(code_problems, completions)` needs no trainer;
`CodeVerifier.from_config(cfg.code.sandbox)` runs under the run's limits, isolation mode and workers,
as the verification stage and the evaluation do.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from coevo.code.problems import from_problems_frame, program_of
from coevo.config import Config, SandboxConfig
from coevo.sandbox import Job, Limits, Verdict, run_jobs
from coevo.types import Reward


def sandbox_limits(sandbox: SandboxConfig) -> Limits:
    """The per-sample limits of code.sandbox (every field but the isolation mode and the worker count)."""
    return Limits(**sandbox.model_dump(exclude={"mode", "workers"}))


class CodeVerifier:
    name = "code_tests"

    def __init__(self, limits: Limits | None = None, mode: str = "auto", workers: int | None = None):
        self.limits, self.mode, self.workers = limits or Limits(), mode, workers

    @classmethod
    def from_config(cls, sandbox: SandboxConfig) -> CodeVerifier:
        return cls(sandbox_limits(sandbox), sandbox.mode, sandbox.workers)

    def verdicts(self, problems: pd.DataFrame, completions: Sequence[str]) -> list[Verdict]:
        """One sandbox verdict per (problem row, completion) pair, rows of a code-problems frame."""
        if len(problems) != len(completions):
            raise ValueError(f"{self.name}: {len(problems)} problems but {len(completions)} completions")
        jobs = [Job(program_of(p, c), tuple(t)) for p, t, c in zip(problems["prompt"], problems["tests"], completions)]
        return run_jobs(jobs, self.limits, self.mode, self.workers)

    def score(self, problems: pd.DataFrame, completions: Sequence[str]) -> list[Reward]:
        return [
            Reward(1.0 if v.passed else 0.0, v.passed, self.name, v.summary())
            for v in self.verdicts(problems, completions)
        ]


def score_problem_rows(problems: pd.DataFrame, completions: Sequence[str], cfg: Config) -> list[Reward]:
    """Verifier entry for coevo.verification.stage: problems-table rows (JSON answers), one per completion, run
    under code.sandbox."""
    decoded = from_problems_frame(problems.drop_duplicates("id")).set_index("id")
    return CodeVerifier.from_config(cfg.code.sandbox).score(decoded.loc[problems["id"]].reset_index(), completions)
