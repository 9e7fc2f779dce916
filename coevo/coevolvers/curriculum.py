"""Curriculum co-evolver: a non-stationary bandit over problem categories chooses each batch.

Method: Self-Evolving Curriculum (SEC; Chen et al., arXiv 2505.14970). Problem
categories (difficulty levels, problem types) are the arms of a non-stationary multi-armed bandit.
An arm's reward is the mean absolute advantage of the groups drawn from it in the last batch, a proxy
for the learning signal the policy update gets from that category (a group whose completions all
score the same has zero advantage, so it teaches nothing and scores 0). Arm values follow TD(0),
Q <- (1 - alpha) Q + alpha r, and the next batch's categories are drawn from a Boltzmann
distribution over Q: softmax(Q / temperature).

Departures from the paper:
1. The advantage is the project's Dr.GRPO advantage, reward - group mean
   (coevo/update/objectives/advantages.py, std_normalize=False), whatever objective.std_normalize says: the
   std-normalised advantage makes |A| near 1 for any mixed group and would hide how mixed it is.
2. The Boltzmann distribution is mixed with a uniform floor, p = (1 - epsilon) softmax(Q / T) +
   epsilon / K, so no arm starves (an arm never drawn keeps its value forever otherwise).
3. Arms are drawn one problem at a time (n draws per batch), not one category per batch; an arm runs
   out after as many draws as it has problems, and its probability mass goes to the others.
4. Within an arm, problems come from a seeded shuffle of the arm's problems (sorted by id), walked by
   a cursor saved with the state and cycled in the same order after each pass: no problem repeats
   within a batch, and the batch of iteration k is a pure function of (saved state, seed, k), so a
   resumed run draws the same one.
5. Arms' values start at 0 (uniform sampling until the first update), and `count` counts the groups
   an arm has been measured on.
6. Frozen (the ablation): values, counts and rewards stop updating; the cursors still advance, so a
   frozen curriculum keeps sampling with its frozen values without repeating the same problems.
7. The default temperature, 0.03, is set for this advantage's scale: values lie in [0, 0.5] (<= 0.17
   on a 1-3 digit arithmetic mix), and at 0.2 the hopeless arms kept about half the draws; at 0.03
   the zero-variance share fell below half of GRPO's (docs/benchmarks/curriculum.md).

With `curriculum.proposer.enabled`, after each update the curriculum also writes new training
problems where the solver's pass rate is near one half (coevo/problems/proposer.py, SEIF / R-Zero
style, validated and de-duplicated against both splits); they accumulate in the version's
`proposals.jsonl` and the stages draw, verify and train on train split + proposals of the version in
force (coevo/stages/in_force.py `in_force`); their categories become arms like any other.

The saved directory holds `state.json` (category columns, temperature, per-arm value, count, last
reward and cursor), `proposals.jsonl` when the proposer is on, and the manifest
(coevo/coevolvers/base.py), so versions are hashed like the rest (and DVC-tracked with them).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from coevo.coevolvers.base import (
    CoevolverDirError,
    TextGenerator,
    read_artifact,
    register_coevolver,
    save_artifact,
)
from coevo.config import CoevolverConfig
from coevo.errors import InputError
from coevo.problems.arithmetic import COLUMNS
from coevo.problems.proposer import problems_frame, propose
from coevo.seeding import derive_seed
from coevo.types import ContextVariant
from coevo.update.objectives.group_signal import group_signal
from schemas.errors import SchemaError
from schemas.problems import EXTRA, validate_problems

STATE = "state.json"
PROPOSALS = "proposals.jsonl"  # the proposer's accepted problems so far (problems schema), one JSON object per line
SEPARATOR = "/"  # between the category columns' values in an arm's name ("add/2")


def categories(problems: pd.DataFrame, columns: list[str]) -> pd.Series:
    """Each problem's arm: its `columns` values joined by '/'. A column missing from the frame is
    looked up in the user file's other fields (schemas/problems.py EXTRA) before it is an error
    naming the setting and the file (`problems.attrs["path"]` when the caller set it)."""
    parts = []
    extras = None
    for column in columns:
        if column in problems.columns:
            parts.append(problems[column].astype(str))
            continue
        if extras is None and EXTRA in problems.columns:
            extras = problems[EXTRA].map(json.loads)
        if extras is not None and all(column in fields for fields in extras):
            parts.append(extras.map(lambda fields: str(fields[column])))
            continue
        source = problems.attrs.get("path", "the training problems")
        raise InputError(
            f"{source}: coevolver.curriculum.category names column {column!r}, which the problems do not have "
            f"(columns: {sorted(problems.columns)})"
        )
    names = parts[0]
    for part in parts[1:]:
        names = names + SEPARATOR + part
    return names.rename("category")


def boltzmann(values: np.ndarray, temperature: float, epsilon: float) -> np.ndarray:
    """values [K] -> probabilities [K]: (1 - epsilon) softmax(values / temperature) + epsilon / K."""
    logits = values / temperature  # [K]
    weights = np.exp(logits - logits.max())  # [K], stable softmax
    return (1 - epsilon) * weights / weights.sum() + epsilon / len(values)  # [K]


@register_coevolver("curriculum")
class Curriculum:
    kind: str
    roles: frozenset[str] = frozenset({"problems"})  # chooses each iteration's problems

    def __init__(self, cfg: CoevolverConfig, seed: int, generate: TextGenerator | None = None):
        self.cfg = cfg
        self.seed = seed
        self.frozen = cfg.frozen
        self.columns = list(cfg.curriculum.category)
        self.temperature = cfg.curriculum.temperature
        self.arms: dict[str, dict] = {}  # category -> {"value", "count", "reward", "cursor"}
        self.proposals = problems_frame([])  # the proposer's accepted problems, oldest first

    def _arm(self, name: str) -> dict:
        return self.arms.setdefault(name, {"value": 0.0, "count": 0, "reward": None, "cursor": 0})

    def probabilities(self, names: list[str]) -> np.ndarray:
        """The Boltzmann-with-floor distribution over the arms `names` (unseen arms have value 0)."""
        values = np.array([self.arms.get(n, {}).get("value", 0.0) for n in names], dtype=np.float64)  # [K]
        return boltzmann(values, self.temperature, self.cfg.curriculum.epsilon)

    def choose(self, train: pd.DataFrame, n: int, iteration: int) -> pd.DataFrame:
        if n > len(train):
            raise ValueError(f"rollout.problems_per_iter={n} exceeds the {len(train)} training problems")
        arm_of = categories(train, self.columns).loc[
            train.sort_values("id", kind="stable").index
        ]  # by id within each arm
        members = {name: rows.index.to_numpy() for name, rows in arm_of.groupby(arm_of, sort=True)}
        names = list(members)
        rng = np.random.default_rng(derive_seed(self.seed, "curriculum", iteration))
        probs, taken = self.probabilities(names), np.zeros(len(names), dtype=np.int64)  # [K], [K]
        for _ in range(n):
            open_arms = taken < np.array([len(members[name]) for name in names])  # [K]
            p = np.where(open_arms, probs, 0.0)  # [K]
            taken[rng.choice(len(names), p=p / p.sum())] += 1
        chosen = []
        for name, count in zip(names, taken.tolist()):
            if count:
                order = np.random.default_rng(derive_seed(self.seed, "curriculum-arm", name)).permutation(
                    len(members[name])
                )
                start = self.arms.get(name, {}).get("cursor", 0)
                chosen += [members[name][order[(start + j) % len(order)]] for j in range(count)]
        return train.loc[chosen].reset_index(drop=True)

    def plan(self, problems: pd.DataFrame, group_size: int) -> list[ContextVariant]:
        return [ContextVariant(problem_id=str(pid), variant="solo", n=group_size) for pid in problems["id"]]

    def context_for(self, problem: Mapping) -> list[str]:
        return []

    def teacher_context(self, problem: Mapping) -> list[str]:
        return []

    def update(self, iteration: int, problems: pd.DataFrame, rollouts: pd.DataFrame, rewards: pd.DataFrame) -> dict:
        """TD(0) on each arm drawn this iteration; report every known arm and the zero-variance share."""
        signal = group_signal(rollouts, rewards)
        arm_of = dict(zip(problems["id"].astype(str), categories(problems, self.columns)))
        signal["category"] = signal["problem_id"].map(arm_of)
        drawn = []
        for name, groups in signal.groupby("category", sort=True):
            arm, reward = self._arm(name), float(groups["abs_adv"].mean())
            arm["cursor"] += len(groups)
            if not self.frozen:
                alpha = self.cfg.curriculum.alpha
                arm["value"] = (1 - alpha) * arm["value"] + alpha * reward
                arm["count"] += len(groups)
                arm["reward"] = reward
            drawn.append(
                {
                    "category": name,
                    "reward": reward,
                    "groups": len(groups),
                    "zero_var_share": float(groups["zero_var"].mean()),
                }
            )
        names = sorted(self.arms)
        probs = self.probabilities(names) if names else []
        return {
            "iteration": iteration,
            "frozen": self.frozen,
            "temperature": self.temperature,
            "zero_var_share": float(signal["zero_var"].mean()) if len(signal) else 0.0,
            "drawn": drawn,
            "arms": [
                {
                    "category": n,
                    "value": self.arms[n]["value"],
                    "count": self.arms[n]["count"],
                    "reward": self.arms[n]["reward"],
                    "prob": float(p),
                }
                for n, p in zip(names, probs)
            ],
        }

    def choice_metrics(self, report: Mapping) -> dict[str, float]:
        """curriculum/value/<category> and curriculum/prob/<category> for every known arm."""
        metrics = {}
        for arm in report["arms"]:
            metrics[f"curriculum/value/{arm['category']}"] = float(arm["value"])
            metrics[f"curriculum/prob/{arm['category']}"] = float(arm["prob"])
        return metrics

    def propose(
        self,
        iteration: int,
        batch: pd.DataFrame,
        rollouts: pd.DataFrame,
        rewards: pd.DataFrame,
        train: pd.DataFrame,
        test: pd.DataFrame,
    ) -> dict | None:
        """The proposer's step (None when it is off or frozen): new problems at the frontier of this
        iteration's pass rates, appended to `proposals`. `train`: the split drawn from this iteration
        (train + earlier proposals); `test`: the held-out split, never proposed again."""
        settings = self.cfg.curriculum.proposer
        if not settings.enabled or self.frozen:
            return None
        proposal = propose(
            pass_rates(batch, rollouts, rewards), train, test, settings, self.seed, iteration, self.proposals
        )
        if len(proposal.accepted):
            self.proposals = (
                proposal.accepted
                if self.proposals.empty
                else pd.concat([self.proposals, proposal.accepted], ignore_index=True)
            )
        return {**proposal.report, "total": len(self.proposals)}

    def proposed(self) -> pd.DataFrame:
        """The proposer's accepted problems so far (empty when it is off): the stages add them to the
        training split of the iterations after this version (coevo/stages/in_force.py `in_force`)."""
        return self.proposals if self.cfg.curriculum.proposer.enabled else problems_frame([])

    def proposal_metrics(self, report: Mapping) -> dict[str, float]:
        """coevo/proposed (accepted this iteration) and coevo/proposals_total from `propose`'s report."""
        return {"coevo/proposed": float(report["accepted"]), "coevo/proposals_total": float(report["total"])}

    def state(self) -> dict:
        return {
            "category": self.columns,
            "temperature": self.temperature,
            "arms": {name: dict(self.arms[name]) for name in sorted(self.arms)},
        }

    def save(self, directory: Path) -> str:
        files = {STATE: json.dumps(self.state(), indent=2, sort_keys=True).encode() + b"\n"}
        if self.cfg.curriculum.proposer.enabled:
            rows = self.proposals[COLUMNS].to_dict(orient="records")
            files[PROPOSALS] = "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows).encode()
        return save_artifact(directory, self.kind, files=files)

    @classmethod
    def load(
        cls, directory: Path, cfg: CoevolverConfig, seed: int, generate: TextGenerator | None = None
    ) -> Curriculum:
        """Raises CoevolverDirError when the saved state is tampered with or was built over other
        category columns than coevolver.curriculum.category (its values would name other arms)."""
        _, files = read_artifact(directory, cls.kind)
        state = json.loads(files[STATE])
        if state["category"] != list(cfg.curriculum.category):
            raise CoevolverDirError(
                f"{Path(directory) / STATE}: arms over columns {state['category']} but "
                f"coevolver.curriculum.category is {list(cfg.curriculum.category)}"
            )
        curriculum = cls(cfg, seed)
        curriculum.temperature = float(state["temperature"])
        curriculum.arms = {name: dict(arm) for name, arm in state["arms"].items()}
        if PROPOSALS in files:
            curriculum.proposals = read_proposal_lines(files[PROPOSALS], Path(directory) / PROPOSALS)
        return curriculum

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Curriculum) and self.state() == other.state() and self.proposals.equals(other.proposals)
        )


def pass_rates(batch: pd.DataFrame, rollouts: pd.DataFrame, rewards: pd.DataFrame) -> pd.DataFrame:
    """The proposer's stats: pass rate and rollout count per (family, level) of this iteration's batch."""
    joined = rollouts[["rollout_id", "problem_id"]].merge(rewards[["rollout_id", "passed"]], on="rollout_id")
    joined = joined.merge(batch[["id", "family", "level"]].rename(columns={"id": "problem_id"}), on="problem_id")
    stats = (
        joined.groupby(["family", "level"], sort=True)["passed"].agg(pass_rate="mean", n_samples="size").reset_index()
    )
    return stats.astype({"level": int, "pass_rate": float, "n_samples": int})


def read_proposal_lines(data: bytes, path: Path) -> pd.DataFrame:
    """proposals.jsonl back into a problems frame; errors name the file, line and field."""
    rows = []
    for number, line in enumerate(data.decode().splitlines(), start=1):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise CoevolverDirError(f"{path}: line {number}: not JSON ({exc.msg})") from exc
    try:
        return validate_problems(problems_frame([pd.DataFrame(rows, columns=COLUMNS)]), str(path))
    except (SchemaError, ValueError, TypeError) as exc:
        raise CoevolverDirError(f"{path}: not a problems table: {exc}") from exc
