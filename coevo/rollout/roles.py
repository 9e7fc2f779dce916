"""Roles of the one policy: each sample is an episode of a role, posed from a problem.

A run samples `rollout.roles` for every problem of its batch, a group of `rollout.group_size` each,
and the policy update trains `rollout.train_roles`; each (problem, role) pair is one group. A role
says which problems it can be posed (`serves`) and how a problem becomes its prompt (`pose`: the
problem row with the role's prompt). One role (the solver) and one turn is the special case every
run without `rollout.roles` is.

- solver: the problem as posed (on a code problem, CURE's coder).
- tester: a unit test `assert f(x)==y` for a synthetic code problem, from its specification comment
  (coevo/code/problems.py `tester_prompt`, and in the chat format `prompt.instruction.tester`); its
  test is `generated_test(completion)`. CURE rewards it against the solver's solutions of the same
  problem (coevo/code/execution.py).

New roles (a proposer, a self-verifier) are entries of `ROLES`; the verification stage pairs them
with their reward.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import pandas as pd

from coevo.code.problems import SYNTH_OPS, tester_prompt
from coevo.errors import InputError
from coevo.registry import Registry
from coevo.rollout.prompting import ROLE_INSTRUCTION

SOLVER, TESTER = "solver", "tester"


@dataclass(frozen=True)
class Role:
    serves: Callable[[Mapping], bool]  # whether a problem row can be posed to the role
    pose: Callable[[Mapping], dict]  # the problem row with the role's prompt
    needs: str  # what `serves` asks, for the error that names a problem it cannot serve


ROLES = Registry("role")
ROLES.add(SOLVER, Role(lambda row: True, dict, "any problem"))
ROLES.add(
    TESTER,
    Role(
        lambda row: row["family"] in SYNTH_OPS,
        lambda row: {**row, "prompt": tester_prompt(row["prompt"]), ROLE_INSTRUCTION: "tester"},
        f"a synthetic code problem (family {', '.join(SYNTH_OPS)}: problems.source code-synth)",
    ),
)


def posed(row: Mapping, role: str) -> dict:
    """`row` (a problems-table row) as `role`'s prompt row."""
    return ROLES[role].pose(row)


def check_roles(problems: pd.DataFrame, roles: list[str], source: str) -> None:
    """Every problem of `problems` (read from `source`) can be posed to every role, else an InputError
    naming the first one that cannot, its row and family."""
    for role in roles:
        spec = ROLES[role]
        for position, row in enumerate(problems.to_dict("records")):
            if not spec.serves(row):
                raise InputError(
                    f"{source} row {position} (problem {row['id']!r}, family {row['family']!r}): rollout.roles "
                    f"samples {role!r}, which needs {spec.needs}"
                )
