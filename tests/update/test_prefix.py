"""Shared-prefix training (coevo/update/prefix.py): per-token log-probs and gradients of the shared
pass equal the per-sequence pass for every objective family, with LoRA and full fine-tuning, on the
tiny policy and on a randomly initialised Llama with SmolLM2-135M's widths; the self-teacher's reuse
of the student pass equals a full teacher pass; resume stays bit-identical with whole-group minibatches.

Tolerance (float32): per-token log-probs within atol 2e-5; each parameter's gradient within
rtol 1e-3 and atol 1e-4 x its largest entry (`close_grads`): the shared pass sums the G completions'
prompt gradients in another order, and float32 rounding of sums over many tokens (the embedding's
rows) differs by ~1e-5 of the gradient's scale.
"""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from coevo.config import LoraSettings
from coevo.model.cache import forget_policies
from coevo.model.checkpoint import load_policy
from coevo.model.lora import apply_lora
from coevo.stages.in_force import in_force
from coevo.stages.update import update_stage
from coevo.update.logprobs import completion_distributions, completion_logprobs, pack
from coevo.update.objectives import build_objective
from coevo.update.prefix import epoch_minibatches, rank_rows, teacher_pass, teacher_view
from coevo.update.stage import TrainingSet, minibatch_loss
from schemas.rewards import write_rewards
from tests.conftest import first_iteration, tiny_config

GROUPS, G = 3, 4
FAMILIES = {  # objective overrides per family; every one reads the trainer's log-probs of completions
    "grpo": {"name": "grpo"},
    "grpo-kl": {"name": "grpo", "kl_coef": 0.1, "aggregation": "seq-mean-token-mean"},
    "opsd": {"name": "opsd", "teacher": {"sources": ["answer"]}},
    "sdar": {"name": "sdar", "teacher": {"sources": ["answer"]}},
    "rlsd": {"name": "rlsd", "teacher": {"sources": ["answer"]}},
    "ess": {"name": "ess"},
    "opsa": {"name": "opsa"},
}


def smollm2_shaped(layers: int = 2, vocab: int = 1024) -> LlamaForCausalLM:
    """SmolLM2-135M's widths (hidden 576, MLP 1536, 9 heads, 3 KV heads), randomly initialised, with
    2 of its 30 layers and a 1024-token vocabulary instead of 49152 so the test takes seconds."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=layers,
        num_attention_heads=9,
        num_key_value_heads=3,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        pad_token_id=0,
    )
    return LlamaForCausalLM(config).eval()


def training_set(vocab: int, seed: int = 0) -> tuple[TrainingSet, list[torch.Tensor], list[torch.Tensor]]:
    """GROUPS groups of G rows: prompts of unequal lengths (left padding in the shared pass), completions
    of 1-7 tokens, teacher prompts equal to the student's in the first group and longer elsewhere, and
    pi_old / reference log-probs near the trainer's."""
    g = torch.Generator().manual_seed(seed)
    tokens = lambda n: torch.randint(3, vocab, (n,), generator=g).tolist()  # noqa: E731
    prompts = [tokens(9 + 3 * k) for k in range(GROUPS)]
    contexts = [[], tokens(5), tokens(2)]  # group 0: empty privileged context (teacher prompt = student prompt)
    rows = GROUPS * G
    completions = [tokens(1 + (i * 5) % 7) for i in range(rows)]
    noise = lambda c: (-1.0 - torch.rand(len(c), generator=g)).tolist()  # noqa: E731
    data = TrainingSet(
        rollout_ids=[str(i) for i in range(rows)],
        prompts=[prompts[i // G] for i in range(rows)],
        completions=completions,
        sampling_logprobs=[noise(c) for c in completions],
        as_sampled=[True] * rows,
        advantages=torch.randn(rows, generator=g),  # [N]
        passed=torch.tensor([i % 2 == 0 for i in range(rows)]),  # [N]
        teacher_prompts=[contexts[i // G] + prompts[i // G] for i in range(rows)],
    )
    old = [torch.tensor(noise(c)) for c in completions]
    ref = [torch.tensor(noise(c)) for c in completions]
    return data, old, ref


def loss_and_grads(model, family: str, mode: str, tmp_path, data, old, ref) -> tuple[float, dict[str, torch.Tensor]]:
    cfg = tiny_config(tmp_path, objective=FAMILIES[family], policy={"shared_prefix": mode})
    objective = build_objective(cfg.objective)
    if not objective.needs_teacher:
        data = TrainingSet(**{**data.__dict__, "teacher_prompts": None})
    model.zero_grad(set_to_none=True)
    idx = list(range(len(data.prompts)))[::-1]  # an order that mixes groups
    loss, _, _ = minibatch_loss(
        model, model, objective, data, idx, old, ref if objective.needs_reference else None, cfg, 0
    )
    loss.backward()
    return float(loss.detach()), {
        n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad and p.grad is not None
    }


def lora(model):
    wrapped = apply_lora(model, LoraSettings(rank=4, alpha=8.0, target_modules="all-linear"), seed=0)
    with torch.no_grad():  # peft starts B at 0, which would leave A without gradient
        for name, p in wrapped.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.02, generator=torch.Generator().manual_seed(len(name)))
    return wrapped


@pytest.fixture(scope="module")
def tiny_model(tiny_policy_dir):
    return load_policy(tiny_policy_dir, "cpu").model


@pytest.mark.parametrize("adapter", ["full", "lora"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("shape", ["tiny", "smollm2"])
def test_shared_prefix_gradients_equal_the_per_sequence_pass(tmp_path, tiny_model, shape, family, adapter):
    model = smollm2_shaped() if shape == "smollm2" else load_policy_copy(tiny_model)
    model = lora(model) if adapter == "lora" else model
    data, old, ref = training_set(model.config.vocab_size)
    loss_shared, shared = loss_and_grads(model, family, "group", tmp_path, data, old, ref)
    loss_plain, plain = loss_and_grads(model, family, "none", tmp_path, data, old, ref)
    assert shared.keys() == plain.keys() and shared
    assert loss_shared == pytest.approx(loss_plain, rel=1e-5, abs=1e-6)
    assert any(float(g.abs().max()) > 0 for g in plain.values())
    close_grads(shared, plain)


@pytest.mark.parametrize("mode, prompts", [("group", GROUPS), ("minibatch", GROUPS), ("none", GROUPS * G)])
def test_sharing_modes_encode_each_groups_prompt_once_and_none_encodes_every_row(tmp_path, tiny_model, mode, prompts):
    """What the gradient test above cannot see (equal gradients are the point of sharing, so a mode
    that silently never shared would pass it): the update's prompt pass itself. The first forward of
    a minibatch's loss is the prefill of its distinct prompts: GROUPS of them when rows share, one
    per row (GROUPS * G) under `none`."""
    model = load_policy_copy(tiny_model)
    data, old, ref = training_set(model.config.vocab_size)
    batch_sizes: list[int] = []

    def record(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        batch_sizes.append(int(ids.size(0)))

    hook = model.register_forward_pre_hook(record, with_kwargs=True)
    try:
        loss_and_grads(model, "grpo", mode, tmp_path, data, old, ref)
    finally:
        hook.remove()
    assert batch_sizes[0] == prompts, f"{mode}: the prompt pass ran {batch_sizes[0]} rows"


def close_grads(got: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    for name, want in expected.items():
        scale = float(want.abs().max())
        torch.testing.assert_close(
            got[name], want, rtol=1e-3, atol=1e-4 * scale + 1e-12, msg=lambda m, n=name: f"{n}: {m}"
        )


def load_policy_copy(model):
    """A fresh copy of the tiny model (LoRA wraps in place)."""
    copy = type(model)(model.config).eval()
    copy.load_state_dict(model.state_dict())
    return copy


@pytest.mark.parametrize("shape", ["tiny", "smollm2"])
def test_shared_logprobs_equal_a_plain_forward_of_each_sequence(tiny_model, shape):
    """The reference that shares no machinery with the shared pass: model(prompt + completion), every
    logit, one sequence at a time; log-probs and the gradient of their sum w.r.t. every weight."""
    model = smollm2_shaped() if shape == "smollm2" else load_policy_copy(tiny_model)
    data, _, _ = training_set(model.config.vocab_size)
    packed = pack(data.prompts, data.completions, 0, model.device, share=True)
    assert packed.prompt_ids.size(0) == GROUPS  # each group's prompt encoded once
    model.zero_grad(set_to_none=True)
    shared = completion_logprobs(model, packed)  # [B, T]
    shared.sum().backward()
    shared_grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    total = 0.0
    for row, (p, c) in enumerate(zip(data.prompts, data.completions)):
        logits = model(torch.tensor([p + c])).logits[0, len(p) - 1 : -1]  # [C, V]
        plain = torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(c).unsqueeze(-1)).squeeze(-1)  # [C]
        torch.testing.assert_close(shared[row, : len(c)].detach(), plain.detach(), rtol=0, atol=2e-5)
        total = total + plain.sum()
    total.backward()
    close_grads(shared_grads, {n: p.grad for n, p in model.named_parameters()})


def test_teacher_reuse_equals_the_full_teacher_pass(tiny_model):
    model = load_policy_copy(tiny_model)
    data, _, _ = training_set(model.config.vocab_size)
    packed = pack(data.prompts, data.completions, 0, model.device)
    student = completion_distributions(model, packed)  # [B, T, V] with grad
    full = teacher_pass(model, data.teacher_prompts, data.completions, 0, 1.0, share=True)  # [B, T, V] every row scored
    teacher, logprobs, reused = teacher_view(
        model, data.teacher_prompts, data.prompts, data.completions, student, packed, 0, 1.0, share=True
    )
    assert reused == pytest.approx(1 / GROUPS)  # group 0's context is empty
    assert not teacher.requires_grad
    mask = packed.completion_mask.bool()  # [B, T]
    torch.testing.assert_close(teacher[mask], full[mask], rtol=0, atol=2e-5)
    torch.testing.assert_close(
        logprobs,
        full.gather(-1, packed.completion_ids.unsqueeze(-1)).squeeze(-1) * packed.completion_mask,
        rtol=0,
        atol=2e-5,
    )
    assert torch.equal(teacher[:G], student[:G].detach())  # the reused rows are the student's own numbers


def test_group_minibatches_hold_whole_groups_and_rank_shares_stay_contiguous():
    batches = epoch_minibatches(24, 4, 8, "group", torch.Generator().manual_seed(3))
    assert sorted(i for b in batches for i in b) == list(range(24))
    assert all({i // 4 for i in b} and len({i // 4 for i in b}) == 2 for b in batches)  # 8 rows = 2 whole groups
    rows = epoch_minibatches(24, 4, 8, "minibatch", torch.Generator().manual_seed(3))
    assert rows == [
        torch.randperm(24, generator=torch.Generator().manual_seed(3)).tolist()[k : k + 8] for k in (0, 8, 16)
    ]  # the old draw
    assert (
        rank_rows(batches[0], 0, 2, "group") == batches[0][:4]
        and rank_rows(batches[0], 1, 2, "group") == batches[0][4:]
    )
    assert rank_rows(rows[0], 1, 2, "minibatch") == rows[0][1::2]
    with pytest.raises(ValueError, match="policy.shared_prefix"):
        epoch_minibatches(10, 4, 8, "group", torch.Generator())


def test_resume_with_group_minibatches_is_bit_identical(tmp_path):
    cfg = tiny_config(tmp_path, policy={"shared_prefix": "group"}, optim={"minibatch_size": 8})
    data, boot, rollouts, frame = first_iteration(cfg)
    signal = cfg.run.out_dir / "signal.parquet"
    write_rewards(
        signal,
        frame.assign(reward=[float(i % 2) for i in range(len(frame))], passed=[i % 2 == 1 for i in range(len(frame))]),
    )

    def update(it, parent):
        now = in_force(cfg, it, data, choose=False)  # no version it-1 here: the params are in force
        return update_stage(cfg, now, str(parent), rollouts, str(signal), boot.coevolver.path, data)

    first = update(1, boot.checkpoint.path)
    second = update(2, first.path)  # uninterrupted: policy kept in memory
    assert second.metrics["policy/steps"] > 1 and second.sha256 != first.sha256
    forget_policies()  # a fresh process: weights, optimizer and RNG from checkpoint 1
    assert update(2, first.path).sha256 == second.sha256
