"""Harness co-evolver: the sampling settings the trainer runs with, diagnosed from the rollouts and
changed only when a backtest on the frozen current policy shows the change helps.

Method: EvoTrainer / HarnessRL (METHODS.md item 13): besides the weights, the trainer controls a
harness (prompts, sampling settings, shaping terms, task weights) that can be quietly wrong. Each
iteration the harness co-evolver diagnoses failure modes from rollout evidence, proposes a change,
and backtests it against the harness in force before accepting it; accepted changes are versioned
entries, rejected ones are kept with their measured effect.

What this harness holds (departures from the papers):
1. Two knobs, the ones whose failures the rollouts show directly: the sampling temperature
   (failure: collapsed groups, every completion of a group identical, so no reward variance and no
   advantage) and max_new_tokens (failure: completions cut before their end). The version holds
   overrides of params' `sampling`; version 0 has none (params' values are in force). Task weights are
   the curriculum's role and rubric criteria the rubrics co-evolver's; prompts are not changed.
2. Diagnosis is a rule per failure mode, over this iteration's rollouts: collapse when at least
   `collapse_share` of the groups have one distinct completion; truncation when at least
   `truncation_share` of the completions are unfinished. At most one change per iteration
   (collapse first): the first step up the knob's ladder not rejected in the last `retry_after`
   iterations: temperature x `temperature_step`, x `temperature_step`^2, ... then `max_temperature`;
   max_new_tokens x 2, x 4, ... then `max_tokens`.
3. Backtest: a fixed slice of `backtest_problems` training problems (a seeded choice made once per
   run), `rollout.group_size` completions each, sampled by the frozen current policy under the
   harness in force and under the candidate with the same seed (matched), and verified. The
   candidate is accepted when its measure (collapse: the share of groups with reward variance;
   truncation: the share of finished completions) gains at least `min_gain` and its mean reward does
   not fall by more than `max_reward_drop`. A rejected value is not backtested again for
   `retry_after` iterations (the next diagnosis tries the next rung).
4. The change takes effect from the next iteration: its rollouts and the policy update's log-probs
   use the sampling settings of the harness version in force (coevo.stages.harnessed); evaluation
   keeps params' settings.

Saved: `harness.json` (overrides in force, every entry accepted or rejected with its diagnosis and
backtest numbers, last rejection per change) and the manifest, hashed like the other co-evolvers.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from coevo.coevolvers.base import CoevolverDirError, TextGenerator, read_artifact, register_coevolver, save_artifact
from coevo.coevolvers.none import NoCoEvolver
from coevo.config import CoevolverConfig, SamplingConfig
from coevo.seeding import derive_seed

HARNESS = "harness.json"
KNOBS = ("temperature", "max_new_tokens")

# (problems, sampling) -> (rollouts, rewards) of the frozen current policy on those problems
Sampler = Callable[[pd.DataFrame, SamplingConfig], tuple[pd.DataFrame, pd.DataFrame]]


def group_evidence(rollouts: pd.DataFrame, rewards: pd.DataFrame) -> dict[str, float]:
    """Shares over the groups (one per problem) and completions of one batch."""
    joined = rollouts[["rollout_id", "problem_id", "completion", "finished"]].merge(rewards[["rollout_id", "reward"]], on="rollout_id")
    groups = joined.groupby("problem_id", sort=True)
    return {
        "collapsed_share": float((groups["completion"].nunique() == 1).mean()),
        "signal_share": float((groups["reward"].nunique() > 1).mean()),
        "finished_share": float(joined["finished"].mean()),
        "mean_reward": float(joined["reward"].mean()),
    }


@register_coevolver("harness")
class Harness(NoCoEvolver):
    """Plans, chooses and gives context as the plain baseline does (NoCoEvolver); evolves the sampling settings."""

    roles: frozenset[str] = frozenset({"sampling"})  # the sampling settings of the rollouts and the update

    def __init__(self, cfg: CoevolverConfig, seed: int, generate: TextGenerator | None = None):
        super().__init__(cfg, seed, generate)
        self.params = cfg.harness
        self.overrides: dict[str, float | int] = {}  # knob -> value in force (absent: params' sampling)
        self.entries: list[dict] = []  # every backtested change, accepted or not
        self.rejected_at: dict[str, int] = {}  # change key -> iteration of its last rejection

    def sampling(self, base: SamplingConfig) -> SamplingConfig:
        """The sampling settings in force: params' `sampling` with this version's overrides."""
        return base.model_copy(update=self.overrides)

    def update(self, iteration: int, problems: pd.DataFrame, rollouts: pd.DataFrame, rewards: pd.DataFrame) -> dict:
        return {"iteration": iteration, "frozen": self.frozen, "overrides": dict(self.overrides)}

    # ---- the harness step (coevo.stages.coevolve_stage calls it after `update`) ----
    def diagnose(self, evidence: Mapping[str, float], current: SamplingConfig, iteration: int) -> dict | None:
        """The change this iteration's evidence calls for, or None: {"knob", "value", "why"}. The
        value is the first step up the knob's ladder (x temperature_step, or x2 for max_new_tokens, to
        the cap) that was not rejected in the last retry_after iterations."""
        p = self.params
        if evidence["collapsed_share"] >= p.collapse_share:
            ladder = _ladder(max(current.temperature, 0.05), p.temperature_step, p.max_temperature, current.temperature)
            why = f"collapsed groups {evidence['collapsed_share']:.2f} >= {p.collapse_share}"
            knob = "temperature"
        elif 1.0 - evidence["finished_share"] >= p.truncation_share:
            ladder = [int(v) for v in _ladder(current.max_new_tokens, 2, p.max_tokens, current.max_new_tokens)]
            why = f"unfinished {1.0 - evidence['finished_share']:.2f} >= {p.truncation_share}"
            knob = "max_new_tokens"
        else:
            return None
        fresh = [v for v in ladder if iteration - self.rejected_at.get(f"{knob}={v}", -(10**9)) >= p.retry_after]
        return {"knob": knob, "value": fresh[0], "why": why} if fresh else None

    def revise(self, iteration: int, rollouts: pd.DataFrame, rewards: pd.DataFrame, train: pd.DataFrame, base: SamplingConfig, sample: Sampler) -> dict:
        """Diagnose this iteration's rollouts, backtest the change it calls for, keep it if it helps."""
        current = self.sampling(base)
        evidence = group_evidence(rollouts, rewards)
        report = {"in_force": {k: getattr(current, k) for k in KNOBS}, "evidence": evidence, "change": None}
        change = None if self.frozen else self.diagnose(evidence, current, iteration)
        if change is None:
            return report
        slice_ = self.backtest_slice(train)
        candidate = current.model_copy(update={change["knob"]: change["value"]})
        before, after = (group_evidence(*sample(slice_, setting)) for setting in (current, candidate))
        measure = "signal_share" if change["knob"] == "temperature" else "finished_share"
        accepted = after[measure] - before[measure] >= self.params.min_gain and after["mean_reward"] >= before["mean_reward"] - self.params.max_reward_drop
        entry = {"iteration": iteration, **change, "from": getattr(current, change["knob"]), "measure": measure, "before": before, "after": after, "accepted": accepted}
        self.entries.append(entry)
        if accepted:
            self.overrides[change["knob"]] = change["value"]
        else:
            self.rejected_at[f"{change['knob']}={change['value']}"] = iteration
        return {**report, "change": change, "entry": entry}

    def backtest_slice(self, train: pd.DataFrame) -> pd.DataFrame:
        """The run's fixed backtest problems: a seeded choice from the training split, by id."""
        ordered = train.sort_values("id", kind="stable").reset_index(drop=True)
        rng = np.random.default_rng(derive_seed(self.seed, "harness-backtest"))
        picks = np.sort(rng.choice(len(ordered), size=min(self.params.backtest_problems, len(ordered)), replace=False))
        return ordered.iloc[picks].reset_index(drop=True)

    # ---- persistence ----
    def state(self) -> dict:
        return {"overrides": self.overrides, "entries": self.entries, "rejected_at": self.rejected_at}

    def save(self, directory: Path) -> str:
        data = json.dumps(self.state(), indent=2, sort_keys=True).encode() + b"\n"
        return save_artifact(directory, self.kind, files={HARNESS: data})

    @classmethod
    def load(cls, directory: Path, cfg: CoevolverConfig, seed: int, generate: TextGenerator | None = None) -> Harness:
        _, files = read_artifact(directory, cls.kind)
        state = json.loads(files[HARNESS])
        unknown = set(state["overrides"]) - set(KNOBS)
        if unknown:
            raise CoevolverDirError(f"{Path(directory) / HARNESS}: field 'overrides': unknown knobs {sorted(unknown)} (known: {list(KNOBS)})")
        harness = cls(cfg, seed)
        harness.overrides, harness.entries, harness.rejected_at = dict(state["overrides"]), list(state["entries"]), dict(state["rejected_at"])
        return harness

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Harness) and self.state() == other.state()


def _ladder(start: float, step: float, cap: float, current: float) -> list[float]:
    """start x step, x step^2, ... up to `cap` (which ends the ladder), keeping values above `current`."""
    values, value = [], start
    while value * step < cap:
        value = round(value * step, 6)
        values.append(value)
    return [v for v in [*values, cap] if v > current]
