"""Multi-turn episodes (coevo/rollout/episodes.py) on a real tiny model that calls a tool.

The module's fixture fits a tiny Llama (the character tokenizer, a chat template that renders its
own tool list) for a few seconds, supervised, on whole episodes of a TRL-style environment:
call `reveal`, read the tool turn, answer. Greedy, it then calls the tool and answers (rarely the
right answer: copying is not learned in 150 steps); sampled, its episodes vary. Everything below
runs the real HF engine and the real update.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from prefect.settings import PREFECT_API_URL
from typer.testing import CliRunner

from coevo.cli import app
from coevo.config import Config, RewardEntry, deep_merge
from coevo.errors import InputError
from coevo.io import hash_file
from coevo.model.bootstrap import build_tiny_policy
from coevo.model.checkpoint import load_policy, read_meta
from coevo.model.tokenizer import TOOL_CHAT_TEMPLATE
from coevo.prepare import prepare_problems
from coevo.rollout.engines.hf import HFEngine
from coevo.rollout.episodes import bridge_ids, renderer_for, sample
from coevo.rollout.stage import run_rollouts
from coevo.seeding import derive_seed
from coevo.stages.prepare import bootstrap_stage, prepare_stage
from coevo.store.catalog import Catalog
from coevo.store.lineage import read_record, verify_lineage
from coevo.types import ContextVariant, Generation
from coevo.update.logprobs import completion_logprobs, pack
from coevo.update.objectives import build_objective
from coevo.update.stage import TrainingSet, build_training_set, minibatch_loss, old_logprobs
from coevo.verification.stage import verify_rollouts
from schemas.rewards import read_rewards
from schemas.rollouts import read_rollouts

from ..conftest import tiny_config
from ..flows.test_resume import _kill_at_pause

HERE = "tests.rollout.test_episodes"
CALL = '<tool_call>{"name": "reveal"}</tool_call>'


class Vault:
    """A TRL-style environment: reset gets the row's columns; its public method is the tool."""

    def reset(self, answer: str, **kwargs) -> None:
        self.answer = answer

    def reveal(self) -> str:
        """Reveal the answer to the question.

        Returns:
            The answer.
        """
        return self.answer


class BrokenVault(Vault):
    def reveal(self) -> str:
        """Reveal the answer to the question.

        Returns:
            The answer.
        """
        raise ValueError("the vault is jammed")


class HintedVault(Vault):
    def reset(self, answer: str, **kwargs) -> str:
        super().reset(answer)
        return "The vault is open."  # an initial observation


class SlowVault(Vault):
    def reveal(self) -> str:
        """Reveal the answer to the question.

        Returns:
            The answer.
        """
        time.sleep(3)
        return self.answer


class CountingVault(Vault):
    """A TRL-style environment whose state a reward function reads (TRL: `reward_func(environments, **kwargs)`)."""

    def reset(self, answer: str, **kwargs) -> None:
        super().reset(answer)
        self.reveals = 0

    def reveal(self) -> str:
        """Reveal the answer to the question.

        Returns:
            The answer.
        """
        self.reveals += 1
        return self.answer


def revealed_once(environments, **kwargs) -> list[float]:
    """As TRL's docs write an environment reward: read each episode's environment."""
    return [1.0 if env.reveals == 1 else 0.0 for env in environments]


def turn_count(completions, **kwargs) -> list[float]:
    """A multi-turn run's completions are message lists (TRL): count their turns."""
    return [float(len(completion)) for completion in completions]


def episode_config(tmp_path: Path, checkpoint: Path | None = None, **overrides) -> Config:
    settings = {
        "policy": {"shape": {"hidden_size": 64, "num_heads": 2, "intermediate_size": 128, "max_position": 256}},
        "prompt": {"format": "chat", "instruction": {"math": None}, "context_header": None},
        "environment": {"factory": f"{HERE}:Vault", "max_turns": 3, "max_tokens": 200},
        "sampling": {"max_new_tokens": 48},
        "objective": {"drop_zero_variance": False},
        "coevolver": {"update_context": "keep"},  # the update trains each episode's tokens as sampled
    }
    if checkpoint is not None:
        settings["policy"]["checkpoint"] = str(checkpoint)
    return tiny_config(tmp_path, **deep_merge(settings, overrides))


@pytest.fixture(scope="module")
def tool_caller(tmp_path_factory) -> Path:
    """A tiny checkpoint fitted on whole episodes: CALL, then (after the tool turn) the answer."""
    root = tmp_path_factory.mktemp("tool-caller")
    torch.set_num_threads(1)  # as every test runs (conftest's autouse fixture, which a module fixture precedes)
    cfg = episode_config(root)
    train, _ = prepare_problems(cfg)
    policy = build_tiny_policy(cfg)
    tok = policy.tokenizer
    tok.chat_template = TOOL_CHAT_TEMPLATE
    renderer = renderer_for(cfg, tok)
    call_ids = tok(CALL, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    sequences, masks = [], []
    for row in train.to_dict("records"):
        prompt = tok(renderer.render(row), add_special_tokens=False)["input_ids"]
        bridge = bridge_ids(tok, Generation([], call_ids, [0.0] * len(call_ids), CALL), row["answer"])
        answer = tok(row["answer"], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        sequences.append(prompt + call_ids + bridge + answer)
        masks.append([0] * len(prompt) + [1] * len(call_ids) + [0] * len(bridge) + [1] * len(answer))
    width = max(map(len, sequences))
    ids = torch.tensor([s + [tok.pad_token_id] * (width - len(s)) for s in sequences])  # [N, L]
    attention = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in sequences])  # [N, L]
    labels = torch.tensor(
        [[t if m else -100 for t, m in zip(s, k)] + [-100] * (width - len(s)) for s, k in zip(sequences, masks)]
    )
    optimizer = torch.optim.Adam(policy.model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(0)
    policy.model.train()
    for _ in range(150):
        batch = torch.randperm(len(sequences), generator=generator)[:32]
        loss = policy.model(input_ids=ids[batch], attention_mask=attention[batch], labels=labels[batch]).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    policy.model.save_pretrained(root / "ckpt")
    tok.save_pretrained(root / "ckpt")
    return root / "ckpt"


def episodes(tmp_path: Path, checkpoint: Path, n: int = 1, temperature: float = 0.0, **overrides) -> list[Generation]:
    cfg = episode_config(tmp_path, checkpoint, **overrides)
    _, test = prepare_problems(cfg)
    engine = HFEngine(load_policy(checkpoint, "cpu"))
    sampling = cfg.sampling.model_copy(update={"temperature": temperature})
    rows = test.head(8).to_dict("records")
    return [g for group in sample(engine, cfg, rows, None, n, sampling, seed=3) for g in group], rows


def test_an_episode_calls_the_tool_reads_its_turn_and_answers(tmp_path, tool_caller):
    found, rows = episodes(tmp_path, tool_caller)
    tok = load_policy(tool_caller, "cpu").tokenizer
    for episode, row in zip(found, rows):
        assert (episode.turns, episode.tool_calls, episode.tool_errors, episode.truncated) == (2, 1, 0, False)
        assert [m["role"] for m in episode.messages] == ["assistant", "tool", "assistant"]
        assert episode.messages[0]["content"] == CALL and episode.messages[1]["content"] == row["answer"]
        assert episode.text == episode.messages[2]["content"] and episode.finished
        mask = episode.policy_mask
        assert len(mask) == len(episode.token_ids) == len(episode.logprobs)
        tool_turn = [t for t, m in zip(episode.token_ids, mask) if not m]
        assert tok.decode(tool_turn) == f"\n<tool>{row['answer']}\n<assistant>"  # the template's tool turn
        assert all(lp == 0.0 for lp, m in zip(episode.logprobs, mask) if not m)
        assert all(lp < 0.0 or lp == 0.0 for lp in episode.logprobs)
        assert episode.prompt.startswith("<bos><tools>reveal <user>")  # the template's own tool format


def test_sampled_episodes_are_seeded_and_the_same_twice(tmp_path, tool_caller):
    first, _ = episodes(tmp_path / "a", tool_caller, n=3, temperature=1.0)
    again, _ = episodes(tmp_path / "b", tool_caller, n=3, temperature=1.0)
    assert [e.token_ids for e in first] == [e.token_ids for e in again]
    assert len({tuple(e.token_ids) for e in first}) > 1


def test_a_tool_that_raises_or_hangs_is_an_error_turn_and_the_episode_goes_on(tmp_path, tool_caller):
    raised, _ = episodes(tmp_path / "raise", tool_caller, environment={"factory": f"{HERE}:BrokenVault"})
    for episode in raised:
        assert episode.tool_errors == 1 and episode.turns == 2
        assert episode.messages[1]["content"] == "error: reveal raised ValueError: the vault is jammed"
    hung, _ = episodes(
        tmp_path / "hang", tool_caller, environment={"factory": f"{HERE}:SlowVault", "tool_timeout_s": 0.2}
    )
    for episode in hung:  # an environment that timed out may be mid-change: its episode ends there
        assert episode.messages[1]["content"] == "error: reveal timed out after 0.2 s"
        assert episode.truncated and episode.turns == 1 and episode.tool_errors == 1


def test_an_environments_initial_observation_ends_the_user_turn(tmp_path, tool_caller):
    found, rows = episodes(tmp_path, tool_caller, environment={"factory": f"{HERE}:HintedVault"})
    for episode, row in zip(found, rows):
        assert episode.prompt.endswith(f"<user>{row['prompt']}\n\nThe vault is open.\n<assistant>")


@pytest.mark.parametrize(
    "environment",
    [{"max_turns": 1}, {"max_tokens": 60}],  # no turn left to read the call's result
    ids=["max_turns", "max_tokens"],
)
def test_an_episode_out_of_turns_or_tokens_ends_truncated_and_marked(tmp_path, tool_caller, environment):
    found, _ = episodes(tmp_path, tool_caller, environment=environment)
    for episode in found:
        assert episode.truncated and not episode.finished
        assert episode.turns == 1 and episode.tool_calls == 1 and all(episode.policy_mask)
        assert len(episode.token_ids) <= 60


def test_tool_turn_tokens_get_no_gradient_and_policy_tokens_score_as_one_turn(tmp_path, tool_caller):
    found, _ = episodes(tmp_path, tool_caller, n=2, temperature=1.0)
    policy = load_policy(tool_caller, "cpu")
    cfg = episode_config(tmp_path, tool_caller)
    data = TrainingSet(
        rollout_ids=[str(i) for i in range(len(found))],
        prompts=[e.prompt_ids for e in found],
        completions=[e.token_ids for e in found],
        sampling_logprobs=[e.logprobs for e in found],
        as_sampled=[True] * len(found),
        advantages=torch.linspace(-1.0, 1.0, len(found)),
        passed=torch.zeros(len(found), dtype=torch.bool),
        policy_masks=[e.policy_mask for e in found],
    )
    old = [torch.tensor(e.logprobs) for e in found]
    idx, pad = list(range(len(found))), policy.tokenizer.pad_token_id
    loss, _, batch = minibatch_loss(
        policy.model, policy.model, build_objective(cfg.objective), data, idx, old, None, cfg, pad
    )
    (grad,) = torch.autograd.grad(loss, batch.logprobs)  # [B, T]
    for row, episode in enumerate(found):
        mask = torch.zeros(grad.size(1), dtype=torch.bool)
        mask[: len(episode.policy_mask)] = torch.tensor(episode.policy_mask, dtype=torch.bool)
        assert torch.all(grad[row][~mask] == 0)  # tool turns and padding: no gradient
        assert torch.all(grad[row][mask] != 0)
    # the last turn's tokens scored inside the episode equal the same tokens scored as one completion
    # after the text before them (prompt, first turn, tool turn) as a prompt
    episode = found[0]
    start = len(episode.token_ids) - list(reversed(episode.policy_mask)).index(0)
    alone = pack(
        [episode.prompt_ids + episode.token_ids[:start]], [episode.token_ids[start:]], pad, policy.model.device
    )
    torch.testing.assert_close(
        batch.logprobs[0, start : len(episode.token_ids)].detach(),
        completion_logprobs(policy.model, alone)[0],
        atol=1e-5,
        rtol=1e-5,
    )


class SealedVault(Vault):
    def reset(self, answer: str, **kwargs) -> None:
        raise RuntimeError("sealed: this environment may not be made again")


def test_verification_replays_no_environment_when_no_reward_plugin_reads_it(tmp_path, tool_caller):
    """The built-in rewards read the last turn's text: an episode run scored by them alone never
    rebuilds an environment (SealedVault cannot be reset; with a plugin entry it would be)."""
    cfg = episode_config(tmp_path, tool_caller)
    _, test = prepare_problems(cfg)
    problems = test.head(2)
    variants = [ContextVariant(pid, "solo", n=2) for pid in problems["id"]]
    rollouts = run_rollouts(HFEngine(load_policy(tool_caller, "cpu")), variants, problems, cfg, 1, "v0")
    sealed = cfg.model_copy(
        update={"environment": cfg.environment.model_copy(update={"factory": f"{HERE}:SealedVault"})}
    )
    assert len(verify_rollouts(rollouts, problems, sealed)) == len(rollouts)
    with_plugin = sealed.model_copy(update={"rewards": [*sealed.rewards, RewardEntry(function=f"{HERE}:turn_count")]})
    with pytest.raises(InputError, match="sealed"):
        verify_rollouts(rollouts, problems, with_plugin)


def test_the_engine_mismatch_is_measured_on_policy_tokens_only(tmp_path, tool_caller):
    """A separate engine's mismatch (coevo/update/mismatch.py) over episodes the same weights sampled:
    every policy token is measured and agrees; a tool turn, whose recorded sampling logprob is 0.0,
    would count as a large mismatch if it were measured."""
    cfg = episode_config(tmp_path, tool_caller, sampling={"temperature": 1.0})
    _, test = prepare_problems(cfg)
    problems = test.head(4)
    policy = load_policy(tool_caller, "cpu")
    variants = [ContextVariant(pid, "solo", n=cfg.rollout.group_size) for pid in problems["id"]]
    rollouts = run_rollouts(HFEngine(policy), variants, problems, cfg, 1, "v0")
    rewards = verify_rollouts(rollouts, problems, cfg)
    data, _ = build_training_set(policy, rollouts, rewards, cfg, keep_all_groups=True)
    _, mismatch = old_logprobs(policy.model, data, rollouts, cfg, policy.tokenizer.pad_token_id, False)
    assert (rollouts["tool_calls"] > 0).any()
    assert mismatch["policy/mismatch_tokens"] == sum(sum(mask) for mask in rollouts["policy_mask"])
    assert mismatch["policy/mismatch_abs_logprob_max"] < 1e-3


ENVIRONMENT_MODULE = inspect.getsource(Vault)  # a user's module holding the same environment


def test_the_lineage_reports_an_environment_source_edited_since(tmp_path, tool_caller, monkeypatch):
    """The bootstrap checkpoint's lineage records the environment class's source and sha256;
    `verify_lineage` names it once the file changes."""
    monkeypatch.chdir(tmp_path)  # a user's module beside the params, found from the working directory
    (tmp_path / "lineage_env.py").write_text(ENVIRONMENT_MODULE)
    cfg = episode_config(tmp_path, tool_caller, environment={"factory": "lineage_env:Vault"})
    boot = bootstrap_stage(cfg, prepare_stage(cfg))
    checkpoint = Path(boot.checkpoint.path)
    [recorded] = read_record(checkpoint)["episode_plugins"]
    assert recorded["sha256"] == hash_file(tmp_path / "lineage_env.py")
    assert verify_lineage(checkpoint) == []
    (tmp_path / "lineage_env.py").write_text(ENVIRONMENT_MODULE + "# edited after training\n")
    assert [m.what for m in verify_lineage(checkpoint)] == ["tool or environment lineage_env:Vault"]


def test_episode_settings_that_cannot_work_are_refused(tmp_path):
    with pytest.raises(Exception, match="prompt.format: chat"):
        tiny_config(tmp_path, tools=["coevo.environments.calculator:add"])
    with pytest.raises(Exception, match="max_tokens"):
        episode_config(tmp_path, environment={"max_tokens": 10})
    with pytest.raises(Exception, match="module:Class"):
        episode_config(tmp_path, environment={"factory": "not a path"})


def test_the_rollouts_table_keeps_each_episode(tmp_path, tool_caller):
    from coevo.driver import train
    from schemas.rollouts import read_rollouts

    cfg = episode_config(tmp_path, tool_caller, sampling={"temperature": 1.0})
    summary = train(cfg)
    assert summary["iterations"] == 2
    rollouts = read_rollouts(cfg.run.out_dir / "rollouts" / "iter_0001.parquet")
    assert (rollouts["tool_calls"] >= 1).mean() > 0.5
    for row in rollouts.itertuples():
        turns = json.loads(row.messages)
        assert (
            row.turns == sum(t["role"] == "assistant" for t in turns)
            and row.completion == turns[-1]["content"]
            or row.truncated
        )
        assert len(row.policy_mask) == len(row.completion_ids)
    metrics = [json.loads(line) for line in (cfg.run.out_dir / "metrics.jsonl").read_text().splitlines()]
    assert {"rollout/turns", "rollout/tool_calls", "rollout/tool_errors", "rollout/truncated_frac"} <= set(metrics[-1])
    # the lineage names the environment class's source and its sha256, as it does a reward plugin's
    checkpoint = cfg.run.out_dir / "checkpoints" / "iter_0002"
    [environment] = read_record(checkpoint)["episode_plugins"]
    assert environment["function"] == f"{HERE}:Vault" and environment["sha256"] == hash_file(__file__)
    assert verify_lineage(checkpoint) == []
    # the catalog's episodes view, through `coevo query episodes`
    out = cfg.run.out_dir
    with Catalog(cfg.catalog_path) as catalog:
        catalog.ingest_iteration(1, out / "rollouts" / "iter_0001.parquet", out / "rewards" / "iter_0001.parquet")
    problem = rollouts["problem_id"].iloc[0]
    shown = CliRunner().invoke(app, ["query", "episodes", problem, "--catalog", str(cfg.catalog_path), "--json"])
    assert shown.exit_code == 0, shown.output
    listed = json.loads(shown.output)
    assert [r["rollout_id"] for r in listed] == sorted(rollouts.loc[rollouts["problem_id"] == problem, "rollout_id"])
    assert all(json.loads(r["messages"])[0]["role"] == "assistant" for r in listed)


def test_a_harness_gives_episodes_cut_at_their_turn_limit_more_turns(tmp_path, tool_caller):
    """With one turn the tool caller's every episode ends on its unanswered call: the harness diagnoses
    the turn limit from iteration 1's episodes, backtests two turns (the candidate's episodes read the
    tool turn and answer) and accepts; iteration 2 samples, and the final checkpoint is evaluated, with two."""
    from coevo.driver import train

    cfg = episode_config(
        tmp_path,
        tool_caller,
        environment={"max_turns": 1},
        coevolver={"kind": "harness", "harness": {"backtest_problems": 2}},
    )
    train(cfg)
    out = cfg.run.out_dir
    first, second = (read_rollouts(out / "rollouts" / f"iter_000{it}.parquet") for it in (1, 2))
    assert first["truncated"].mean() > 0.5 and (first["turns"] == 1).all()
    [entry] = json.loads((out / "coevolver" / "iter_0001" / "harness.json").read_text())["entries"]
    assert (entry["knob"], entry["value"], entry["from"], entry["accepted"]) == ("max_turns", 2, 1, True)
    assert entry["before"]["within_turns_share"] < 0.5 and entry["after"]["within_turns_share"] == 1.0
    assert entry["after"]["pass_rate"] > entry["before"]["pass_rate"]  # the tool turn read, the answer given
    assert (second["turns"] == 2).mean() > 0.5 and not second["truncated"].any()
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["coevo/harness_max_turns"] for m in metrics] == [1.0, 2.0]
    assert json.loads((out / "evals" / "iter_0002.json").read_text())["max_turns"] == 2


def test_flow_and_driver_agree_on_an_episode_run_killed_between_turns(prefect_server, tmp_path, tool_caller):
    """The plain driver is SIGKILLed between the turns of iteration 2's episodes and continued; the
    flow runs through. Same metrics (stage times aside) and the same final weights."""
    runs = {}
    for runner, options in {"flow": [], "plain": ["--plain"]}.items():
        cfg = episode_config(tmp_path / runner, tool_caller, sampling={"temperature": 1.0})
        raw = cfg.model_dump(mode="json")
        raw["tracking"] |= {"mlflow_uri": f"sqlite:///{tmp_path / runner / 'mlflow.db'}", "experiment": "episodes"}
        params = tmp_path / runner / "params.yaml"
        params.parent.mkdir(parents=True, exist_ok=True)
        params.write_text(yaml.safe_dump(raw))
        if runner == "plain":
            pause = f"turn:{derive_seed(cfg.seed, 2, 'rollout')}.1"
            env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(), "COEVO_PAUSE": f"{pause}:300"}
            command = [sys.executable, "-m", "coevo.cli", "train", *options, "--params", str(params), "--json"]
            process = subprocess.Popen(
                command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
            )
            _kill_at_pause(process, pause)
            assert not (cfg.run.out_dir / "rollouts" / "iter_0002.parquet").exists()
            options = [*options, "--continue", "--set", "run.iterations=1"]  # iteration 2, where the kill fell
        result = CliRunner().invoke(app, ["train", *options, "--params", str(params), "--json"])
        assert result.exit_code == 0, result.output
        lines = (cfg.run.out_dir / "metrics.jsonl").read_text().splitlines()
        runs[runner] = (
            [{k: v for k, v in json.loads(line).items() if not k.startswith("time/")} for line in lines],
            read_meta(cfg.run.out_dir / "checkpoints" / "iter_0002")["weights_sha256"],
        )
    assert runs["plain"] == runs["flow"]
    assert runs["flow"][0][-1]["rollout/tool_calls"] > 0


@pytest.mark.parametrize("through", ["cli", "api"])
def test_trl_style_environment_rewards_train_unchanged(tmp_path, tool_caller, through):
    """Reward functions read `environments` (each episode's environment as it ended, rebuilt by replaying
    its calls in the verification stage) and `completions` as message lists, as TRL passes them."""
    import coevo

    cfg = episode_config(
        tmp_path,
        tool_caller,
        sampling={"temperature": 0.5},  # well-formed calls mostly, and some that are not
        environment={"factory": f"{HERE}:CountingVault"},
        rewards=[
            {"function": "verifier"},
            {"function": f"{HERE}:revealed_once", "weight": 0.5},
            {"function": f"{HERE}:turn_count", "weight": 0.0},
        ],
    )
    params = tmp_path / "params.yaml"
    raw = cfg.model_dump(mode="json")
    raw["tracking"] |= {"mlflow_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    params.write_text(yaml.safe_dump(raw))
    if through == "cli":
        result = CliRunner().invoke(app, ["train", "--plain", "--params", str(params), "--json"])
        assert result.exit_code == 0, result.output
    else:
        assert coevo.train(params, plain=True)["iterations"] == 2
    out = cfg.run.out_dir
    rollouts = pd.concat([read_rollouts(out / "rollouts" / f"iter_000{it}.parquet") for it in (1, 2)])
    rewards = pd.concat([read_rewards(out / "rewards" / f"iter_000{it}.parquet") for it in (1, 2)])
    components = [json.loads(c) for c in rewards["components"]]
    turns = [json.loads(m) for m in rollouts["messages"]]
    ran = rollouts["tool_calls"] - rollouts["tool_errors"]  # calls that reached reveal
    assert [c["revealed_once"] for c in components] == [float(n == 1) for n in ran]
    assert [c["turn_count"] for c in components] == [float(len(t)) for t in turns]
    assert 0 < sum(c["revealed_once"] for c in components) < len(components)
