"""CURE rewards: a coder (the solver role) and a unit tester co-evolve from one execution table, no ground-truth code.

Method: CURE (reward read from its public code). Per problem,
n sampled solutions and m generated tests give the pass table B (n x m, B[j, k] = solution j passes
test k); the hidden ground-truth tests give B* (n x t).
- A solution is correct iff it passes every ground-truth test: I_j = all_l B*[j, l].
- Solution reward: its ground-truth pass rate, r_j = mean_l B*[j, l].
- A generated test k is accurate iff every correct solution passes it: A_k = all_{j: I_j} B[j, k].
  Reward +1 if accurate, -1 if not, scaled by how many wrong solutions it rejects (accurate) or
  lets through (inaccurate): r_k = +(1 + #{j: not I_j, not B[j, k]})  if A_k
                                  r_k = -(1 + #{j: not I_j, B[j, k]})      otherwise.
- Both reward vectors are z-normalised per problem, (r - mean) / (std + eps), the GRPO group
  advantage, so in training the objective's std-normalised group advantage does it (one group per
  problem and role); `z_normalise` is here for reports and tests.
- Later-stage binary variant (`binary=True`): r_j = I_j (passes every ground-truth test) and
  r_k = A_k (1 accurate, 0 not), used from `cure.binary_from_iter` on, when the coder is good
  enough that pass rates saturate and the count scaling mostly adds variance.

Choices where the paper is silent, and departures:
1. The paper's test reward is -(wrong let through) + A_k * (#wrong): an accurate test earns the
   number of wrong solutions it rejects, an inaccurate one loses the number it lets through. We add
   the +1/-1 base so that accurate and inaccurate tests stay apart when a group
   has no wrong solutions (where the paper gives both 0).
2. When no sampled solution is correct, accuracy is undecidable from the table. The paper's product
   over the empty set calls every test accurate and pays it the wrong solutions it rejects, which
   pays most for tests that reject everything, garbage included (a real risk with a tiny policy).
   Here such a table gives valid tests reward 0 (no signal: the group is dropped unless invalid
   tests are in it); `accurate` still reports the vacuous truth, `decidable` says which case holds,
   and the test bank (coevo/coevolvers/unit_tests.py) never admits a test judged on an undecidable table.
3. A test that does not compile (`valid` False) is inaccurate whatever the table says and gets the
   worst reward, -(1 + #wrong) (binary: 0). A test that compiles but errors counts as failed by every
   solution that runs it (B = 0), as does every test of a solution that does not compile.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class CureRewards:
    solution: np.ndarray  # [n] raw solution rewards
    test: np.ndarray  # [m] raw test rewards
    correct: np.ndarray  # [n] bool: passes every ground-truth test
    accurate: np.ndarray  # [m] bool: every correct solution passes it
    rejected_wrong: np.ndarray  # [m] wrong solutions the test rejects
    decidable: bool  # at least one correct solution (accuracy is judged on a non-empty set)


def cure_rewards(
    table: np.ndarray, truth: np.ndarray, binary: bool = False, valid: np.ndarray | None = None
) -> CureRewards:
    """Raw CURE rewards from B (n solutions x m generated tests), B* (n x t ground-truth tests) and
    which generated tests compile (`valid`, default all)."""
    table, truth = np.asarray(table, dtype=bool), np.asarray(truth, dtype=bool)  # [n, m], [n, t]
    if table.ndim != 2 or truth.ndim != 2 or table.shape[0] != truth.shape[0] or truth.shape[1] == 0:
        raise ValueError(f"need B [n, m] and B* [n, t>0] with the same n; got {table.shape} and {truth.shape}")
    valid = np.ones(table.shape[1], dtype=bool) if valid is None else np.asarray(valid, dtype=bool)  # [m]
    correct = truth.all(axis=1)  # [n]
    wrong = ~correct  # [n]
    decidable = bool(correct.any())
    accurate = table[correct].all(axis=0) & valid  # [m]; vacuously True (if valid) when no solution is correct
    rejected = (~table & wrong[:, None]).sum(axis=0)  # [m]
    let_through = (table & wrong[:, None]).sum(axis=0)  # [m]
    worst = -(1.0 + wrong.sum())
    if binary:
        solution, test = correct.astype(float), (accurate & decidable).astype(float)
    else:
        solution = truth.mean(axis=1)  # [n]
        test = (
            np.where(accurate, 1.0 + rejected, -(1.0 + let_through)) if decidable else np.zeros(table.shape[1])
        )  # [m]
        test = np.where(valid, test, worst)
    return CureRewards(solution, test, correct, accurate, rejected, decidable)


def z_normalise(rewards: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """(r - mean) / (std + eps) over one problem's group, with the unbiased std as coevo's GRPO advantage."""
    rewards = np.asarray(rewards, dtype=float)
    return (rewards - rewards.mean()) / (rewards.std(ddof=1) + eps)
