"""Supervised warm start of the tiny policy on both roles of the synthetic code family.

The coder sees `prompt -> solution<eos>` (e.g. `#f(1)=4 f(2)=5 f(6)=9\\ndef f(x): return ` -> `x+3`),
the tester `spec + "assert f(" -> "<x>)==<f(x)><eos>"` for a hidden input. Demonstrations come from
`code.synth.warm_start_families` only, so RL meets the other families with rewards alone (as the
arithmetic bootstrap does). It reuses the arithmetic bootstrap's model builder and masked NLL;
the loss covers the completion and <eos>, never the prompt.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from coevo.code.problems import TESTER_CUE, tester_prompt
from coevo.config import Config
from coevo.policy.bootstrap import supervised_steps
from coevo.policy.checkpoint import Policy


def demonstrations(pool: pd.DataFrame, rng: np.random.Generator, batch: int, tokenizer) -> tuple[list[list[int]], list[list[float]]]:
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


def code_warm_start(policy: Policy, train: pd.DataFrame, cfg: Config) -> dict:
    """AdamW on the demonstrations for code.warm_start_steps (cosine to 10%); returns a small report."""
    code, model, tok = cfg.code, policy.model, policy.tokenizer
    pool = train[train["family"].isin(code.synth.warm_start_families)]
    if pool.empty or code.warm_start_steps == 0:
        return {"steps": 0, "final_loss": None, "seconds": 0.0}
    rng = np.random.default_rng(cfg.seed)
    steps, loss_value, seconds = supervised_steps(
        model, lambda: demonstrations(pool, rng, code.warm_start_batch, tok), tok.pad_token_id, code.warm_start_lr, code.warm_start_steps
    )
    return {"steps": steps, "final_loss": loss_value, "seconds": seconds}
