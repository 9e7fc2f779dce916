"""Bootstrap of the default policy: a tiny Llama model warm-started on easy demonstrations.

The warm start sees demonstrations of `problems.bootstrap_families` only (the easy families); RL
later faces the full mix with the verifier alone, as in RLVR when no solutions exist. Each
demonstration is preceded, with probability `bootstrap.context_prob`, by worked examples of its own
family laid out exactly as skills are rendered (`coevo.prompting.render_prompt`), so the policy
learns to read skill context before any skill exists. With probability `bootstrap.recall_prob` a
demonstration is a recall exercise instead: a question "a?b=" with the operator of any family in the
RL mix, whose answer is a random number (new in every sequence, so it cannot be memorised, and no
arithmetic fact is taught) and whose worked example stands among the context lines, unscored. The
only way to predict it is to find the question in the context and copy its answer, so the policy
learns to use a relevant line of context: what a self-teacher needs to be better informed than its
student when it sees the reference answer or a memory entry of the question. The loss covers the
answers and <eos> only.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from coevo.config import Config
from coevo.policy.checkpoint import Policy, load_policy, resolve_device, save_checkpoint
from coevo.policy.tokenizer import build_char_tokenizer
from coevo.problems.arithmetic import FAMILIES

SYMBOLS = {family: symbol for family, (symbol, _) in FAMILIES.items()}


@dataclass
class BootstrapReport:
    steps: int
    seconds: float
    final_loss: float
    parameters: int
    demonstrations: int


def build_tiny_policy(cfg: Config) -> Policy:
    """A randomly initialised tiny Llama model with the character tokenizer, seeded by cfg.seed."""
    tokenizer = build_char_tokenizer()
    shape = cfg.policy.shape
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads,
        num_key_value_heads=shape.num_heads,
        max_position_embeddings=shape.max_position,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(cfg.seed)
    model = LlamaForCausalLM(config).to(resolve_device(cfg.policy.device))
    return Policy(model=model, tokenizer=tokenizer)


def demonstration_sequences(pool: pd.DataFrame, cfg: Config, rng: np.random.Generator, tokenizer) -> tuple[list[list[int]], list[list[float]]]:
    """Token ids and loss masks of a batch of demonstrations.

    A sequence is <bos>, then 0..max_context worked examples of the same family ("q=a\n", laid out
    as render_prompt lays out skills), then the demonstrated problem "q=a<eos>". A recall exercise
    demonstrates a lookup "a?b=r" (an operator of the mix, random r) whose worked example takes a
    random place among the context lines. The loss covers every answer's digits (context answers
    included: they are demonstrations too, except the looked-up one) and the final <eos>, never a
    question or a line break, so the model learns to stop after its answer.
    """
    boot = cfg.bootstrap
    with_context = rng.random(boot.batch_size) < boot.context_prob
    recall = rng.random(boot.batch_size) < boot.recall_prob
    lines = rng.integers(1, boot.max_context + 1, boot.batch_size) if boot.max_context else np.zeros(boot.batch_size, int)
    by_family = {family: group for family, group in pool.groupby("family")}
    operators = [SYMBOLS[family] for family in cfg.problems.families]
    final_rows = pool.iloc[rng.integers(0, len(pool), boot.batch_size)]
    sequences, masks = [], []
    for row, has_context, n_lines, recalled in zip(final_rows.itertuples(), with_context, lines, recall):
        family_pool = by_family[row.family]
        examples = [(e.prompt, e.answer, 1.0) for e in family_pool.iloc[rng.integers(0, len(family_pool), n_lines if has_context else 0)].itertuples()]
        prompt, answer = row.prompt, row.answer
        if recalled:
            a, b, r = rng.integers(0, 10, 2).tolist() + [int(rng.integers(0, 100))]
            prompt, answer = f"{a}{operators[int(rng.integers(0, len(operators)))]}{b}=", str(r)
            examples.insert(int(rng.integers(0, len(examples) + 1)), (prompt, answer, 0.0))
        ids, mask = [tokenizer.bos_token_id], [0.0]
        for line_question, line_answer, scored in examples:
            for text, weight in ((line_question, 0.0), (line_answer, scored), ("\n", 0.0)):
                piece = tokenizer(text, add_special_tokens=False)["input_ids"]
                ids, mask = ids + piece, mask + [weight] * len(piece)
        question = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        answer_ids = tokenizer(answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        sequences.append(ids + question + answer_ids)
        masks.append(mask + [0.0] * len(question) + [1.0] * len(answer_ids))
    return sequences, masks


def sequence_nll(model, sequences: list[list[int]], masks: list[list[float]], pad_id: int) -> torch.Tensor:
    """Mean negative log-likelihood of the masked tokens of right-padded sequences."""
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)  # [B, L]
    weights = torch.zeros((len(sequences), width))  # [B, L]
    for row, (seq, mask) in enumerate(zip(sequences, masks)):
        ids[row, : len(seq)] = torch.tensor(seq)
        weights[row, : len(seq)] = torch.tensor(mask)
    ids, weights = ids.to(model.device), weights.to(model.device)
    logits = model(input_ids=ids, attention_mask=(ids != pad_id).long()).logits[:, :-1]  # [B, L-1, V]
    nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2).float(), ids[:, 1:], reduction="none")  # [B, L-1]
    return (nll * weights[:, 1:]).sum() / weights[:, 1:].sum()


def supervised_steps(
    model, batches: Callable[[], tuple[list[list[int]], list[list[float]]]], pad_id: int, lr: float, steps: int, warmup: int = 1, time_budget_s: float = math.inf
) -> tuple[int, float, float]:
    """AdamW (weight decay 0.01, gradient norm clipped at 1) on the masked NLL of `batches()` for
    `steps` steps or `time_budget_s` seconds, whichever ends first; the learning rate warms up
    linearly over `warmup` steps and decays by cosine to 10%. Returns (steps taken, last loss, seconds)."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(s / steps, 1.0))))
    )
    model.train()
    start, step, loss_value = time.perf_counter(), 0, float("nan")
    while step < steps and time.perf_counter() - start < time_budget_s:
        sequences, masks = batches()
        loss = sequence_nll(model, sequences, masks, pad_id)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        step, loss_value = step + 1, loss.item()
    model.eval()
    return step, loss_value, time.perf_counter() - start


def supervised_warm_start(policy: Policy, pool: pd.DataFrame, cfg: Config) -> BootstrapReport:
    """Train on demonstrations for bootstrap.steps or bootstrap.time_budget_s, whichever ends first."""
    boot, tok, model = cfg.bootstrap, policy.tokenizer, policy.model
    rng = np.random.default_rng(cfg.seed)
    step, loss_value, seconds = supervised_steps(
        model, lambda: demonstration_sequences(pool, cfg, rng, tok), tok.pad_token_id, boot.lr, boot.steps, max(1, boot.steps // 20), boot.time_budget_s
    )
    return BootstrapReport(
        steps=step,
        seconds=seconds,
        final_loss=loss_value,
        parameters=sum(p.numel() for p in model.parameters()),
        demonstrations=step * boot.batch_size,
    )


def bootstrap_policy(cfg: Config, train: pd.DataFrame, extra_meta: dict | None = None) -> tuple[Policy, dict]:
    """Create checkpoint 0 (cfg.bootstrap_dir): the user's checkpoint if params name one, else the tiny default.

    `extra_meta` (e.g. the lineage record) is stored in the checkpoint's coevo.json.
    """
    if cfg.policy.checkpoint is not None:
        policy = load_policy(cfg.policy.checkpoint, cfg.policy.device, cfg.policy.dtype)
        meta = {"iteration": 0, "source": str(cfg.policy.checkpoint), "parent": None}
    else:
        pool = train[train["family"].isin(cfg.problems.bootstrap_families)]
        if pool.empty:
            raise ValueError(f"no training problems in bootstrap_families {cfg.problems.bootstrap_families}")
        policy = build_tiny_policy(cfg)
        report = supervised_warm_start(policy, pool, cfg)
        meta = {"iteration": 0, "source": "tiny-bootstrap", "parent": None, "bootstrap": report.__dict__}
    meta.update(extra_meta or {})
    version = save_checkpoint(cfg.bootstrap_dir, policy, meta)
    policy.path = cfg.bootstrap_dir
    return policy, {**meta, "weights_sha256": version}
