"""Scoring completions against problems: the verification stage's rewards table and `score_rows`.

Verifiers are chosen by problem family from a registry (`FAMILY_VERIFIERS`), never by if-chains: the
built-in arithmetic families (add, sub, mul, addmul) need the answer stated as a number
(`check_stated_number`: math-verify would evaluate a boxed restatement of the question, a reward
hack a real policy found); a family without an entry (user math files) gets the math verifier
(exact integers, math-verify for other answers); the code
families (coevo.code.families.CODE_FAMILIES) run the completion's program against the hidden tests
in the sandbox configured by code.sandbox. An entry is `score(problem_rows, completions, cfg) ->
list[Reward]`, where the rows are problems-table rows of that family, one per completion.

`family_verdicts` is the built-in reward `verifier` of `rewards:` (coevo/rewards.py), beside
`format` and user plugins; `score_rows` is the one place a completion meets the run's rewards: the
verification stage (`verify_rollouts`) and the held-out evaluation (coevo/evaluate.py) both call it,
so a problem is judged the same way in training and in evaluation. The default `rewards:` is
`verifier` alone with weight 1, so each reward is exactly its family verifier's.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

import pandas as pd

from coevo.code.families import CODE_FAMILIES
from coevo.code.verifier import score_problem_rows
from coevo.config import Config
from coevo.problems.constraints import KINDS as CONSTRAINT_KINDS, score_constraints
from coevo.problems.arithmetic import COMBINATIONS, FAMILIES as ARITHMETIC_FAMILIES
from coevo.problems.verifier import MathVerifier, check_stated_number
from coevo.registry import Registry
from coevo.reward_calls import RewardLog, TrainerState, retokenized
from coevo.rewards import BUILTIN_REWARDS, combine, reward_terms
from coevo.types import Reward
from schemas.rewards import COMPONENTS, LOGGED

FamilyVerifier = Callable[[pd.DataFrame, Sequence[str], Config], list[Reward]]
FAMILY_VERIFIERS = Registry("family verifier")
register_family_verifier = FAMILY_VERIFIERS.add


def score_math(problems: pd.DataFrame, completions: Sequence[str], cfg: Config) -> list[Reward]:
    return MathVerifier().score(list(problems["answer"]), list(completions))


def score_arithmetic(problems: pd.DataFrame, completions: Sequence[str], cfg: Config) -> list[Reward]:
    return [check_stated_number(completion, str(answer)) for answer, completion in zip(problems["answer"], completions, strict=True)]


for _family in [*ARITHMETIC_FAMILIES, *COMBINATIONS]:
    register_family_verifier(_family, score_arithmetic)
for _family in CODE_FAMILIES:
    register_family_verifier(_family, score_problem_rows)
for _family in CONSTRAINT_KINDS:  # the constraint problems' hidden gold checks
    register_family_verifier(_family, score_constraints)


def verifier_for(family: str) -> FamilyVerifier:
    return FAMILY_VERIFIERS[family] if family in FAMILY_VERIFIERS.names() else score_math


def score_rows(
    problems: pd.DataFrame,
    completions: Sequence[str],
    cfg: Config,
    prompts: Sequence[str] | None = None,
    completion_ids: Sequence[Sequence[int]] | None = None,
    state: TrainerState | None = None,
    log: RewardLog | None = None,
) -> list[Reward]:
    """One reward per (problems-table row, completion) pair, in order: the weighted sum of `rewards:`
    (each value in `components`), `passed` by the `verifier` entry (coevo/rewards.py). `prompts`: the
    full prompts the policy saw (default: the rows' bare prompts); `completion_ids`, `state` (TRL's
    `trainer_state`) and `log` (what plugins log) are passed to plugins (coevo/reward_calls.py)."""
    if len(problems) != len(completions):
        raise ValueError(f"score_rows: {len(problems)} problem rows but {len(completions)} completions")
    prompts = list(problems["prompt"]) if prompts is None else prompts
    state = state or TrainerState(max_steps=cfg.run.iterations)
    if completion_ids is None and any(entry.function not in BUILTIN_REWARDS.names() for entry in cfg.rewards):
        completion_ids = retokenized(cfg, completions)  # a plugin reads completion_ids: the evaluation keeps texts only
    return combine(reward_terms(cfg), problems, completions, prompts, cfg.rewards_pass_threshold, completion_ids, state, log)


def family_verdicts(problems: pd.DataFrame, completions: Sequence[str], cfg: Config) -> list[Reward]:
    """One verdict per (problems-table row, completion) pair, in order, each by its family's verifier.

    Rows are grouped by verifier, not by family, so every code sample of a batch runs in one
    parallel sandbox call whatever its family.
    """
    groups: dict[FamilyVerifier, list[int]] = {}
    for position, family in enumerate(problems["family"]):
        groups.setdefault(verifier_for(str(family)), []).append(position)
    results: list[Reward | None] = [None] * len(problems)
    for verifier, positions in groups.items():
        scored = verifier(problems.iloc[positions].reset_index(drop=True), [completions[i] for i in positions], cfg)
        for i, reward in zip(positions, scored, strict=True):
            results[i] = reward
    return results


def verify_rollouts(rollouts: pd.DataFrame, problems: pd.DataFrame, cfg: Config | None = None) -> pd.DataFrame:
    """One rewards row per rollout (schemas/rewards.py), same order. `cfg` is the run's config (its
    code.sandbox runs code problems); None means the defaults of coevo.config."""
    rows = problems.set_index("id").loc[rollouts["problem_id"]].reset_index()
    if len(rollouts):
        rows.attrs["iteration"] = int(rollouts["iteration"].iloc[0])  # which rubric version judges them (reward `rubric`)
    prompts = list(rollouts["prompt"]) if "prompt" in rollouts.columns else None
    ids = list(rollouts["completion_ids"]) if "completion_ids" in rollouts.columns else None
    cfg = cfg or Config()
    log = RewardLog(len(rollouts))
    results = score_rows(rows, list(rollouts["completion"]), cfg, prompts, ids, trainer_state(cfg, rollouts, problems), log)
    return pd.DataFrame(
        {
            "rollout_id": rollouts["rollout_id"].to_numpy(),
            "iteration": rollouts["iteration"].to_numpy(),
            "problem_id": rollouts["problem_id"].to_numpy(),
            "reward": [r.reward for r in results],
            "passed": [r.passed for r in results],
            "verifier": [r.verifier for r in results],
            "details": [r.details for r in results],
            COMPONENTS: [json.dumps(r.components, separators=(",", ":")) for r in results],
            LOGGED: log.rows(),
        }
    )


def trainer_state(cfg: Config, rollouts: pd.DataFrame, train: pd.DataFrame) -> TrainerState:
    """TRL's `trainer_state` for the rollouts of one iteration: global_step = the iteration,
    max_steps = run.iterations, epoch = problems rolled out so far / training problems."""
    step = int(rollouts["iteration"].iloc[0]) if len(rollouts) else 0
    per_epoch = cfg.rollout.problems_per_iter / max(len(train), 1)
    return TrainerState(global_step=step, max_steps=cfg.run.iterations, epoch=step * per_epoch, num_train_epochs=cfg.run.iterations * per_epoch)
