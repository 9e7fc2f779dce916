"""The supervised loop every warm start of the tiny policy shares: masked NLL, AdamW, cosine decay.

The arithmetic bootstrap (coevo/model/bootstrap.py) and the code warm start
(coevo/code/warm_start.py) differ only in the demonstrations they build; both train through
`supervised_steps` and describe what they did with a `BootstrapReport`. It lives apart from
bootstrap.py because bootstrap.py dispatches to the code warm start, which needs this loop.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from coevo import progress
from coevo.config import BootstrapConfig


@dataclass
class BootstrapReport:
    """What a warm start did: the "bootstrap" entry of checkpoint 0's coevo.json."""

    kind: str  # which warm start ran: "arithmetic" or "code" (the registry in coevo/model/bootstrap.py)
    steps: int
    seconds: float
    final_loss: float | None  # None when no step ran
    parameters: int
    demonstrations: int
    note: str = ""  # why nothing was demonstrated, when nothing was
    # "steps" (all steps done), "replay_steps" or "time_budget" (load-dependent: replay with
    # bootstrap.replay_steps=steps)
    stopped_by: str = "steps"


def sequence_nll(model, sequences: list[list[int]], masks: list[list[float]], pad_id: int) -> torch.Tensor:
    """Mean negative log-likelihood of the masked tokens of right-padded sequences. Attention covers
    each sequence's own length, so a pad token inside one (SmolLM2 pads with its end-of-turn token,
    which every turn of an episode ends with) is attended like any other."""
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)  # [B, L]
    weights = torch.zeros((len(sequences), width))  # [B, L]
    attention = torch.zeros((len(sequences), width), dtype=torch.long)  # [B, L]
    for row, (seq, mask) in enumerate(zip(sequences, masks)):
        ids[row, : len(seq)] = torch.tensor(seq)
        weights[row, : len(seq)] = torch.tensor(mask)
        attention[row, : len(seq)] = 1
    ids, weights, attention = ids.to(model.device), weights.to(model.device), attention.to(model.device)
    logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1]  # [B, L-1, V]
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2).float(), ids[:, 1:], reduction="none")  # [B, L-1]
    return (nll * weights[:, 1:]).sum() / weights[:, 1:].sum()


def supervised_steps(
    model,
    batches: Callable[[], tuple[list[list[int]], list[list[float]]]],
    pad_id: int,
    lr: float,
    steps: int,
    warmup: int = 1,
    time_budget_s: float | None = None,
    stop_after: int | None = None,
) -> tuple[int, float, float]:
    """AdamW (weight decay 0.01, gradient norm clipped at 1) on the masked NLL of `batches()` for
    `steps` steps or `time_budget_s` seconds (None: no cap), whichever ends first, or exactly
    `stop_after` steps (a replay of a time-budgeted run: the schedule stays over `steps`); the
    learning rate warms up linearly over `warmup` steps and decays by cosine to 10%. Returns
    (steps taken, last loss, seconds); zero steps leave the model untouched (loss NaN)."""
    budget = math.inf if time_budget_s is None else time_budget_s
    last = steps if stop_after is None else min(steps, stop_after)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: (
            min(1.0, (s + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(s / max(steps, 1), 1.0))))
        ),
    )
    model.train()
    start, step, loss_value = time.perf_counter(), 0, float("nan")
    while step < last and (stop_after is not None or time.perf_counter() - start < budget):
        sequences, masks = batches()
        loss = sequence_nll(model, sequences, masks, pad_id)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        step, loss_value = step + 1, loss.item()
        progress.update("warm-start steps", step, last, loss=loss_value)
    model.eval()
    return step, loss_value, time.perf_counter() - start


Batches = Callable[[], tuple[list[list[int]], list[list[float]]]]  # a step's (token ids, loss masks)


def bootstrap_steps(kind: str, model, batches: Batches, pad_id: int, boot: BootstrapConfig) -> BootstrapReport:
    """A math warm start: `boot.steps` supervised steps on `batches()` (warm-up over a twentieth of
    them), or `boot.time_budget_s` if set and sooner (recorded as stopped_by="time_budget" with the
    steps done), or exactly `boot.replay_steps`; its report for checkpoint 0's coevo.json."""
    step, loss_value, seconds = supervised_steps(
        model,
        batches,
        pad_id,
        boot.lr,
        boot.steps,
        max(1, boot.steps // 20),
        boot.time_budget_s,
        boot.replay_steps,
    )
    stopped_by = "steps" if step >= boot.steps else ("replay_steps" if boot.replay_steps is not None else "time_budget")
    return BootstrapReport(
        kind=kind,
        steps=step,
        seconds=seconds,
        final_loss=loss_value,
        parameters=sum(p.numel() for p in model.parameters()),
        demonstrations=step * boot.batch_size,
        stopped_by=stopped_by,
    )
