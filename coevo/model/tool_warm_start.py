"""The tool warm start: supervised steps on demonstrated episodes, so that a checkpoint which writes no
tool call (SmolLM2-135M-Instruct wrote none in 64 episodes) learns the call format before RL.

With `bootstrap.tool_calls.steps` > 0 in a run with tools or an environment, checkpoint 0 is the policy
fine-tuned (in full) on episodes the built-in environment's expert plays on training problems
(coevo/environments/experts.py). Each demonstration is built as an episode is sampled
(coevo/rollout/episodes.py): the prompt rendered with the tools, each assistant turn's text and its
end-of-turn token, and between turns the chat template's bridge holding the tool's own result (each
call runs through the run's tools). The loss covers the assistant turns only, as the RL update trains
only the policy's tokens. Batches of `bootstrap.tool_calls.batch_size` episodes are drawn by a
generator seeded by the run's seed; the learning rate is `bootstrap.tool_calls.lr` (warm-up over a
twentieth of the steps, cosine decay to 10%).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from coevo.config import Config
from coevo.environments.experts import Expert, expert_for
from coevo.model.checkpoint import Policy
from coevo.model.supervised import BootstrapReport, supervised_steps
from coevo.rollout.episodes import bridge_ids, open_episode, renderer_for, toolbox
from coevo.rollout.tools import parse_tool_call, run_tool
from coevo.types import Generation

MAX_TURNS = 32  # an expert that calls more often than this is broken, not thorough


def demonstration(cfg: Config, renderer: Any, row: dict, expert: Expert) -> tuple[list[int], list[float], int]:
    """Token ids and loss mask of one demonstrated episode of `row` (its prompt as `renderer`, the
    run's renderer for the policy's tokenizer, renders it), and its tool calls."""
    tok = renderer.tokenizer
    episode = open_episode(toolbox(cfg), renderer, row)
    ids = tok(episode.prompt, add_special_tokens=False)["input_ids"]
    mask, results = [0.0] * len(ids), []
    for _ in range(MAX_TURNS):
        text = expert(row, results)
        turn = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        ids, mask = ids + turn, mask + [1.0] * len(turn)
        call = parse_tool_call(text)
        if call is None:
            return ids, mask, len(results)
        result = run_tool(call, episode.tools, cfg.environment.tool_timeout_s)
        if result.error:
            raise ValueError(f"problem {row.get('id')!r}: the expert's call {text!r} failed: {result.content}")
        results.append(result.content)
        bridge = bridge_ids(tok, Generation([], turn, [0.0] * len(turn), text), result.content)
        ids, mask = ids + bridge, mask + [0.0] * len(bridge)
    raise ValueError(f"problem {row.get('id')!r}: the expert made {MAX_TURNS} calls without answering")


def tool_warm_start(policy: Policy, train: pd.DataFrame, cfg: Config) -> BootstrapReport:
    """`bootstrap.tool_calls.steps` supervised steps of `policy` on demonstrated episodes of `train`'s problems."""
    expert = expert_for(cfg.environment.factory, cfg.tools)
    if expert is None:
        raise ValueError(
            "bootstrap.tool_calls.steps: demonstrations come from a built-in environment's expert (the calculator's "
            "tools, or coevo.environments.guessing:GuessingGame); this run names neither"
        )
    rows, renderer = train.to_dict("records"), renderer_for(cfg, policy.tokenizer)
    rng = np.random.default_rng([cfg.seed & (2**64 - 1), 29])
    calls = 0

    settings = cfg.bootstrap.tool_calls

    def batches() -> tuple[list[list[int]], list[list[float]]]:
        nonlocal calls
        drawn = [demonstration(cfg, renderer, rows[i], expert) for i in rng.integers(0, len(rows), settings.batch_size)]
        calls += sum(n for _, _, n in drawn)
        return [ids for ids, _, _ in drawn], [mask for _, mask, _ in drawn]

    warmup = max(1, settings.steps // 20)
    steps, loss, seconds = supervised_steps(
        policy.model, batches, policy.tokenizer.pad_token_id, settings.lr, settings.steps, warmup
    )
    return BootstrapReport(
        kind="tools",
        steps=steps,
        seconds=seconds,
        final_loss=loss,
        parameters=sum(p.numel() for p in policy.model.parameters()),
        demonstrations=steps * settings.batch_size,
        note=f"{calls} tool calls demonstrated",
    )
