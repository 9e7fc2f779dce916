"""Train/inference mismatch: how far the engine's sampling logprobs are from the trainer's.

The engine (vLLM or the HF decode loop) and the trainer compute the same policy with different
kernels, batching and sometimes dtypes, so pi_sampler != pi_trainer even for identical weights
(Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy RL training"). The
objective corrects for it with truncated importance sampling (`objective.tis_cap`,
coevo/update/objectives/grpo.py); this module measures it, every iteration, before the update, from the
trainer logprobs the update's pi_old pass computes (coevo/update/stage.py: `old_logprobs`). An engine
that samples with the trainer's own model (HF) has no mismatch to measure, and none is reported.

Which tokens: every policy token (an episode's tool turns left out) of the rollouts whose prompt is
the bare question (no skill context). With a skill bank the trainer may train a row under another
prompt than it was sampled with (`coevolver.update_context = "strip"`), and that shift is intended,
not a mismatch; only rows sampled without context are scored under exactly the prompt the engine
saw. All groups are used, zero-variance ones included (they carry no advantage but measure the engine just as well).

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


def measured_rows(rollouts: pd.DataFrame, sampled_bare: set[str] | None = None) -> pd.DataFrame:
    """The rollouts whose tokens are measured: those sampled on the bare question (module docstring);
    `sampled_bare` names them by rollout id when prompts are rendered (prompt.format: chat), else
    they are the rows whose prompt is the question itself (plain)."""
    if sampled_bare is not None:
        return rollouts[rollouts["rollout_id"].isin(sampled_bare)]
    return rollouts[rollouts["prompt"] == rollouts["question"]]


def mismatch_of(
    trainer: list[Tensor], sampler: list[list[float]], policy_masks: list | None = None
) -> dict[str, float]:
    """Mismatch metrics of per-row trainer logprobs against the engine's (rows of any lengths), over
    the policy's tokens: `policy_masks` (per row, [] = all) leave out an episode's tool turns, which
    the engine never sampled."""
    if not trainer:
        return {"policy/mismatch_tokens": 0.0}
    width = max(1, max(len(row) for row in trainer))
    padded = {name: torch.zeros((len(trainer), width)) for name in ("trainer", "sampler", "mask")}  # [N, T] each
    for i, (ours, theirs) in enumerate(zip(trainer, sampler)):
        padded["trainer"][i, : len(ours)] = ours
        padded["sampler"][i, : len(theirs)] = torch.as_tensor(list(theirs), dtype=torch.float32)
        mask = policy_masks[i] if policy_masks is not None and len(policy_masks[i]) else [1.0] * len(ours)
        padded["mask"][i, : len(ours)] = torch.as_tensor(list(mask), dtype=torch.float32)
    return mismatch_stats(padded["trainer"], padded["sampler"], padded["mask"])
