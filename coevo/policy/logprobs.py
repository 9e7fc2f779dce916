"""Per-token log-probabilities of completions under a causal LM (the trainer's side).

Sequences are prompt + completion, right-padded; logits at position t score token t+1. The result is
aligned with the completion: column j is the logprob of completion token j.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor
from transformers import PreTrainedModel


@dataclass
class PackedBatch:
    input_ids: Tensor  # [B, L] prompt + completion, right-padded
    attention_mask: Tensor  # [B, L]
    completion_index: Tensor  # [B, T] positions in input_ids of each completion token (0 where padded)
    completion_mask: Tensor  # [B, T] 1.0 on real completion tokens


def pack(prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> PackedBatch:
    batch, length = len(prompts), max(len(p) + len(c) for p, c in zip(prompts, completions))
    width = max(1, max(len(c) for c in completions))
    input_ids = torch.full((batch, length), pad_id, dtype=torch.long)  # [B, L]
    attention = torch.zeros((batch, length), dtype=torch.long)  # [B, L]
    index = torch.zeros((batch, width), dtype=torch.long)  # [B, T]
    mask = torch.zeros((batch, width))  # [B, T]
    for row, (prompt, completion) in enumerate(zip(prompts, completions)):
        seq = list(prompt) + list(completion)
        input_ids[row, : len(seq)] = torch.tensor(seq)
        attention[row, : len(seq)] = 1
        index[row, : len(completion)] = torch.arange(len(prompt), len(seq))
        mask[row, : len(completion)] = 1.0
    return PackedBatch(input_ids.to(device), attention.to(device), index.to(device), mask.to(device))


def completion_distributions(model: PreTrainedModel, batch: PackedBatch, temperature: float = 1.0) -> Tensor:
    """Log-probabilities over the vocabulary [B, T, V] at each completion position (the distribution
    each completion token was drawn from; rows of padding are whatever the first position predicts)."""
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits  # [B, L, V]
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    predictor = (batch.completion_index - 1).clamp(min=0)  # [B, T] position whose logits score the token
    picked = logits.gather(1, predictor.unsqueeze(-1).expand(-1, -1, logits.size(-1)))  # [B, T, V]
    return torch.log_softmax(picked.float(), dim=-1)  # [B, T, V]


def sampled_logprobs(distributions: Tensor, batch: PackedBatch) -> Tensor:
    """Logprobs [B, T] of the completion tokens under `distributions` [B, T, V] (0 on padding)."""
    targets = batch.input_ids.gather(1, batch.completion_index)  # [B, T]
    return distributions.gather(-1, targets.unsqueeze(-1)).squeeze(-1) * batch.completion_mask  # [B, T]


def completion_logprobs(model: PreTrainedModel, batch: PackedBatch, temperature: float = 1.0) -> Tensor:
    """Logprobs [B, T] of each completion token given everything before it (0 on padding)."""
    return sampled_logprobs(completion_distributions(model, batch, temperature), batch)
