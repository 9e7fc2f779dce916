"""Per-token log-probabilities of completions under a causal LM (the trainer's side).

A batch is prompts + completions. Rows that share a prompt (a group's samples) share one forward
pass over it: the distinct prompts are run once, left-padded, and their KV cache is expanded to the
rows, which then run their completion tokens only (`shared_prefill`, which the HF engine's decode
loop uses too). With short completions most tokens are prompt tokens, so this is most of the cost
of a pass, with or without grad. The LM head runs only where a logit is used: on the prompts' last
position (`logits_to_keep=1`) and the completion positions. The result is aligned with the completion: column j is the
logprob of completion token j, scored by the logits of the position before it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor
from transformers import PreTrainedModel


@dataclass
class PackedBatch:
    prompt_ids: Tensor  # [U, P] the distinct prompts, left-padded
    prompt_mask: Tensor  # [U, P] 1 on real prompt tokens
    prompt_of: Tensor  # [B] which distinct prompt each row continues
    completion_ids: Tensor  # [B, T] right-padded
    completion_mask: Tensor  # [B, T] 1.0 on real completion tokens (attended)
    loss_mask: Tensor  # [B, T] 1.0 on the policy's tokens: the completion's, less an episode's tool turns


def pack_prompts(
    prompts: Sequence[Sequence[int]], pad_id: int, device: torch.device, share: bool = True
) -> tuple[Tensor, Tensor, Tensor]:
    """The distinct prompts left-padded, ids [U, P] and mask [U, P], and each row's index among them [B].
    `share=False`: every row keeps its own copy (U = B), the plain per-sequence pass."""
    index: dict[tuple[int, ...], int] = {}
    prompt_of = [index.setdefault(tuple(p) if share else (row, *p), len(index)) for row, p in enumerate(prompts)]
    distinct = [key if share else key[1:] for key in index]
    width = max(len(p) for p in distinct)
    ids = torch.full((len(distinct), width), pad_id, dtype=torch.long)  # [U, P]
    mask = torch.zeros((len(distinct), width), dtype=torch.long)  # [U, P]
    for row, prompt in enumerate(distinct):
        ids[row, width - len(prompt) :] = torch.tensor(prompt)
        mask[row, width - len(prompt) :] = 1
    return ids.to(device), mask.to(device), torch.tensor(prompt_of, device=device)


def pack(
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    pad_id: int,
    device: torch.device,
    share: bool = True,
    policy_masks: Sequence[Sequence[int]] | None = None,
) -> PackedBatch:
    """Rows of prompt + completion; `share`: rows with the same prompt share one prefill (see module doc).
    `policy_masks`: per row, 1 on the policy's tokens and 0 on an episode's tool turns, which are
    attended but never trained (an empty mask: every token is the policy's)."""
    prompt_ids, prompt_mask, prompt_of = pack_prompts(prompts, pad_id, device, share)
    width = max(1, max(len(c) for c in completions))
    completion_ids = torch.full((len(completions), width), pad_id, dtype=torch.long)  # [B, T]
    completion_mask = torch.zeros((len(completions), width))  # [B, T]
    for row, completion in enumerate(completions):
        completion_ids[row, : len(completion)] = torch.tensor(list(completion), dtype=torch.long)
        completion_mask[row, : len(completion)] = 1.0
    loss_mask = completion_mask.clone()  # [B, T]
    for row, mask in enumerate(policy_masks or []):
        if len(mask):
            loss_mask[row, : len(mask)] = torch.as_tensor(list(mask), dtype=torch.float32)
    return PackedBatch(
        prompt_ids, prompt_mask, prompt_of, completion_ids.to(device), completion_mask.to(device), loss_mask.to(device)
    )


def shared_prefill(
    model: PreTrainedModel, prompt_ids: Tensor, prompt_mask: Tensor, prompt_of: Tensor
) -> tuple[Tensor, object, Tensor, Tensor]:
    """One forward pass over the distinct prompts [U, P], expanded to the B rows: each row's
    next-token logits [B, V], the KV cache (B rows), the attention mask [B, P] and each row's last
    position [B, 1]. Differentiable when grad is on: the rows' gradients reach the shared pass."""
    positions = (prompt_mask.cumsum(-1) - 1).clamp(min=0)  # [U, P]
    # The LM head runs on the last prompt position only, not on all P of them. An index tensor (not
    # logits_to_keep=1, a strided view) gathers a contiguous [U, 1, H]: with a strided input the CPU
    # matmul's result depends on the weights' memory alignment (weights read from safetensors are
    # not 64-byte aligned), which would break bit-identical resume.
    last = torch.tensor([prompt_ids.size(1) - 1], device=prompt_ids.device)  # [1]
    out = model(
        input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=positions, use_cache=True, logits_to_keep=last
    )
    out.past_key_values.batch_select_indices(prompt_of)
    return out.logits[:, -1, :][prompt_of], out.past_key_values, prompt_mask[prompt_of], positions[prompt_of, -1:]


def completion_distributions(model: PreTrainedModel, batch: PackedBatch, temperature: float = 1.0) -> Tensor:
    """Log-probabilities over the vocabulary [B, T, V] at each completion position (the distribution
    each completion token was drawn from; rows of padding are whatever the model predicts there)."""
    first, cache, attention, last = shared_prefill(
        model, batch.prompt_ids, batch.prompt_mask, batch.prompt_of
    )  # [B, V], cache, [B, P], [B, 1]
    logits = first.unsqueeze(1)  # [B, 1, V] scores completion token 0
    steps = batch.completion_ids.size(1) - 1
    if steps:  # completion tokens 0 .. T-2 score tokens 1 .. T-1
        attention = torch.cat([attention, batch.completion_mask[:, :steps].long()], dim=-1)  # [B, P+T-1]
        positions = last + 1 + torch.arange(steps, device=last.device)  # [B, T-1]
        rest = model(
            input_ids=batch.completion_ids[:, :steps],
            attention_mask=attention,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
        ).logits
        logits = torch.cat([logits, rest], dim=1)  # [B, T, V]
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    return torch.log_softmax(logits.float(), dim=-1)  # [B, T, V]


def sampled_logprobs(distributions: Tensor, batch: PackedBatch) -> Tensor:
    """Logprobs [B, T] of the completion tokens under `distributions` [B, T, V] (0 on padding)."""
    return distributions.gather(-1, batch.completion_ids.unsqueeze(-1)).squeeze(-1) * batch.completion_mask  # [B, T]


def completion_logprobs(model: PreTrainedModel, batch: PackedBatch, temperature: float = 1.0) -> Tensor:
    """Logprobs [B, T] of each completion token given everything before it (0 on padding)."""
    return sampled_logprobs(completion_distributions(model, batch, temperature), batch)
