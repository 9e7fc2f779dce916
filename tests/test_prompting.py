"""Prompt rendering (coevo/rollout/prompting.py): plain and chat formats, context inside the conversation,
no double BOS, the missing-template error, and a tiny end-to-end run under the chat format."""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import pytest
import torch

from coevo.code.problems import generated_test
from coevo.config import PromptConfig
from coevo.model.tokenizer import build_char_tokenizer
from coevo.rollout.prompting import check_prompt_format, encode_prompts, prompt_renderer, render_prompt
from coevo.rollout.roles import posed
from coevo.stages.prepare import prepare_stage

from .conftest import tiny_config

# A chat template in the char vocabulary, written like real ones: BOS, role-tagged turns, generation prompt.
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def chat_tokenizer():
    tok = build_char_tokenizer()
    tok.chat_template = TEMPLATE
    return tok


def test_chat_puts_context_inside_the_user_turn_and_ends_with_the_generation_prompt():
    cfg = PromptConfig(format="chat", system="Be brief.", context_header="Examples:")
    tok = chat_tokenizer()
    text = prompt_renderer(cfg, tok, "tiny").render({"id": "p", "prompt": "3+4=", "family": "add"}, ["1+1=2", "2+2=4"])
    assert (
        text
        == "<bos><system>Be brief.\n<user>Examples:\n1+1=2\n2+2=4\n\n3+4=\n\nReply with the number only.\n<assistant>"
    )
    ids = prompt_renderer(cfg, tok).encode([text])[0]
    assert ids.count(tok.bos_token_id) == 1 and ids[0] == tok.bos_token_id  # the template's BOS only
    assert encode_prompts(tok, [text], True)[0][:2] == [tok.bos_token_id] * 2  # what adding special tokens would do


def test_chat_code_problem_puts_the_instruction_before_the_stub_and_a_conversation_keeps_its_turns():
    cfg = PromptConfig(format="chat", instruction={"math": None, "code": "Fix it."}, context_header=None)
    renderer = prompt_renderer(cfg, chat_tokenizer())
    assert (
        renderer.render({"prompt": "def f(x):\n", "family": "humaneval"})
        == "<bos><user>Fix it.\n\n```python\ndef f(x):\n```\n<assistant>"
    )
    messages = json.dumps(
        [
            {"role": "system", "content": "S"},
            {"role": "user", "content": "a?"},
            {"role": "assistant", "content": "b"},
            {"role": "user", "content": "c?"},
        ]
    )
    text = renderer.render({"prompt": "c?", "family": "math", "messages": messages}, ["ctx"])
    assert text == "<bos><system>S\n<user>a?\n<assistant>b\n<user>ctx\n\nc?\n<assistant>"


def test_the_tester_role_is_asked_with_its_own_instruction_and_its_test_read_from_the_reply():
    """In the chat format the tester's prompt carries prompt.instruction.tester before the spec; the
    test is the reply's first `assert f(` line, or the plain format's continuation after the cue."""
    cfg = PromptConfig(format="chat", instruction={"code": "Fix it.", "tester": "Test it."}, context_header=None)
    row = {"id": "code-add-00001", "prompt": "#f(0)=3 f(1)=4\ndef f(x): return ", "family": "code-add"}
    renderer = prompt_renderer(cfg, chat_tokenizer())
    assert (
        renderer.render(posed(row, "tester"))
        == "<bos><user>Test it.\n\n```python\n#f(0)=3 f(1)=4\nassert f(\n```\n<assistant>"
    )
    assert renderer.render(posed(row, "solver")).startswith("<bos><user>Fix it.")
    assert generated_test("```python\nassert f(2) == 5\nassert f(3) == 6\n```") == "assert f(2) == 5"
    assert generated_test("2)==5") == "assert f(2)==5"


def test_plain_is_the_tiny_layout_and_rejects_conversations():
    renderer = prompt_renderer(PromptConfig(), build_char_tokenizer())
    assert renderer.render({"prompt": "3+4="}, ["1+1=2"]) == render_prompt("3+4=", ["1+1=2"]) == "1+1=2\n3+4="
    assert renderer.encode(["3+4="])[0][0] == build_char_tokenizer().bos_token_id
    with pytest.raises(ValueError, match=r"problem 'q1'.*prompt.format: plain"):
        renderer.render({"id": "q1", "prompt": "x", "messages": '[{"role": "user", "content": "x"}]'})


def test_chat_without_a_template_names_the_setting_and_the_checkpoint(tmp_path, tiny_policy_dir):
    with pytest.raises(ValueError, match=r"prompt.format: chat.*tiny-ckpt"):
        prompt_renderer(PromptConfig(format="chat"), build_char_tokenizer(), "tiny-ckpt")
    cfg = tiny_config(tmp_path, prompt={"format": "chat"}, policy={"checkpoint": str(tiny_policy_dir)})
    with pytest.raises(ValueError, match=rf"prompt.format: chat.*{tiny_policy_dir}"):
        prepare_stage(cfg)
    assert not cfg.problems.data_dir.exists()  # nothing written
    with pytest.raises(ValueError, match=r"prompt.format: chat needs policy.checkpoint"):
        check_prompt_format(PromptConfig(format="chat"), None)


@contextlib.contextmanager
def trained_inputs():
    """Record the token ids every embedding layer reads while grad is on (the update's forward passes;
    generation and scoring run without grad). Yields `rows(pad_id)`: each recorded row as a tuple, its
    left padding dropped."""
    seen: list[torch.Tensor] = []

    def record(module, args):
        if isinstance(module, torch.nn.Embedding) and torch.is_grad_enabled():
            seen.append(args[0].detach().cpu())

    handle = torch.nn.modules.module.register_module_forward_pre_hook(record)

    def rows(pad_id: int) -> list[tuple[int, ...]]:
        out = []
        for ids in seen:
            for row in ids.reshape(-1, ids.size(-1)).tolist():  # [b, P] -> b rows
                start = next((i for i, t in enumerate(row) if t != pad_id), len(row))
                out.append(tuple(row[start:]))
        return out

    try:
        yield rows
    finally:
        handle.remove()


def templated_copy(src: Path, dst: Path) -> Path:
    """`src` with a chat template, standing for a user's chat model: the record of the problems the
    tiny policy's own warm start trained on (coevo.json `trained_on`) is not carried, as a model
    from elsewhere has none, so a run on other problems is not refused for overlapping them."""
    shutil.copytree(src, dst)
    config = json.loads((dst / "tokenizer_config.json").read_text())
    config["chat_template"] = TEMPLATE
    (dst / "tokenizer_config.json").write_text(json.dumps(config))
    meta = json.loads((dst / "coevo.json").read_text())
    meta.pop("trained_on", None)
    (dst / "coevo.json").write_text(json.dumps(meta))
    return dst


def test_tiny_run_under_chat_trains_on_the_exact_templated_tokens(tmp_path, tiny_policy_dir):
    from coevo.driver import train
    from coevo.model.checkpoint import load_policy
    from schemas.rollouts import read_rollouts

    checkpoint = templated_copy(tiny_policy_dir, tmp_path / "chat-ckpt")
    chat = {"format": "chat", "instruction": {"math": None}, "context_header": None}
    # every group trained (the tiny policy's groups are mostly all-fail), so the update has rows to read
    cfg = tiny_config(
        tmp_path, prompt=chat, policy={"checkpoint": str(checkpoint)}, objective={"drop_zero_variance": False}
    )
    with trained_inputs() as seen:  # what the trainer's forward passes with grad embed
        summary = train(cfg)
    assert summary["iterations"] == 2 and "eval/acc" in summary["final_eval"]
    rollouts = read_rollouts(cfg.run.out_dir / "rollouts" / "iter_0002.parquet")
    tok = load_policy(checkpoint, "cpu").tokenizer
    for row in rollouts.itertuples():
        assert row.prompt.startswith("<bos><user>") and row.prompt.endswith(f"{row.question}\n<assistant>")
        assert list(row.prompt_ids) == tok(row.prompt, add_special_tokens=False)["input_ids"]  # the engine's tokens
        assert list(row.prompt_ids).count(tok.bos_token_id) == 1
    # the update computes its log-probs on those very tokens: each row the trainer embedded with grad
    # begins (left padding dropped) with a question templated as above, skills stripped (the student
    # trains without them: update_context strip), and every question sampled is trained on
    questions = {
        q for it in (1, 2) for q in read_rollouts(cfg.run.out_dir / "rollouts" / f"iter_{it:04d}.parquet")["question"]
    }
    templated = {tuple(tok(f"<bos><user>{q}\n<assistant>", add_special_tokens=False)["input_ids"]) for q in questions}
    rows = [
        row for row in seen(tok.pad_token_id) if row[:1] == (tok.bos_token_id,)
    ]  # prompts (completion steps hold no BOS)
    unmatched = [tok.decode(row) for row in rows if not any(row[: len(p)] == p for p in templated)]
    assert rows and not unmatched, (
        f"the trainer computed log-probs on prompts not templated as sampled: {unmatched[:2]}"
    )
    missing = [tok.decode(p) for p in templated if not any(row[: len(p)] == p for row in rows)]
    assert not missing, f"questions sampled but never trained on: {missing[:3]}"
