"""Train/inference mismatch: how far the engine's sampling logprobs are from the trainer's.

The engine (vLLM or the HF decode loop) and the trainer compute the same policy with different
kernels, batching and sometimes dtypes, so pi_sampler != pi_trainer even for identical weights
(Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy RL training"). The
objective corrects for it with truncated importance sampling (`objective.tis_cap`,
coevo/objectives/grpo.py); this module measures it, every iteration, before the update.

Which tokens: every completion token of the rollouts whose prompt is the bare question (no skill
context). With a skill bank the trainer may train a row under another prompt than it was sampled
with (`coevolver.update_context = "strip"`), and that shift is intended, not a mismatch; only rows
sampled without context are scored under exactly the prompt the engine saw. All groups are used,
zero-variance ones included (they carry no advantage but measure the engine just as well).

Metrics (namespaced policy/):
- mismatch_abs_logprob: mean |log pi_trainer - log pi_sampler| over those tokens.
- mismatch_abs_logprob_max: the largest per-token difference.
- mismatch_kl: k3 estimate of KL(pi_sampler || pi_trainer) from tokens sampled by pi_sampler:
  mean(r - 1 - log r), r = pi_trainer / pi_sampler (Schulman's unbiased, non-negative estimator).
- mismatch_tokens: how many tokens were measured.
"""

from __future__ import annotations

import pandas as pd
import torch
from torch import Tensor
from transformers import PreTrainedModel

from coevo.policy.logprobs import completion_logprobs, pack


def mismatch_stats(trainer: Tensor, sampler: Tensor, mask: Tensor) -> dict[str, float]:
    """Mismatch metrics of per-token logprobs [N, T] over mask [N, T] (1.0 on real tokens)."""
    tokens = mask.sum()
    if float(tokens) == 0:
        return {"policy/mismatch_tokens": 0.0}
    log_ratio = (trainer - sampler) * mask  # [N, T] log(pi_trainer / pi_sampler)
    k3 = (log_ratio.exp() - 1 - log_ratio) * mask  # [N, T]
    return {
        "policy/mismatch_abs_logprob": float(log_ratio.abs().sum() / tokens),
        "policy/mismatch_abs_logprob_max": float(log_ratio.abs().max()),
        "policy/mismatch_kl": float(k3.sum() / tokens),
        "policy/mismatch_tokens": float(tokens),
    }


@torch.no_grad()
def measure_mismatch(model: PreTrainedModel, rollouts: pd.DataFrame, temperature: float, pad_id: int, chunk: int = 128) -> dict[str, float]:
    """Recompute, with the trainer's weights before the update, the logprobs of the tokens sampled on
    bare-question prompts and compare them with the engine's (see the module docstring)."""
    bare = rollouts[rollouts["prompt"] == rollouts["question"]]
    prompts, completions = list(bare["prompt_ids"]), list(bare["completion_ids"])
    sampled = list(bare["sampling_logprobs"])
    trainer_rows, sampler_rows, mask_rows = [], [], []
    for start in range(0, len(prompts), chunk):
        part = slice(start, start + chunk)
        packed = pack([list(p) for p in prompts[part]], [list(c) for c in completions[part]], pad_id, model.device)
        trainer = completion_logprobs(model, packed, temperature).float().cpu()  # [b, T]
        sampler = torch.zeros_like(trainer)  # [b, T]
        for row, logprobs in enumerate(sampled[part]):
            sampler[row, : len(logprobs)] = torch.as_tensor(list(logprobs), dtype=torch.float32)
        trainer_rows.append(trainer.reshape(-1))
        sampler_rows.append(sampler.reshape(-1))
        mask_rows.append(packed.completion_mask.cpu().reshape(-1))
    if not trainer_rows:
        return {"policy/mismatch_tokens": 0.0}
    return mismatch_stats(torch.cat(trainer_rows), torch.cat(sampler_rows), torch.cat(mask_rows))
