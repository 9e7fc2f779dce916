"""Shared-prefix training: which rows a minibatch holds, and the self-teacher pass only where it differs.

Method: Prefix Grouper (Liu et al. 2025, "Prefix Grouper: efficient GRPO training through shared-
prefix forward", arXiv 2506.05433). The G completions of one prompt attend to the same prompt keys
and values, so the prompt is encoded once and every completion's queries attend to [prompt K/V; own
K/V]. Forward outputs equal the per-sequence pass, and so do gradients: the prompt's activations
receive the sum of the G completions' gradients, which is what G separate copies would receive.

How coevo does it (`policy.shared_prefix`):
- the pass itself is `coevo/update/logprobs.py`: the distinct prompts of a batch run once
  (left-padded), their KV cache is index-expanded to the rows (a differentiable gather), and the rows
  run their completion tokens against it. `pack(..., share=False)` gives every row its own prompt;
  that is the per-sequence pass (`shared_prefix: none`).
- which rows share one pass is set here: `minibatch` (the default) permutes rows, so a group's rows
  are spread over the minibatches and its prompt runs once in each minibatch holding some of them;
  `group` permutes whole groups, so a group's prompt runs once per pass (once per optimizer step of
  the minibatch holding the group; a group straddling two minibatches runs in both).
- the self-teacher (`teacher_view`): a row whose teacher prompt equals its student prompt (the
  teacher context is empty, e.g. PMD while the memory holds nothing for the problem) reuses the
  student pass's detached distribution; only the other rows run the teacher's forward pass, and
  those share their teacher prompts (a problem's memory context is the same for its G rows) the same way.

Departures and choices.
1. The paper builds one packed row [prompt; c_1; ...; c_G] with a grouped attention mask; coevo
   expands the prompt's KV cache instead. Both compute the same attention; the cache route needs no
   4D mask (which the model's attention implementation would have to honour) and is the one the HF
   engine's decoding already uses.
2. `group` changes which rows share a minibatch (not the objective); it is a setting, not the
   default, because it changes the optimizer's path relative to runs recorded with `minibatch`.
3. Teacher top-k / sampled-token log-probs are not used: opsd and sdar read the exact divergence over
   the whole vocabulary (a top-k teacher would make it a biased truncation), and rlsd, which reads only
   the sampled tokens' teacher log-probs, still needs the teacher's full logits for their normaliser;
   a sampled-token teacher would save memory ([B, T] instead of [B, T, V]), not the forward pass.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from transformers import PreTrainedModel

from coevo.update.logprobs import PackedBatch, completion_distributions, pack, sampled_logprobs


def shares(mode: str) -> bool:
    """Whether rows with equal prompts share one prefill under `policy.shared_prefix` = `mode`."""
    if mode not in ("none", "minibatch", "group"):
        raise ValueError(f"policy.shared_prefix: unknown {mode!r}; known: none, minibatch, group")
    return mode != "none"


def epoch_minibatches(rows: int, group_size: int, size: int, mode: str, generator: torch.Generator) -> list[list[int]]:
    """One pass's minibatches of training-row indices. Rows come in groups of `group_size`
    consecutive indices (coevo/update/stage.py builds them so); `group` permutes whole groups, the
    others permute rows (the draw the update always made)."""
    shares(mode)
    if mode == "group":
        if rows % group_size:
            raise ValueError(f"policy.shared_prefix: group needs whole groups of {group_size} rows, got {rows} rows")
        groups = torch.randperm(rows // group_size, generator=generator).tolist()
        order = [g * group_size + j for g in groups for j in range(group_size)]
    else:
        order = torch.randperm(rows, generator=generator).tolist()
    return [order[start : start + size] for start in range(0, len(order), size)]


def rank_rows(idx: list[int], rank: int, world: int, mode: str) -> list[int]:
    """A distributed update's share of minibatch `idx` for `rank`: strided (rows spread over the
    ranks), or with `group` contiguous, so a rank holds whole groups and encodes their prompts once."""
    if mode != "group":
        return idx[rank::world]
    per = -(-len(idx) // world)  # ceil
    return idx[rank * per : (rank + 1) * per]


@torch.no_grad()
def teacher_pass(
    model: PreTrainedModel,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    pad_id: int,
    temperature: float,
    share: bool,
) -> Tensor:
    """The self-teacher's log-distributions [b, T', V] over the given rows, without grad."""
    packed = pack(prompts, completions, pad_id, model.device, share)
    return completion_distributions(model, packed, temperature)  # [b, T', V]


def teacher_view(
    model: PreTrainedModel,
    teacher_prompts: Sequence[Sequence[int]],
    student_prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    student: Tensor,
    packed: PackedBatch,
    pad_id: int,
    temperature: float,
    share: bool,
) -> tuple[Tensor, Tensor, float]:
    """The teacher's log-distributions [b, T, V] and sampled-token logprobs [b, T] on the student's
    completions, and the share of rows that reused the student's. `student` [b, T, V] is the
    student pass's log-distributions of the same rows: a row whose teacher prompt is its student
    prompt takes them (detached); the other rows run one teacher pass together."""
    differ = [i for i, (t, s) in enumerate(zip(teacher_prompts, student_prompts)) if list(t) != list(s)]
    distributions = student.detach()  # [b, T, V]
    if differ:
        distributions = distributions.clone()  # [b, T, V]
        scored = teacher_pass(
            model, [teacher_prompts[i] for i in differ], [completions[i] for i in differ], pad_id, temperature, share
        )  # [d, T', V]
        rows = torch.tensor(differ, device=distributions.device)  # [d]
        distributions[rows, : scored.size(1)] = scored
    reused = 1.0 - len(differ) / max(1, len(teacher_prompts))
    return distributions, sampled_logprobs(distributions, packed), reused  # [b, T, V], [b, T]
