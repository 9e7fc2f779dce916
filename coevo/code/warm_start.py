"""Supervised warm start of the tiny policy on both roles of the synthetic code family.

The solver sees `prompt -> solution<eos>` (e.g. `#f(1)=4 f(2)=5 f(6)=9\\ndef f(x): return ` -> `x+3`),
the tester `spec + "assert f(" -> "<x>)==<f(x)><eos>"` for a hidden input. Demonstrations come from
`code.synth.warm_start_families` only, so RL meets the other families with rewards alone (as the
arithmetic bootstrap does). It reuses the supervised loop and masked NLL of the arithmetic
bootstrap (coevo/model/supervised.py); the loss covers the completion and <eos>, never the prompt.

The pipeline's bootstrap (coevo/model/bootstrap.py, for every code source) calls
`code_warm_start_problems` on the train split as the problems table. A run whose `rollout.roles`
is the solver alone does not use the tester half of the demonstrations (kept: one warm start, the
same checkpoint 0 for the solver-only and the CURE arms of a comparison).
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from coevo.code.problems import TESTER_CUE, from_problems_frame, tester_prompt
from coevo.config import Config
from coevo.model.checkpoint import Policy
from coevo.model.supervised import BootstrapReport, supervised_steps

# The Config fields the code warm start reads (a pydantic `include`): part of the bootstrap key.
CODE_WARM_START_SETTINGS = {
    "code": {"warm_start_steps": True, "warm_start_lr": True, "warm_start_batch": True, "synth": True}
}


def demonstrations(
    pool: pd.DataFrame, rng: np.random.Generator, batch: int, tokenizer
) -> tuple[list[list[int]], list[list[float]]]:
    """Half coder, half tester demonstrations: (token ids, loss masks)."""
    rows = pool.iloc[rng.integers(0, len(pool), batch)]
    sequences, masks = [], []
    for i, row in enumerate(rows.itertuples()):
        if i % 2 == 0:
            prompt, target = row.prompt, row.solution
        else:
            test = row.tests[int(rng.integers(0, len(row.tests)))]
            prompt, target = tester_prompt(row.prompt), test[len(TESTER_CUE) :]
        head = tokenizer(prompt)["input_ids"]  # <bos> + prompt
        tail = tokenizer(target, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        sequences.append(head + tail)
        masks.append([0.0] * len(head) + [1.0] * len(tail))
    return sequences, masks


def code_warm_start(policy: Policy, train: pd.DataFrame, cfg: Config, source: str = "code-synth") -> BootstrapReport:
    """AdamW on the demonstrations for code.warm_start_steps (cosine to 10%).

    `train` is a code-problems frame (schemas/code.py). Without any problem of
    code.synth.warm_start_families in it (HumanEval, a user code file) nothing is demonstrated: the
    report's `note` says so, and so does a warning, because the tiny policy then starts untrained.
    """
    code, model, tok = cfg.code, policy.model, policy.tokenizer
    parameters = sum(p.numel() for p in model.parameters())
    pool = train[train["family"].isin(code.synth.warm_start_families)]
    if pool.empty:
        note = (
            f"no training problems of code.synth.warm_start_families {list(code.synth.warm_start_families)} in the "
            f"{source} train split: "
            "the tiny policy starts untrained; set policy.checkpoint to train a real model on these problems"
        )
        warnings.warn(note, stacklevel=2)
        return BootstrapReport(
            kind="code", steps=0, seconds=0.0, final_loss=None, parameters=parameters, demonstrations=0, note=note
        )
    rng = np.random.default_rng(cfg.seed)
    steps, loss_value, seconds = supervised_steps(
        model,
        lambda: demonstrations(pool, rng, code.warm_start_batch, tok),
        tok.pad_token_id,
        code.warm_start_lr,
        code.warm_start_steps,
    )
    final_loss = loss_value if steps else None
    return BootstrapReport(
        kind="code",
        steps=steps,
        seconds=seconds,
        final_loss=final_loss,
        parameters=parameters,
        demonstrations=steps * code.warm_start_batch,
    )


def code_warm_start_problems(policy: Policy, train: pd.DataFrame, cfg: Config) -> BootstrapReport:
    """The pipeline's code warm start: `train` is the train split as the problems table (JSON answers)."""
    return code_warm_start(
        policy, from_problems_frame(train, f"{cfg.problems.source} train split"), cfg, cfg.problems.source
    )
