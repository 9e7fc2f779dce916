"""Harness co-evolver: the sampling settings and the answer-format instruction the trainer runs
with, diagnosed from the rollouts and changed only when a backtest on the frozen current policy
shows the change helps.

Method: EvoTrainer / HarnessRL (METHODS.md item 13): besides the weights, the trainer controls a
harness (prompts, sampling settings, shaping terms, task weights) that can be quietly wrong. Each
iteration the harness co-evolver diagnoses failure modes from rollout evidence, proposes a change,
and backtests it against the harness in force before accepting it; accepted changes are versioned
entries, rejected ones are kept with their measured effect.

What this harness holds (departures from the papers):
1. Three knobs, the ones whose failures the rollouts show directly (`FAILURES`, tried in this order):
   - the sampling temperature; failure: collapsed groups (every completion of a group identical, so
     no reward variance and no advantage), at least `collapse_share` of the groups;
   - the answer-format instruction of the chat format (prompt.instruction.math; the plain layout has
     none); failure: completions that fail and were cut before their end or state no number the
     verifier reads (problems with a numeric answer), at least `format_share` of the completions the
     instruction applies to (every problem but code). Before truncation: an instruction that asks
     for an explanation also shows as truncation, and changing it costs no longer generations;
   - max_new_tokens; failure: at least `truncation_share` of the completions unfinished.
   The version holds overrides of params' values; version 0 has none. Task weights are the
   curriculum's role and rubric criteria the rubrics co-evolver's; the system prompt and shaping
   terms are not changed.
2. At most one change per iteration: the first failure whose symptom is over its threshold and whose
   knob has a value not rejected in the last `retry_after` iterations, the first such value of its
   ladder: temperature x `temperature_step`, x `temperature_step`^2, ... then `max_temperature`;
   the `instructions` in order, skipping the one in force; max_new_tokens x 2, x 4, ... then
   `max_tokens`.
3. Backtest: a fixed slice of `backtest_problems` training problems (a seeded choice made once per
   run), `rollout.group_size` completions each, sampled by the frozen current policy under the
   harness in force and under the candidate with the same seed (matched), and verified. The
   candidate is accepted when its measure (collapse: the share of groups with reward variance;
   format: the mean reward; truncation: the share of finished completions) gains at least
   `min_gain` and its mean reward does not fall by more than `max_reward_drop`. A rejected value is
   not backtested again for `retry_after` iterations (the next diagnosis tries the next rung).
4. The change takes effect from the next iteration: its rollouts and the policy update's prompts and
   log-probs use the harness in force (coevo.stages.harnessed). Evaluation asks with the instruction
   the checkpoint was trained under (the prompt is part of how it is meant to be asked) and keeps
   params' sampling.

Saved: `harness.json` (overrides in force, every entry accepted or rejected with its diagnosis and
backtest numbers, last rejection per change) and the manifest, hashed like the other co-evolvers.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from coevo.code.verifier import CODE_FAMILIES
from coevo.coevolvers.base import CoevolverDirError, TextGenerator, read_artifact, register_coevolver, save_artifact
from coevo.coevolvers.none import NoCoEvolver
from coevo.config import Config, CoevolverConfig
from coevo.problems.verifier import canonical_number, extract_final_number
from coevo.seeding import derive_seed

HARNESS = "harness.json"
SAMPLING_KNOBS = ("temperature", "max_new_tokens")
KNOBS = (*SAMPLING_KNOBS, "instruction")  # instruction: prompt.instruction.math

# (problems, config in force) -> (rollouts, rewards) of the frozen current policy on those problems
Sampler = Callable[[pd.DataFrame, Config], tuple[pd.DataFrame, pd.DataFrame]]


@dataclass(frozen=True)
class Failure:
    symptom: str  # evidence share that diagnoses it
    threshold: str  # HarnessConfig field: the share from which it is diagnosed
    knob: str  # what its fix changes
    measure: str  # evidence the fix must raise on the backtest


FAILURES = (
    Failure("collapsed_share", "collapse_share", "temperature", "signal_share"),
    Failure("format_failure_share", "format_share", "instruction", "mean_reward"),
    Failure("unfinished_share", "truncation_share", "max_new_tokens", "finished_share"),
)


def group_evidence(rollouts: pd.DataFrame, rewards: pd.DataFrame, problems: pd.DataFrame) -> dict[str, float]:
    """Shares over the groups (one per problem) and completions of one batch; `problems` holds the
    batch's rows (id, family, answer)."""
    joined = rollouts[["rollout_id", "problem_id", "completion", "finished"]].merge(rewards[["rollout_id", "reward", "passed"]], on="rollout_id")
    rows = problems.set_index("id").loc[joined["problem_id"]]
    instructed = ~rows["family"].isin(CODE_FAMILIES).to_numpy()  # prompt.instruction.math applies
    numeric = rows["answer"].map(lambda answer: canonical_number(str(answer)) is not None).to_numpy()
    silent = joined["completion"].map(lambda text: extract_final_number(text) is None).to_numpy()
    finished, passed = joined["finished"].to_numpy(bool), joined["passed"].to_numpy(bool)
    format_failed = instructed & ~passed & (~finished | (numeric & silent))
    groups = joined.groupby("problem_id", sort=True)
    return {
        "collapsed_share": float((groups["completion"].nunique() == 1).mean()),
        "signal_share": float((groups["reward"].nunique() > 1).mean()),
        "format_failure_share": float(format_failed.sum() / instructed.sum()) if instructed.any() else 0.0,
        "finished_share": float(finished.mean()),
        "unfinished_share": float(1.0 - finished.mean()),
        "mean_reward": float(joined["reward"].mean()),
    }


def in_force(cfg: Config) -> dict[str, float | int | str | None]:
    """The knobs' values in `cfg`."""
    return {"temperature": cfg.sampling.temperature, "max_new_tokens": cfg.sampling.max_new_tokens, "instruction": cfg.prompt.instruction.math}


@register_coevolver("harness")
class Harness(NoCoEvolver):
    """Plans, chooses and gives context as the plain baseline does (NoCoEvolver); evolves the sampling
    settings and the answer-format instruction."""

    roles: frozenset[str] = frozenset({"harness"})  # the sampling settings and the instruction of the rollouts and the update

    def __init__(self, cfg: CoevolverConfig, seed: int, generate: TextGenerator | None = None):
        super().__init__(cfg, seed, generate)
        self.params = cfg.harness
        self.overrides: dict[str, float | int | str] = {}  # knob -> value in force (absent: params' value)
        self.entries: list[dict] = []  # every backtested change, accepted or not
        self.rejected_at: dict[str, int] = {}  # change key -> iteration of its last rejection

    def apply(self, cfg: Config) -> Config:
        """`cfg` with this version's overrides: the sampling knobs in `sampling`, the instruction in
        prompt.instruction.math."""
        sampling = cfg.sampling.model_copy(update={k: v for k, v in self.overrides.items() if k in SAMPLING_KNOBS})
        prompt = cfg.prompt
        if "instruction" in self.overrides:
            prompt = prompt.model_copy(update={"instruction": prompt.instruction.model_copy(update={"math": self.overrides["instruction"]})})
        return cfg.model_copy(update={"sampling": sampling, "prompt": prompt})

    def update(self, iteration: int, problems: pd.DataFrame, rollouts: pd.DataFrame, rewards: pd.DataFrame) -> dict:
        return {"iteration": iteration, "frozen": self.frozen, "overrides": dict(self.overrides)}

    # ---- the harness step (coevo.stages.coevolve_stage calls it after `update`) ----
    def diagnose(self, evidence: Mapping[str, float], current: Config, iteration: int) -> dict | None:
        """The change this iteration's evidence calls for, or None: {"knob", "value", "why"}: the first
        failure over its threshold with a value on its knob's ladder not rejected in the last
        retry_after iterations."""
        p = self.params
        for failure in FAILURES:
            share, threshold = evidence[failure.symptom], getattr(p, failure.threshold)
            if share < threshold:
                continue
            fresh = [v for v in self.ladder(failure.knob, current) if iteration - self.rejected_at.get(f"{failure.knob}={v}", -(10**9)) >= p.retry_after]
            if fresh:
                return {"knob": failure.knob, "value": fresh[0], "why": f"{failure.symptom} {share:.2f} >= {threshold}"}
        return None

    def ladder(self, knob: str, current: Config) -> list:
        """The values a fix of `knob` may take, in the order they are tried."""
        p, sampling = self.params, current.sampling
        if knob == "temperature":
            return _ladder(max(sampling.temperature, 0.05), p.temperature_step, p.max_temperature, sampling.temperature)
        if knob == "max_new_tokens":
            return [int(v) for v in _ladder(sampling.max_new_tokens, 2, p.max_tokens, sampling.max_new_tokens)]
        if current.prompt.format != "chat":
            return []  # the plain layout shows no instruction
        return [text for text in p.instructions if text != current.prompt.instruction.math]

    def revise(self, iteration: int, rollouts: pd.DataFrame, rewards: pd.DataFrame, train: pd.DataFrame, cfg: Config, sample: Sampler) -> dict:
        """Diagnose this iteration's rollouts, backtest the change they call for, keep it if it helps."""
        current = self.apply(cfg)
        evidence = group_evidence(rollouts, rewards, train)
        report = {"in_force": in_force(current), "evidence": evidence, "change": None}
        change = None if self.frozen else self.diagnose(evidence, current, iteration)
        if change is None:
            return report
        slice_ = self.backtest_slice(train)
        candidate = Harness(self.cfg, self.seed)
        candidate.overrides = {**self.overrides, change["knob"]: change["value"]}
        before, after = (group_evidence(*sample(slice_, setting), train) for setting in (current, candidate.apply(cfg)))
        measure = next(f.measure for f in FAILURES if f.knob == change["knob"])
        accepted = after[measure] - before[measure] >= self.params.min_gain and after["mean_reward"] >= before["mean_reward"] - self.params.max_reward_drop
        entry = {"iteration": iteration, **change, "from": report["in_force"][change["knob"]], "measure": measure, "before": before, "after": after, "accepted": accepted}
        self.entries.append(entry)
        if accepted:
            self.overrides = candidate.overrides
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
