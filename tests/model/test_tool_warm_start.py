"""The tool warm start (coevo/model/tool_warm_start.py): demonstrated episodes built as episodes are
sampled, with the tools' own results, trained on the assistant turns only; checkpoint 0 of a run with
`bootstrap.tool_calls.steps` is the fine-tuned checkpoint, which then calls the calculator where the
checkpoint it started from did not."""

from __future__ import annotations

import pytest
import torch

from coevo.config import ConfigError
from coevo.environments.calculator import TOOLS as CALCULATOR_TOOL_PATHS
from coevo.environments.experts import CALCULATOR_TOOLS, calculator
from coevo.model.bootstrap import TRAINED_ON, bootstrap_policy, build_tiny_policy
from coevo.model.checkpoint import load_policy, read_meta
from coevo.model.supervised import sequence_nll
from coevo.model.tokenizer import TOOL_CHAT_TEMPLATE
from coevo.model.tool_warm_start import demonstration, tool_warm_start
from coevo.prepare import prepare_problems
from coevo.problems.heldout import digests_of
from coevo.problems.proposer import parse_question
from coevo.rollout.engines.hf import HFEngine
from coevo.rollout.episodes import renderer_for, sample
from coevo.rollout.tools import parse_tool_call

from ..rollout.test_episodes import episode_config

GAME = "coevo.environments.guessing:GuessingGame"
STEPS = 120


def calculator_config(tmp_path, checkpoint=None, **overrides):
    settings = {
        "tools": CALCULATOR_TOOL_PATHS,
        "environment": {"factory": None},
        "bootstrap": {"tool_calls": {"steps": STEPS, "lr": 3e-3, "batch_size": 16}},
        "sampling": {"max_new_tokens": 80},  # characters: a calculator call is ~60
    }
    for section, values in overrides.items():
        settings[section] = {**settings.get(section, {}), **values} if isinstance(values, dict) else values
    return episode_config(tmp_path, checkpoint, **settings)


@pytest.fixture(scope="module")
def untrained(tmp_path_factory):
    """A tiny random checkpoint with a chat template that lists its tools: it calls nothing."""
    root = tmp_path_factory.mktemp("untrained")
    torch.set_num_threads(1)
    policy = build_tiny_policy(calculator_config(root))
    policy.tokenizer.chat_template = TOOL_CHAT_TEMPLATE
    policy.model.save_pretrained(root / "ckpt")
    policy.tokenizer.save_pretrained(root / "ckpt")
    return root / "ckpt"


def test_a_demonstration_is_an_episode_with_the_tools_results_and_trains_the_assistant_turns(tmp_path, untrained):
    cfg = calculator_config(tmp_path, untrained)
    train, _ = prepare_problems(cfg)
    policy = load_policy(untrained, "cpu")
    tok = policy.tokenizer
    for row in train.head(12).to_dict("records"):
        ids, mask, calls = demonstration(cfg, renderer_for(cfg, tok), row, calculator)
        _, family, (a, b) = parse_question(row["prompt"])
        call = parse_tool_call(tok.decode(ids))
        assert calls == 1 and call.name == CALCULATOR_TOOLS[family] and call.arguments == {"a": a, "b": b}
        trained = tok.decode([t for t, m in zip(ids, mask) if m])
        assert trained == f"{calculator(row, [])}<eos>The answer is \\boxed{{{row['answer']}}}.<eos>"
        untrained_text = tok.decode([t for t, m in zip(ids, mask) if not m])
        assert untrained_text.endswith(f"\n<tool>{row['answer']}\n<assistant>")  # the tool's own result, bridged


def test_checkpoint_0_is_the_checkpoint_fine_tuned_to_call_the_calculator(tmp_path, untrained):
    cfg = calculator_config(tmp_path, untrained)
    train, test = prepare_problems(cfg)
    before = untrained.joinpath("model.safetensors").read_bytes()
    policy, _ = bootstrap_policy(cfg, train)
    report = read_meta(cfg.bootstrap_dir)["tool_warm_start"]
    assert report["kind"] == "tools" and report["steps"] == STEPS and report["demonstrations"] == STEPS * 16
    assert untrained.joinpath("model.safetensors").read_bytes() == before  # the user's checkpoint is untouched
    rows = test.head(8).to_dict("records")
    batch = [demonstration(cfg, renderer_for(cfg, policy.tokenizer), row, calculator)[:2] for row in rows]
    with torch.no_grad():
        losses = [
            float(sequence_nll(p.model, [s for s, _ in batch], [m for _, m in batch], p.tokenizer.pad_token_id))
            for p in (load_policy(untrained, "cpu"), load_policy(cfg.bootstrap_dir, "cpu"))
        ]
    assert losses[1] < losses[0] / 2  # held-out demonstrations: the warm start learned the format, not the rows
    sampling = cfg.sampling.model_copy(update={"temperature": 0.0})
    called = {
        str(path): [
            e.tool_calls for (e,) in sample(HFEngine(load_policy(path, "cpu")), cfg, rows, None, 1, sampling, 3)
        ]
        for path in (untrained, cfg.bootstrap_dir)
    }
    assert sum(called[str(untrained)]) == 0 and sum(called[str(cfg.bootstrap_dir)]) >= len(rows) // 2


def test_a_run_is_refused_held_out_problems_its_starting_checkpoint_was_warm_started_on(tmp_path, untrained):
    """The warm start records the problems it fine-tuned on (digests of their content keys); a run of
    another seed started from that checkpoint draws other splits, some of whose held-out problems the
    warm start trained on, and its prepare stage refuses, naming the checkpoint and a problem. A run
    of the warm start's own seed (its held-out splits unseen by construction) starts, and its
    checkpoint 0 carries the record on."""
    from coevo.stages.prepare import prepare_stage

    once = {"tool_calls": {"steps": 1, "lr": 3e-3, "batch_size": 2}}
    cfg = calculator_config(tmp_path / "warm", untrained, bootstrap=once)
    train, _ = prepare_problems(cfg)
    bootstrap_policy(cfg, train)
    assert read_meta(cfg.bootstrap_dir)[TRAINED_ON] == digests_of(train)
    assert TRAINED_ON not in read_meta(untrained)  # a checkpoint no warm start trained records nothing

    no_warm_start = {"tool_calls": {"steps": 0}}
    other = calculator_config(tmp_path / "other", cfg.bootstrap_dir, bootstrap=no_warm_start, seed=1)
    with pytest.raises(ValueError, match=r"a warm start fine-tuned it on \d+ of this run's val problems \(v-"):
        prepare_stage(other)
    same = calculator_config(tmp_path / "same", cfg.bootstrap_dir, bootstrap=no_warm_start)
    prepare_stage(same)
    bootstrap_policy(same, prepare_problems(same)[0])
    assert read_meta(same.bootstrap_dir)[TRAINED_ON] == digests_of(train)


def test_tool_calls_without_tools_or_without_a_built_in_expert_are_refused(tmp_path, untrained):
    with pytest.raises(ConfigError, match="bootstrap.tool_calls.steps demonstrates tool calls: it needs tools"):
        calculator_config(tmp_path, untrained, tools=[], environment={"factory": None})
    cfg = calculator_config(tmp_path, untrained, tools=["tests.rollout.test_episodes:turn_count"])
    train, _ = prepare_problems(cfg)
    with pytest.raises(ValueError, match="demonstrations come from a built-in environment's expert"):
        tool_warm_start(load_policy(untrained, "cpu"), train, cfg)


def test_the_supervised_loss_attends_a_pad_token_inside_a_sequence(untrained):
    """SmolLM2 pads with its end-of-turn token, which ends every turn of an episode: the loss attends
    each sequence's own length, a pad token inside it included."""
    policy = load_policy(untrained, "cpu")
    pad, bos = policy.tokenizer.pad_token_id, policy.tokenizer.bos_token_id
    sequence, short = [bos, 5, pad, 7, 8, 9], [bos, 5, 6]
    with torch.no_grad():
        got = sequence_nll(policy.model, [sequence, short], [[0, 0, 0, 1, 1, 1], [0, 0, 0]], pad)
        logits = policy.model(input_ids=torch.tensor([sequence])).logits[0, :-1]  # [5, V], all attended
        want = torch.nn.functional.cross_entropy(logits[2:], torch.tensor(sequence[3:]))
    assert torch.allclose(got, want, atol=1e-5)


def test_the_tool_warm_start_settings_enter_the_bootstrap_key(tmp_path, untrained):
    """Changing what the tool warm start does re-bootstraps, also for a source with no warm start of its own."""
    from coevo.stages.prepare import bootstrap_key, prepare_stage

    games = {"problems": {"source": "guessing"}, "tools": [], "environment": {"factory": GAME}}
    cfg = calculator_config(tmp_path, untrained, **games)
    data = prepare_stage(cfg)
    other = calculator_config(tmp_path, untrained, **games, bootstrap={"tool_calls": {"steps": STEPS, "lr": 1e-4}})
    assert bootstrap_key(cfg, data) != bootstrap_key(other, data)
