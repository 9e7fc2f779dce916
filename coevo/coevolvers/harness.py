"""Harness co-evolver: the sampling settings, the answer-format instruction, the shaping terms'
weights and an episode's turn limit the trainer runs with, diagnosed from the rollouts and changed
only when a backtest on the frozen current policy shows the change helps.

Method: EvoTrainer / HarnessRL: besides the weights, the trainer controls a
harness (prompts, sampling settings, shaping terms, task weights) that can be quietly wrong. Each
iteration the harness co-evolver diagnoses failure modes from rollout evidence, proposes a change,
and backtests it against the harness in force before accepting it; accepted changes are versioned
entries, rejected ones are kept with their measured effect.

What this harness holds (departures from the papers):
1. Five knobs, the ones whose failures the rollouts show directly (`FAILURES`, tried in this order):
   - the sampling temperature; failure: collapsed groups (every completion of a group identical, so
     no reward variance and no advantage), at least `collapse_share` of the groups;
   - the weight of each shaping term (every `rewards:` entry but the gold `verifier`, whose verdict
     is `passed` whatever its weight; knob `weight:<name>`); failure: the rewards rank a failing
     completion at least as high as a passing one of the same group (GRPO's advantage then pushes
     the wrong way) in at least `misrank_share` of such pairs. The audit reads `passed` from the
     rewards table, where the verification stage already wrote it (without a `verifier` entry,
     `passed` follows the total and no pair is misranked). Before the others: a wrong reward skews
     what the policy learns to write, and with it every other symptom (a length bonus shows as
     truncation, docs/benchmarks/harness-shaping.md);
   - environment.max_turns, where samples are multi-turn episodes (tools or environment.factory);
     failure: at least `turn_limit_share` of the episodes cut in their last allowed turn with a tool
     call unanswered. Before the format and truncation failures, which such an episode also shows
     (it states no answer and is unfinished);
   - the answer-format instruction of the chat format (prompt.instruction.math; the plain layout has
     none); failure: completions that fail and were cut before their end or state no number the
     verifier reads (problems with a numeric answer), at least `format_share` of the completions the
     instruction applies to (every problem but code). Before truncation: an instruction that asks
     for an explanation also shows as truncation, and changing it costs no longer generations;
   - max_new_tokens; failure: at least `truncation_share` of the completions unfinished.
   The version holds overrides of params' values; version 0 has none. Task weights are the
   curriculum's role and rubric criteria the rubrics co-evolver's; the system prompt is not changed.
2. At most one change per iteration: the first failure whose symptom is over its threshold and whose
   knob has a value not rejected in the last `retry_after` iterations, the first such value of its
   ladder: temperature x `temperature_step`, x `temperature_step`^2, ... then `max_temperature`;
   the `instructions` in order, skipping the one in force; max_new_tokens x 2, x 4, ... then
   `max_tokens`; max_turns x 2, ... then `max_turns`; each shaping term in `rewards:` order, its
   weight set to 0 (halving was measured too timid: a policy exploiting a length bonus outgrew each
   halving, docs/benchmarks/harness-shaping.md).
3. Backtest (`backtest_before`): by default a seeded draw splits the iteration's batch in two
   halves; the diagnosis (2.) reads one, and the other half's own rollouts, sampled by the same
   frozen policy under the harness in force, are the "before" arm, so only the candidate is sampled
   (`rollout.group_size` completions of at most `backtest_problems` of that half's problems) and
   verified: one arm of half a batch instead of two of `backtest_problems` (a shaping term's weight,
   which changes the scoring and not the samples, is backtested by sampling both arms on that half
   with one seed: the same samples scored both ways). The halves are disjoint because a symptom
   that crossed its threshold by chance on the diagnosed rollouts would make those same rollouts a
   "before" arm worse than the harness in force is, and an ineffective change would then pass.
   With `resample` (and for batches with context variants, which are not what the candidate is
   sampled as), the diagnosis reads the whole batch and both arms are sampled, with the same seed,
   on a fixed slice of `backtest_problems` training problems (a seeded choice made once per run).
   The candidate is accepted when its measure (collapse: the share of groups with reward variance;
   turn limit: the share of episodes not cut at it; format: the share of completions without a
   format failure; truncation: the share of finished completions; misranking: the share of (passing,
   failing) pairs ranked right) gains at least `min_gain`, or half of what it could gain (1 -
   before) when that is less, and its pass rate (the gold verdict `passed`, not the reward: shaping
   terms and the harness's own weights move the reward) does not fall by more than `max_pass_drop`.
   A rejected value is not backtested again for `retry_after` iterations (the next diagnosis tries
   the next rung).
4. The change takes effect from the next iteration: its rollouts, their rewards and the policy
   update's prompts and log-probs use the harness in force (coevo/stages/in_force.py). Evaluation
   asks with the instruction and the turn limit the checkpoint was trained under (they are part of
   how it is meant to be asked), keeps params' sampling and counts the gold verdict, which no weight
   moves.

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

from coevo.code.families import CODE_FAMILIES
from coevo.coevolvers.base import CoevolverDirError, TextGenerator, read_artifact, register_coevolver, save_artifact
from coevo.coevolvers.none import NoCoEvolver
from coevo.coevolvers.writers import worked_texts
from coevo.config import CoevolverConfig, Config, RewardEntry
from coevo.problems.math_verifier import canonical_number, extract_final_number
from coevo.seeding import derive_seed

HARNESS = "harness.json"
SAMPLING_KNOBS = ("temperature", "max_new_tokens")
KNOBS = (*SAMPLING_KNOBS, "instruction", "max_turns")  # prompt.instruction.math, environment.max_turns
WEIGHT = "weight:"  # knob prefix: "weight:<name>" is the weight of the `rewards:` entry of that name

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
    Failure("misranked_share", "misrank_share", WEIGHT, "ranked_share"),
    Failure("turn_limited_share", "turn_limit_share", "max_turns", "within_turns_share"),
    Failure("format_failure_share", "format_share", "instruction", "formatted_share"),
    Failure("unfinished_share", "truncation_share", "max_new_tokens", "finished_share"),
)


def failure_of(knob: str) -> Failure:
    return next(f for f in FAILURES if knob.startswith(f.knob))


def group_evidence(
    rollouts: pd.DataFrame, rewards: pd.DataFrame, problems: pd.DataFrame, max_turns: int | None = None
) -> dict[str, float]:
    """Shares over the groups (one per problem) and completions of one batch; `problems` holds the
    batch's rows (id, family, answer). An episode counts as its whole text (`worked_texts`: two
    episodes with one answer reached by different calls are not a collapse), and as turn-limited
    when it was cut with a call unanswered in its `max_turns`-th turn (the limit it was sampled with)."""
    columns = [c for c in ("rollout_id", "problem_id", "completion", "finished", "truncated", "turns") if c in rollouts]
    joined = (
        rollouts[columns]
        .assign(sample=worked_texts(rollouts))
        .merge(rewards[["rollout_id", "reward", "passed"]], on="rollout_id")
    )
    joined["passed"] = joined["passed"].astype(bool)
    rows = problems.set_index("id").loc[joined["problem_id"]]
    instructed = ~rows["family"].isin(CODE_FAMILIES).to_numpy()  # prompt.instruction.math applies
    numeric = rows["answer"].map(lambda answer: canonical_number(str(answer)) is not None).to_numpy()
    silent = joined["completion"].map(lambda text: extract_final_number(text) is None).to_numpy()
    finished, passed = joined["finished"].to_numpy(bool), joined["passed"].to_numpy(bool)
    turn_limited = (
        (joined["truncated"].to_numpy(bool) & (joined["turns"].to_numpy() >= max_turns))
        if max_turns is not None and "truncated" in joined
        else np.zeros(len(joined), bool)
    )
    format_failed = instructed & ~passed & (~finished | (numeric & silent))
    groups = joined.groupby("problem_id", sort=True)
    misranked, pairs = 0, 0
    for _, group in groups:
        passing, failing = (
            group.loc[group["passed"], "reward"].to_numpy(),
            group.loc[~group["passed"], "reward"].to_numpy(),
        )
        misranked += int((failing[None, :] >= passing[:, None]).sum())
        pairs += len(passing) * len(failing)
    return {
        "collapsed_share": float((groups["sample"].nunique() == 1).mean()),
        "signal_share": float((groups["reward"].nunique() > 1).mean()),
        "format_failure_share": float(format_failed.sum() / instructed.sum()) if instructed.any() else 0.0,
        "formatted_share": float(1.0 - format_failed.sum() / instructed.sum()) if instructed.any() else 1.0,
        "finished_share": float(finished.mean()),
        "unfinished_share": float(1.0 - finished.mean()),
        "turn_limited_share": float(turn_limited.mean()),
        "within_turns_share": float(1.0 - turn_limited.mean()),
        "misranked_share": misranked / pairs if pairs else 0.0,
        "ranked_share": 1.0 - misranked / pairs if pairs else 1.0,
        "mean_reward": float(joined["reward"].mean()),
        "pass_rate": float(passed.mean()),
    }


def rows_of(rollouts: pd.DataFrame, rewards: pd.DataFrame, problem_ids: set[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rollouts of `problem_ids` and their rewards."""
    kept = rollouts[rollouts["problem_id"].isin(problem_ids)]
    return kept, rewards[rewards["rollout_id"].isin(kept["rollout_id"])]


def in_force(cfg: Config) -> dict[str, float | int | str | None]:
    """The knobs' values in `cfg` (a shaping term's weight under its `weight:<name>` knob; the turn
    limit where samples are episodes)."""
    weights = {f"{WEIGHT}{entry.label}": entry.weight for entry in shaping_terms(cfg)}
    turns = {"max_turns": cfg.environment.max_turns} if cfg.episodes else {}
    return {
        "temperature": cfg.sampling.temperature,
        "max_new_tokens": cfg.sampling.max_new_tokens,
        "instruction": cfg.prompt.instruction.math,
        **turns,
        **weights,
    }


def shaping_terms(cfg: Config) -> list[RewardEntry]:
    """The `rewards:` entries whose weight the harness may change: all but the gold `verifier`."""
    return [entry for entry in cfg.rewards if entry.function != "verifier"]


def with_overrides(cfg: Config, overrides: Mapping[str, object]) -> Config:
    """`cfg` with knob overrides: the sampling knobs in `sampling`, the instruction in
    prompt.instruction.math, max_turns in `environment`, `weight:<name>` in `rewards`."""
    sampling = cfg.sampling.model_copy(update={k: v for k, v in overrides.items() if k in SAMPLING_KNOBS})
    prompt = cfg.prompt
    if "instruction" in overrides:
        prompt = prompt.model_copy(
            update={"instruction": prompt.instruction.model_copy(update={"math": overrides["instruction"]})}
        )
    rewards = [
        entry.model_copy(update={"weight": overrides.get(f"{WEIGHT}{entry.label}", entry.weight)})
        for entry in cfg.rewards
    ]
    environment = cfg.environment.model_copy(update={k: v for k, v in overrides.items() if k == "max_turns"})
    update = {"sampling": sampling, "prompt": prompt, "environment": environment, "rewards": rewards}
    return cfg.model_copy(update=update)


@register_coevolver("harness")
class Harness(NoCoEvolver):
    """Plans, chooses and gives context as the plain baseline does (NoCoEvolver); evolves the sampling
    settings, the answer-format instruction and the shaping terms' weights."""

    roles: frozenset[str] = frozenset({"harness"})  # what the rollouts, their rewards and the update run under

    def __init__(self, cfg: CoevolverConfig, seed: int, generate: TextGenerator | None = None):
        super().__init__(cfg, seed, generate)
        self.params = cfg.harness
        self.overrides: dict[str, float | int | str] = {}  # knob -> value in force (absent: params' value)
        self.entries: list[dict] = []  # every backtested change, accepted or not
        self.rejected_at: dict[str, int] = {}  # change key -> iteration of its last rejection

    def apply(self, cfg: Config) -> Config:
        """`cfg` with this version's overrides (`with_overrides`)."""
        return with_overrides(cfg, self.overrides)

    def knobs(self, cfg: Config) -> dict[str, float | int | str | None]:
        """The knobs' values in `cfg` (`in_force`)."""
        return in_force(cfg)

    def harness_metrics(self, report: Mapping) -> dict[str, float]:
        """coevo/harness_<sampling knob> and coevo/harness_max_turns on episodes (the values in force
        during the iteration) and whether a change was backtested and accepted, from `revise`'s report."""
        entry = report.get("entry")
        shown = [k for k in (*SAMPLING_KNOBS, "max_turns") if k in report["in_force"]]
        return {
            **{f"coevo/harness_{k}": float(report["in_force"][k]) for k in shown},
            "coevo/harness_backtests": float(entry is not None),
            "coevo/harness_accepted": float(bool(entry and entry["accepted"])),
        }

    def update(self, iteration: int, problems: pd.DataFrame, rollouts: pd.DataFrame, rewards: pd.DataFrame) -> dict:
        return {"iteration": iteration, "frozen": self.frozen, "overrides": dict(self.overrides)}

    # ---- the harness step (coevo.stages.coevolve.coevolve_stage calls it after `update`) ----
    def diagnose(self, evidence: Mapping[str, float], current: Config, iteration: int) -> dict | None:
        """The change this iteration's evidence calls for, or None: {"knob", "value", "why"}: the first
        failure over its threshold with a value on its knob's ladder not rejected in the last
        retry_after iterations."""
        p = self.params
        for failure in FAILURES:
            share, threshold = evidence[failure.symptom], getattr(p, failure.threshold)
            if share < threshold:
                continue
            fresh = [
                (knob, v)
                for knob, v in self.ladder(failure.knob, current)
                if iteration - self.rejected_at.get(f"{knob}={v}", -(10**9)) >= p.retry_after
            ]
            if fresh:
                knob, value = fresh[0]
                return {"knob": knob, "value": value, "why": f"{failure.symptom} {share:.2f} >= {threshold}"}
        return None

    def ladder(self, knob: str, current: Config) -> list[tuple[str, object]]:
        """The (knob, value) changes a fix of `knob` may make, in the order they are tried."""
        p, sampling = self.params, current.sampling
        if knob == "temperature":
            return [
                (knob, v)
                for v in _ladder(
                    max(sampling.temperature, 0.05), p.temperature_step, p.max_temperature, sampling.temperature
                )
            ]
        if knob == "max_new_tokens":
            return [(knob, int(v)) for v in _ladder(sampling.max_new_tokens, 2, p.max_tokens, sampling.max_new_tokens)]
        if knob == "max_turns":
            turns = current.environment.max_turns
            return [(knob, int(v)) for v in _ladder(turns, 2, p.max_turns, turns)] if current.episodes else []
        if knob == WEIGHT:
            return [(f"{WEIGHT}{e.label}", 0.0) for e in shaping_terms(current) if e.weight != 0]
        if current.prompt.format != "chat":
            return []  # the plain layout shows no instruction
        return [(knob, text) for text in p.instructions if text != current.prompt.instruction.math]

    def revise(
        self,
        iteration: int,
        rollouts: pd.DataFrame,
        rewards: pd.DataFrame,
        train: pd.DataFrame,
        cfg: Config,
        sample: Sampler,
    ) -> dict:
        """Diagnose this iteration's rollouts, backtest the change they call for, keep it if it helps."""
        current = self.apply(cfg)
        reuse = (
            self.params.backtest_before == "rollouts"
            and set(rollouts["variant"]) == {"solo"}
            and rollouts["problem_id"].nunique() > 1
        )
        diagnosed, held = self.split_batch(rollouts, iteration) if reuse else (set(rollouts["problem_id"]), set())
        limit = current.environment.max_turns
        evidence = group_evidence(*rows_of(rollouts, rewards, diagnosed), train, limit)
        report = {"in_force": in_force(current), "evidence": evidence, "change": None}
        change = None if self.frozen else self.diagnose(evidence, current, iteration)
        if change is None:
            return report
        candidate = {**self.overrides, change["knob"]: change["value"]}
        slice_ = train.set_index("id").loc[sorted(held)].reset_index() if reuse else self.backtest_slice(train)
        if reuse and not change["knob"].startswith(WEIGHT):
            before = group_evidence(*rows_of(rollouts, rewards, held), train, limit)
        else:  # a weight changes only the scoring: both arms draw with one seed, the same samples scored twice
            before = group_evidence(*sample(slice_, current), train, limit)
        trial = with_overrides(cfg, candidate)
        after = group_evidence(*sample(slice_, trial), train, trial.environment.max_turns)
        measure = failure_of(change["knob"]).measure
        room = 1.0 - before[measure]  # a share cannot gain more
        needed = min(self.params.min_gain, room / 2) if room > 0 else self.params.min_gain
        accepted = (
            after[measure] - before[measure] >= needed
            and after["pass_rate"] >= before["pass_rate"] - self.params.max_pass_drop
        )
        entry = {
            "iteration": iteration,
            **change,
            "from": report["in_force"][change["knob"]],
            "measure": measure,
            "before": before,
            "after": after,
            "accepted": accepted,
        }
        self.entries.append(entry)
        if accepted:
            self.overrides = candidate
        else:
            self.rejected_at[f"{change['knob']}={change['value']}"] = iteration
        return {**report, "change": change, "entry": entry}

    def split_batch(self, rollouts: pd.DataFrame, iteration: int) -> tuple[set[str], set[str]]:
        """The batch's problems (at least two) as (diagnosed, backtested): a seeded draw, the backtested
        half at most backtest_problems."""
        ids = np.array(sorted(set(rollouts["problem_id"])))
        order = np.random.default_rng(derive_seed(self.seed, "harness-split", iteration)).permutation(len(ids))
        half = min(len(ids) // 2, self.params.backtest_problems)
        return set(ids[order[half:]]), set(ids[order[:half]])

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
        unknown = {knob for knob in state["overrides"] if knob not in KNOBS and not knob.startswith(WEIGHT)}
        if unknown:
            raise CoevolverDirError(
                f"{Path(directory) / HARNESS}: field 'overrides': unknown knobs {sorted(unknown)} (known: "
                f"{list(KNOBS)} and {WEIGHT}<name of a rewards: entry>)"
            )
        harness = cls(cfg, seed)
        harness.overrides, harness.entries, harness.rejected_at = (
            dict(state["overrides"]),
            list(state["entries"]),
            dict(state["rejected_at"]),
        )
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
