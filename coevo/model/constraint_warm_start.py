"""Warm start of the tiny policy for the constraint problems (problems.source: constraints).

The character-level tiny model knows no English. It sees `bootstrap.steps` batches of demonstrations
"<bos>prompt response<eos>" (the plain prompt layout, the space scored), where the response is a
short template sentence about the prompt's topic that satisfies the constraint about half of the
time (coevo/problems/constraints.py `demonstration`):
the policy learns to answer in sentences and to stop, and RL starts from groups with mixed outcomes.
The loss covers the response and <eos> only.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from coevo.config import Config
from coevo.model.checkpoint import Policy
from coevo.model.supervised import BootstrapReport, bootstrap_steps
from coevo.problems.constraints import demonstration, parse_spec


def constraint_sequences(
    pool: pd.DataFrame, batch_size: int, rng: np.random.Generator, tokenizer
) -> tuple[list[list[int]], list[list[float]]]:
    """Token ids and loss masks of one batch of demonstrations."""
    sequences, masks = [], []
    for row in pool.iloc[rng.integers(0, len(pool), batch_size)].itertuples():
        prompt = [tokenizer.bos_token_id] + tokenizer(row.prompt, add_special_tokens=False)["input_ids"]
        reply = tokenizer(
            " " + demonstration(row.prompt, parse_spec(row.answer, row.id), rng), add_special_tokens=False
        )["input_ids"]
        reply = reply + [tokenizer.eos_token_id]
        sequences.append(prompt + reply)
        masks.append([0.0] * len(prompt) + [1.0] * len(reply))
    return sequences, masks


def constraint_warm_start(policy: Policy, train: pd.DataFrame, cfg: Config) -> BootstrapReport:
    """bootstrap.steps supervised steps (or its time budget / replay_steps) on the demonstrations."""
    rng = np.random.default_rng(cfg.seed)
    tok = policy.tokenizer
    return bootstrap_steps(
        "constraints",
        policy.model,
        lambda: constraint_sequences(train, cfg.bootstrap.batch_size, rng, tok),
        tok.pad_token_id,
        cfg.bootstrap,
    )
