"""Rollout stage: sample each problem's group under the contexts the co-evolver plans.

Every completion becomes one row of the rollouts table (schemas/rollouts.py): which problem, which
context variant and skills, the exact prompt and completion token ids, and the engine's per-token
sampling logprobs, so the policy update and the catalog never need to re-tokenise or re-sample.
Prompts are rendered by `prompt.format` (coevo/rollout/prompting.py); `question` stays the bare problem text.
"""

from __future__ import annotations

import json

import pandas as pd

from coevo.config import Config
from coevo.errors import InputError
from coevo.rollout.engines import with_prompt_format
from coevo.rollout.engines.base import Engine
from coevo.rollout.episodes import renderer_for, sample
from coevo.rollout.prompting import conversation_of
from coevo.rollout.roles import posed
from coevo.seeding import derive_seed
from coevo.types import ContextVariant, Generation


def run_rollouts(
    engine: Engine,
    variants: list[ContextVariant],
    problems: pd.DataFrame,
    cfg: Config,
    iteration: int,
    policy_version: str,
    seed_stage: str = "rollout",
) -> pd.DataFrame:
    """One row per sample (an episode when the run has tools, coevo/rollout/episodes.py) of the
    variant's role (coevo/rollout/roles.py), in plan order; `rollout_id` is iteration-problem-slot,
    the slots counted over the problem's roles. Sampling is seeded from (seed, iteration,
    seed_stage): a shard of the batch passes its own (coevo/shards.py)."""
    by_id = problems.set_index("id")
    rows_of = {pid: {"id": pid, **row} for pid, row in by_id.to_dict("index").items()}
    if cfg.update_context == "strip":
        _check_strippable(renderer_for(cfg, with_prompt_format(engine, cfg).tokenizer), rows_of.values())
    flat = [v for v in variants for _ in range(v.n)]
    posed_rows = [posed(rows_of[v.problem_id], v.role) for v in flat]
    seed = derive_seed(cfg.seed, iteration, seed_stage)
    generations = sample(engine, cfg, posed_rows, [v.texts for v in flat], 1, cfg.sampling, seed)
    rows, slots = [], {}
    for variant, row, (generation,) in zip(flat, posed_rows, generations):
        slot = slots.get(variant.problem_id, 0)
        slots[variant.problem_id] = slot + 1
        rows.append(
            {
                "rollout_id": f"{iteration:04d}-{variant.problem_id}-{slot:03d}",
                "iteration": iteration,
                "problem_id": variant.problem_id,
                "role": variant.role,
                "family": by_id.at[variant.problem_id, "family"],
                "variant": variant.variant,
                "probe_skill": variant.probe_skill,
                "skills": list(variant.skills),
                "question": row["prompt"],
                "prompt": generation.prompt,
                "completion": generation.text,
                "prompt_ids": generation.prompt_ids,
                "completion_ids": generation.token_ids,
                "sampling_logprobs": generation.logprobs,
                "finished": generation.finished,
                "policy_version": policy_version,
                **episode_columns(generation),
            }
        )
    return pd.DataFrame(rows)


def episode_columns(generation: Generation) -> dict:
    """The rollouts table's episode columns of one sample (one turn without tools: 1 turn, no calls)."""
    return {
        "turns": generation.turns,
        "tool_calls": generation.tool_calls,
        "tool_errors": generation.tool_errors,
        "truncated": generation.truncated,
        "messages": json.dumps(generation.messages, ensure_ascii=False) if generation.messages else "",
        "policy_mask": list(generation.policy_mask) if generation.policy_mask is not None else [],
    }


def check_conversations(cfg: Config, problems: pd.DataFrame) -> None:
    """Before anything runs, for conversational problems (`messages`): `prompt.format` must be chat
    (the plain layout has no turns), and a co-evolver that gives context, with
    `coevolver.update_context: strip`, re-renders each row from its bare question in the update,
    which a conversation with turns beyond the question (a system turn, earlier turns) cannot be.
    A run without context never asks (Config.update_context is then "keep")."""
    for row in problems.to_dict("records"):
        turns = conversation_of(row)
        if turns and cfg.prompt.format != "chat":
            raise InputError(
                f"problem {row['id']!r} is a conversation (`messages`), which prompt.format: {cfg.prompt.format} "
                f"cannot render; "
                "set prompt.format: chat (the tokenizer's chat template, policy.checkpoint's tokenizer must have one)"
            )
        if len(turns) > 1 and cfg.update_context == "strip":
            raise InputError(
                f"problem {row['id']!r}: its `messages` hold {len(turns)} turns "
                f"({', '.join(t['role'] for t in turns)}); coevolver.update_context: strip "
                "trains on the bare question and cannot re-render the other turns; set coevolver.update_context: keep "
                "(the update then trains on the prompt as sampled, context included)"
            )


def _check_strippable(renderer, rows) -> None:
    """With `coevolver.update_context: strip` the update re-renders each row from its bare question;
    a conversation whose other turns (its own system turn, earlier turns) change the prompt cannot be
    re-rendered from the question alone, so it needs `update_context: keep`."""
    for row in rows:
        if conversation_of(row) and renderer.render(row) != renderer.render(
            {"prompt": row["prompt"], "family": row["family"]}
        ):
            raise ValueError(
                f"problem {row['id']!r}: its `messages` hold turns beyond the question, which "
                f"coevolver.update_context: strip "
                "cannot re-render in the policy update; set coevolver.update_context: keep"
            )
