"""Bootstrap of the default policy: a tiny Llama model warm-started on easy demonstrations.

Which warm start runs depends on the kind of problems (`WARM_STARTS`, keyed by problems.source):
math sources get the arithmetic one below; code sources get the solver + tester demonstrations of the
synthetic code family (coevo/code/warm_start.py). HumanEval and user code files hold no synthetic
problems, so there the tiny policy starts untrained and the report says so: train a real
checkpoint (`policy.checkpoint`) on them instead. `check_targets` tries policy.lora's target modules
on the model a run will start from (this tiny one, or the skeleton of the user's checkpoint).

The arithmetic warm start sees demonstrations of `problems.bootstrap_families` only (the easy
families); RL later faces the full mix with the verifier alone, as in RLVR when no solutions exist. Each
demonstration is preceded, with probability `bootstrap.context_prob`, by worked examples of its own
family laid out exactly as skills are rendered (`coevo.rollout.prompting.render_prompt`), so the policy
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

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

from coevo.code.sources import CODE_SOURCES
from coevo.code.warm_start import CODE_WARM_START_SETTINGS, code_warm_start_problems
from coevo.config import Config
from coevo.io import hash_file
from coevo.model.checkpoint import (
    META,
    DamagedCheckpointError,
    Policy,
    linkable_weights,
    load_policy,
    read_meta,
    resolve_device,
    save_checkpoint,
)
from coevo.model.constraint_warm_start import constraint_warm_start
from coevo.model.import_model import IMPORT_RECORD, read_import_record
from coevo.model.lora import check_target_modules
from coevo.model.supervised import BootstrapReport, bootstrap_steps
from coevo.model.tokenizer import build_char_tokenizer
from coevo.model.tool_warm_start import tool_warm_start
from coevo.problems.arithmetic import FAMILIES
from coevo.problems.heldout import digests_of, seen_in
from coevo.registry import Registry
from schemas.problems import read_problems

SYMBOLS = {family: symbol for family, (symbol, _) in FAMILIES.items()}
TRAINED_ON = "trained_on"  # coevo.json: digests of the problems a warm start fine-tuned the checkpoint on


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


def check_targets(cfg: Config) -> None:
    """Fail before a run writes anything when policy.lora.target_modules misses the model: checked
    on the model's skeleton (meta device, no weights read) or the tiny default's."""
    if not cfg.policy.lora.rank:
        return
    if cfg.policy.checkpoint is None:
        model = build_tiny_policy(cfg).model
    else:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(
                AutoConfig.from_pretrained(cfg.policy.checkpoint, local_files_only=True)
            )
    check_target_modules(model, cfg.policy.lora.target_modules)


def demonstration_sequences(
    pool: pd.DataFrame, cfg: Config, rng: np.random.Generator, tokenizer
) -> tuple[list[list[int]], list[list[float]]]:
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
    lines = (
        rng.integers(1, boot.max_context + 1, boot.batch_size) if boot.max_context else np.zeros(boot.batch_size, int)
    )
    by_family = {family: group for family, group in pool.groupby("family")}
    operators = [SYMBOLS[family] for family in cfg.problems.families]
    final_rows = pool.iloc[rng.integers(0, len(pool), boot.batch_size)]
    sequences, masks = [], []
    for row, has_context, n_lines, recalled in zip(final_rows.itertuples(), with_context, lines, recall):
        family_pool = by_family[row.family]
        examples = [
            (e.prompt, e.answer, 1.0)
            for e in family_pool.iloc[rng.integers(0, len(family_pool), n_lines if has_context else 0)].itertuples()
        ]
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


def arithmetic_warm_start(policy: Policy, train: pd.DataFrame, cfg: Config) -> BootstrapReport:
    """Train on demonstrations of problems.bootstrap_families for bootstrap.steps, or
    bootstrap.time_budget_s if set and sooner (recorded as stopped_by="time_budget" with the steps
    done), or exactly bootstrap.replay_steps."""
    pool = train[train["family"].isin(cfg.problems.bootstrap_families)]
    if pool.empty:
        raise ValueError(f"no training problems in problems.bootstrap_families {cfg.problems.bootstrap_families}")
    rng = np.random.default_rng(cfg.seed)
    tok = policy.tokenizer

    def batches():
        return demonstration_sequences(pool, cfg, rng, tok)

    return bootstrap_steps("arithmetic", policy.model, batches, tok.pad_token_id, cfg.bootstrap)


@dataclass(frozen=True)
class WarmStart:
    """How the tiny policy is warm-started for a kind of problem source: the training function (on
    the train split as the problems table) and the settings it reads, as a pydantic `include` of
    Config. The settings' values are part of the bootstrap key (coevo/stages/prepare.py), so changing them
    re-bootstraps while a knob no warm start reads (code.sandbox, say) does not."""

    run: Callable[[Policy, pd.DataFrame, Config], BootstrapReport]
    settings: dict


WARM_STARTS = Registry("warm start for problems.source")
for _source in ("arithmetic", "file"):
    WARM_STARTS.add(_source, WarmStart(arithmetic_warm_start, {"bootstrap": True}))
for _source in CODE_SOURCES:
    WARM_STARTS.add(_source, WarmStart(code_warm_start_problems, CODE_WARM_START_SETTINGS))
WARM_STARTS.add("constraints", WarmStart(constraint_warm_start, {"bootstrap": True}))


def warm_start_for(cfg: Config) -> WarmStart | None:
    """The warm start of problems.source: arithmetic demonstrations for math sources, coder and
    tester demonstrations of the synthetic code family for code sources; None for a source with none
    (the guessing games: an episode's tool calls are not demonstrated), which needs a checkpoint."""
    return WARM_STARTS[cfg.problems.source] if cfg.problems.source in WARM_STARTS.names() else None


def bootstrap_policy(cfg: Config, train: pd.DataFrame, extra_meta: dict | None = None) -> tuple[Policy, dict]:
    """Create checkpoint 0 (cfg.bootstrap_dir): the user's checkpoint if params name one (its weights
    file copied, cloned copy-on-write where the filesystem can, when it holds the model exactly as
    loaded: coevo/model/checkpoint.py; an imported one first checked against its import record), else
    the tiny default warm-started as problems.source calls for (`warm_start_for`).

    `extra_meta` (e.g. the lineage record) is stored in the checkpoint's coevo.json, and so is
    `trained_on` (`TRAINED_ON`): the digests of the problems any warm start fine-tuned it on, the
    source checkpoint's included, which a run starting from it is checked against (`check_unseen_by_start`).
    """
    reused, trained_on = None, set()
    if cfg.policy.checkpoint is not None:
        check_source(cfg.policy.checkpoint)
        policy = load_policy(cfg.policy.checkpoint, cfg.policy.device, cfg.policy.dtype)
        meta = {"iteration": 0, "source": str(cfg.policy.checkpoint), "parent": None}
        reused = linkable_weights(cfg.policy.checkpoint, policy.model)  # copied as is when it is the model
        trained_on |= set(read_meta(cfg.policy.checkpoint).get(TRAINED_ON, []))
    else:
        if (warm_start := warm_start_for(cfg)) is None:
            raise ValueError(
                f"problems.source={cfg.problems.source}: the tiny policy has no warm start for it; set "
                f"policy.checkpoint to a model of your own"
            )
        policy = build_tiny_policy(cfg)
        report = warm_start.run(policy, train, cfg)
        meta = {"iteration": 0, "source": "tiny-bootstrap", "parent": None, "bootstrap": asdict(report)}
    if cfg.bootstrap.tool_calls.steps:
        meta["tool_warm_start"] = asdict(tool_warm_start(policy, train, cfg))
        reused = None  # fine-tuned: no longer the user's weights
    if cfg.policy.checkpoint is None or cfg.bootstrap.tool_calls.steps:  # a warm start fine-tuned it on `train`
        trained_on |= set(digests_of(train))
    if trained_on:
        meta[TRAINED_ON] = sorted(trained_on)
    meta.update(extra_meta or {})
    version = save_checkpoint(cfg.bootstrap_dir, policy, meta, weights_from=reused)
    policy.path = cfg.bootstrap_dir
    return policy, {**meta, "weights_sha256": version}


def check_unseen_by_start(cfg: Config, held: dict[str, Path]) -> None:
    """Refuse held-out splits (`held`: name -> problems split file) holding a problem `policy.checkpoint`
    was fine-tuned on by a warm start (its coevo.json's `trained_on`): a checkpoint warm-started on
    one seed's training split, started from by a run of another seed, would be tested on what it
    learned. A checkpoint without that record (every imported model) reads no split."""
    trained_on = read_meta(cfg.policy.checkpoint).get(TRAINED_ON) if cfg.policy.checkpoint is not None else None
    if not trained_on:
        return
    for name, path in held.items():
        hits = seen_in(trained_on, read_problems(path))
        if len(hits):
            shown = ", ".join(f"{h.id} {str(h.prompt).strip()[:40]!r}" for h in hits.head(3).itertuples())
            raise ValueError(
                f"policy.checkpoint {cfg.policy.checkpoint}: a warm start fine-tuned it on {len(hits)} of this run's "
                f"{name} problems ({shown}; {META} lists them as `{TRAINED_ON}`); held-out splits must be unseen: "
                "warm-start in the run itself (bootstrap.tool_calls, from a checkpoint no warm start trained) or "
                "on problems no held-out split of the run holds"
            )


def check_source(source: str | Path) -> None:
    """A user checkpoint `coevo import-model` wrote must still hold the files its import.json lists
    (DamagedCheckpointError naming them otherwise: a damaged model is never copied into a run)."""
    record = read_import_record(source)
    if not record or not isinstance(record.get("files"), dict):
        return
    damaged = [
        name
        for name, sha in sorted(record["files"].items())
        if not (Path(source) / name).is_file() or hash_file(Path(source) / name) != sha
    ]
    if damaged:
        raise DamagedCheckpointError(source, damaged, f"not bootstrapping from it (its {IMPORT_RECORD} lists them)")
