"""Scoring completions against problems: the verification stage's rewards table and `score_rows`.

Each problem family's verifier comes from a registry (`FAMILY_VERIFIERS`, coevo/verification/family_verifiers.py);
`family_verdicts` (there, importable from here too) is the built-in reward `verifier` of `rewards:`
(coevo/verification/rewards.py), beside `format` and user plugins. `score_rows` is the one place a completion
meets the run's rewards: the verification stage (`verify_rollouts`) and the held-out evaluation
(coevo/evaluation.py) both call it, so a problem is judged the same way in training and in
evaluation. The default `rewards:` is `verifier` alone with weight 1, so each reward is exactly its
family verifier's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pandas as pd

from coevo.config import Config
from coevo.rollout.episodes import replay
from coevo.types import Reward
from coevo.verification.family_verifiers import family_verdicts  # noqa: F401 (re-exported: `from coevo.verification.stage import family_verdicts`)
from coevo.verification.reward_calls import Episodes, RewardLog, TrainerState, retokenized
from coevo.verification.rewards import BUILTIN_REWARDS, combine, reward_terms
from schemas.rewards import COMPONENTS, LOGGED


def score_rows(
    problems: pd.DataFrame,
    completions: Sequence[str],
    cfg: Config,
    prompts: Sequence[str] | None = None,
    completion_ids: Sequence[Sequence[int]] | None = None,
    state: TrainerState | None = None,
    log: RewardLog | None = None,
    episodes: Episodes | None = None,
) -> list[Reward]:
    """One reward per (problems-table row, completion) pair, in order: the weighted sum of `rewards:`
    (each value in `components`), `passed` by the `verifier` entry (coevo/verification/rewards.py). `prompts`: the
    full prompts the policy saw (default: the rows' bare prompts); `completion_ids`, `state` (TRL's
    `trainer_state`), `log` (what plugins log) and `episodes` (a multi-turn run's turns and
    environments) are passed to plugins (coevo/verification/reward_calls.py)."""
    if len(problems) != len(completions):
        raise ValueError(f"score_rows: {len(problems)} problem rows but {len(completions)} completions")
    prompts = list(problems["prompt"]) if prompts is None else prompts
    state = state or TrainerState(max_steps=cfg.run.iterations)
    if completion_ids is None and any(entry.function not in BUILTIN_REWARDS.names() for entry in cfg.rewards):
        completion_ids = retokenized(cfg, completions)  # a plugin reads completion_ids: the evaluation keeps texts only
    return combine(
        reward_terms(cfg),
        problems,
        completions,
        prompts,
        cfg.rewards_pass_threshold,
        completion_ids,
        state,
        log,
        episodes,
    )


def replayed(cfg: Config, rows: pd.DataFrame, rollouts: pd.DataFrame) -> Episodes | None:
    """A multi-turn run's episodes as reward plugins read them: each rollout's turns, and its
    environment rebuilt by replaying the episode's calls (coevo/rollout/episodes.py `replay`). None
    when no `rewards:` entry is a plugin: the built-ins read the last turn's text, and nothing is replayed."""
    if not cfg.episodes or "messages" not in rollouts.columns or not any(":" in e.function for e in cfg.rewards):
        return None
    messages = [json.loads(text) if text else [] for text in rollouts["messages"]]
    return Episodes(messages, [replay(cfg, row, turns) for row, turns in zip(rows.to_dict("records"), messages)])


def verify_rollouts(rollouts: pd.DataFrame, problems: pd.DataFrame, cfg: Config | None = None) -> pd.DataFrame:
    """One rewards row per rollout (schemas/rewards.py), same order. `cfg` is the run's config (its
    code.sandbox runs code problems); None means the defaults of coevo.config."""
    rows = problems.set_index("id").loc[rollouts["problem_id"]].reset_index()
    if len(rollouts):
        rows.attrs["iteration"] = int(
            rollouts["iteration"].iloc[0]
        )  # which rubric version judges them (reward `rubric`)
    prompts = list(rollouts["prompt"]) if "prompt" in rollouts.columns else None
    ids = list(rollouts["completion_ids"]) if "completion_ids" in rollouts.columns else None
    cfg = cfg or Config()
    log = RewardLog(len(rollouts))
    state, episodes = trainer_state(cfg, rollouts, problems), replayed(cfg, rows, rollouts)
    results = score_rows(rows, list(rollouts["completion"]), cfg, prompts, ids, state, log, episodes)
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
    return TrainerState(
        global_step=step,
        max_steps=cfg.run.iterations,
        epoch=step * per_epoch,
        num_train_epochs=cfg.run.iterations * per_epoch,
    )
