"""A TRL user's dataset and reward functions through `coevo train`, unchanged: reward functions written
as TRL's documentation and the open-r1 recipes write them (completion[0]["content"], a
`trainer_state` ramp, an async one, log_metric / log_extra), a conversational dataset with a system
turn saved with `datasets`' save_to_disk, on the tiny policy with a chat template."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import duckdb
import pytest
import yaml
from typer.testing import CliRunner

from coevo.cli import app
from coevo.store.catalog import Catalog
from schemas.rewards import read_rewards
from schemas.rollouts import read_rollouts

from .conftest import TINY, TINY_PARAMS
from .test_prompting import templated_copy

SYSTEM = "Add."  # the dataset's own system turn (short: the tiny policy's context is 64 tokens)

# Written as TRL's GRPOTrainer documentation and open-r1's rewards.py write them; not adapted to coevo.
TRL_REWARDS = '''
import asyncio
import re

CALLS = []  # what each function received, for the test to read


def accuracy_reward(completions, solution, **kwargs):
    """Reward function that checks if the completion is the same as the ground truth."""
    contents = [completion[0]["content"] for completion in completions]
    CALLS.append({"completions": completions, "prompts": kwargs["prompts"], "step": kwargs["trainer_state"].global_step,
                  "max_steps": kwargs["trainer_state"].max_steps, "epoch": kwargs["trainer_state"].epoch,
                  "completion_ids": kwargs["completion_ids"], "keys": sorted(kwargs)})
    return [1.0 if content.strip() == sol.strip() else 0.0 for content, sol in zip(contents, solution)]


def holds_last_digit(completions, solution, **kwargs):
    """1 when the completion holds the reference solution's last digit."""
    return [1.0 if sol[-1] in c[0]["content"] else 0.0 for c, sol in zip(completions, solution)]


def format_reward(completions, **kwargs):
    """Reward function that checks if the completion has a specific format."""
    pattern = r"^<think>.*?</think><answer>.*?</answer>$"
    completion_contents = [completion[0]["content"] for completion in completions]
    matches = [re.match(pattern, content) for content in completion_contents]
    return [1.0 if match else 0.0 for match in matches]


def length_ramp(completions, completion_ids, trainer_state, log_metric, log_extra, **kwargs):
    """A length penalty ramped in with the global step (trl#3668)."""
    scale = trainer_state.global_step / trainer_state.max_steps
    log_metric("ramp_scale", scale)
    log_extra("n_tokens", [len(ids) for ids in completion_ids])
    return [-scale * len(ids) / 10 for ids in completion_ids]


ARRIVED = []


async def _both_running():
    ARRIVED.append(1)
    for _ in range(500):  # a deadlock guard, not a timing: each call waits for the other to start
        if len(ARRIVED) % 2 == 0:
            return
        await asyncio.sleep(0.01)
    raise RuntimeError("the async reward functions were not awaited together")


async def async_even_answer(prompts, completions, answer, **kwargs):
    await _both_running()
    return [None if int(a) % 2 else 0.5 for a in answer]


async def async_has_digit(prompts, completions, **kwargs):
    await _both_running()
    return [1.0 if any(ch.isdigit() for ch in c[0]["content"]) else 0.0 for c in completions]
'''


def trl_dataset(path: Path) -> Path:
    """A conversational prompt-only dataset as TRL documents it, with a system turn, saved to disk."""
    from datasets import Dataset

    rows = [
        {
            "prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"{a}+{b}="}],
            "answer": str(a + b),
            "solution": str(a + b),
        }
        for a in range(1, 7)
        for b in range(1, 6)
    ]
    Dataset.from_list(rows).save_to_disk(str(path))
    return path


def params_file(tmp_path: Path, **sections) -> Path:
    raw = yaml.safe_load(TINY_PARAMS.read_text())
    for section, values in {**TINY, **sections}.items():
        raw.setdefault(section, {}).update(values) if isinstance(values, dict) else raw.__setitem__(section, values)
    raw["run"]["out_dir"] = str(tmp_path / "run")
    raw["problems"]["data_dir"] = str(tmp_path / "data")
    raw["tracking"]["mlflow_uri"] = f"sqlite:///{tmp_path / 'mlflow.db'}"
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.fixture
def rewards_module(tmp_path, monkeypatch) -> str:
    """TRL_REWARDS as a module beside params.yaml, under a name unique to this test."""
    name = f"trl_rewards_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(TRL_REWARDS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    return name


def test_trl_reward_functions_and_dataset_train_unchanged(tmp_path, tiny_policy_dir, rewards_module):
    checkpoint = templated_copy(tiny_policy_dir, tmp_path / "chat-ckpt")
    rewards = [
        {"function": "verifier", "weight": 0.0},
        {"function": f"{rewards_module}:accuracy_reward"},
        {"function": f"{rewards_module}:format_reward"},
        {"function": f"{rewards_module}:length_ramp"},
        {"function": f"{rewards_module}:async_even_answer"},
        {"function": f"{rewards_module}:async_has_digit"},
    ]
    params = params_file(
        tmp_path,
        coevolver={"kind": "none"},  # context-free: update_context is never asked about
        problems={"source": "file", "path": str(trl_dataset(tmp_path / "trl-dataset"))},
        policy={"checkpoint": str(checkpoint), "threads": 1},
        prompt={"format": "chat", "instruction": {"math": None}, "context_header": None},
        rewards=rewards,
    )
    result = CliRunner().invoke(app, ["train", "--plain", "--params", str(params), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["iterations"] == 2

    module = sys.modules[rewards_module]
    trained = [call for call in module.CALLS if call["step"] > 0]
    assert [call["step"] for call in trained] == [1, 2] and {call["max_steps"] for call in trained} == {2}
    n_train = json.loads((tmp_path / "data" / "splits.json").read_text())["sizes"][
        "train"
    ]  # 23 of the 30 rows: test and val held out
    assert trained[1]["epoch"] == pytest.approx(2 * 4 / n_train)  # 2 iterations x 4 problems over the training split
    assert {"completion_ids", "trainer_state", "log_metric", "log_extra", "answer", "messages", "prompts"} <= set(
        trained[0]["keys"]
    )
    for call in trained:
        assert all(
            c == [{"role": "assistant", "content": c[0]["content"]}] and isinstance(c[0]["content"], str)
            for c in call["completions"]
        )
        assert all(p[0] == {"role": "system", "content": SYSTEM} and p[-1]["role"] == "user" for p in call["prompts"])

    rollouts = read_rollouts(tmp_path / "run" / "rollouts" / "iter_0002.parquet")
    assert all(
        p.startswith(f"<bos><system>{SYSTEM}\n<user>") and p.endswith("=\n<assistant>") for p in rollouts["prompt"]
    )  # the system turn was sampled
    assert trained[1]["completion_ids"] == [list(ids) for ids in rollouts["completion_ids"]]
    table = read_rewards(tmp_path / "run" / "rewards" / "iter_0002.parquet")
    components = [json.loads(text) for text in table["components"]]
    assert [c["length_ramp"] for c in components] == pytest.approx(
        [-len(ids) / 10 for ids in rollouts["completion_ids"]]
    )  # scale 2/2 at step 2
    assert {c["async_even_answer"] for c in components} <= {None, 0.5}
    logged = [json.loads(text) for text in table["logged"]]
    assert [entry["extra"]["n_tokens"] for entry in logged] == [len(ids) for ids in rollouts["completion_ids"]]
    assert {entry["metric"]["ramp_scale"] for entry in logged} == {1.0}

    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["verify/logged/ramp_scale"] for m in metrics if "verify/logged/ramp_scale" in m] == [0.5, 1.0]
    out = tmp_path / "run"
    with Catalog(out / "catalog.duckdb") as catalog:  # the plain driver leaves the catalog to `coevo query` / the flow
        for it in (1, 2):
            catalog.ingest_iteration(
                it, out / "rollouts" / f"iter_{it:04d}.parquet", out / "rewards" / f"iter_{it:04d}.parquet"
            )
    with duckdb.connect(str(out / "catalog.duckdb"), read_only=True) as con:
        scales = con.execute(
            "SELECT iteration, avg(CAST(logged->'metric'->>'ramp_scale' AS DOUBLE)) FROM rewards GROUP BY 1 ORDER BY 1"
        ).fetchall()
    assert scales == [(1, 0.5), (2, 1.0)]


def test_a_dataset_without_answers_trains_and_is_evaluated_by_its_reward_functions(
    tmp_path, tiny_policy_dir, rewards_module
):
    """TRL's contract: a dataset of `prompt` and a reference column (`solution`), no `answer`. The run's
    reward functions train on it, and the held-out evaluation judges each greedy completion by them
    (it passes when their total reaches rewards_pass_threshold), as TRL evaluates."""
    from datasets import Dataset

    from coevo.config import load_config
    from coevo.evaluation import greedy_answers
    from coevo.model.checkpoint import load_policy
    from coevo.rollout.engines.hf import HFEngine
    from schemas.problems import read_problems

    rows = [
        {"prompt": [{"role": "user", "content": f"{a}+{b}="}], "solution": str(a + b)}
        for a in range(9)
        for b in range(5)
    ]
    Dataset.from_list(rows).save_to_disk(str(tmp_path / "no-answers"))
    params = params_file(
        tmp_path,
        coevolver={"kind": "none"},
        problems={"source": "file", "path": str(tmp_path / "no-answers")},
        policy={"checkpoint": str(templated_copy(tiny_policy_dir, tmp_path / "chat-ckpt")), "threads": 1},
        prompt={"format": "chat", "instruction": {"math": None}, "context_header": None},
        rewards=[{"function": f"{rewards_module}:holds_last_digit"}],
    )
    result = CliRunner().invoke(app, ["train", "--plain", "--params", str(params), "--json"])
    assert result.exit_code == 0, result.output
    test = read_problems(tmp_path / "data" / "test.parquet")
    assert set(test["answer"]) == {""}
    engine = HFEngine(load_policy(tmp_path / "run" / "checkpoints" / "iter_0002", "cpu"))
    greedy = greedy_answers(engine, load_config(params), test.to_dict("records"))
    solutions = [json.loads(fields)["solution"] for fields in test["user_fields"]]
    expected = [solution[-1] in g.text for g, solution in zip(greedy, solutions)]
    verdicts = json.loads((tmp_path / "run" / "evals" / "iter_0002.json").read_text())["verdicts"]
    assert [verdicts[pid] for pid in test["id"]] == expected and 0 < sum(expected) < len(expected)


BAD_REWARDS = """
async def async_raises(completions, **kwargs):
    raise KeyError("label")


def returns_messages(completions, **kwargs):
    return [completion for completion in completions]  # the message lists themselves, not floats


def one_short(completions, **kwargs):
    return [1.0 for completion in completions][1:]
"""


def jsonl_dataset(path: Path, messages: list[dict], n: int = 12) -> Path:
    path.mkdir()
    rows = [
        {
            "messages": messages[:-1] + [{**messages[-1], "content": f"{i % 5}+1="}]
            if messages[-1]["role"] == "user"
            else messages,
            "answer": str(i % 5 + 1),
        }
        for i in range(n)
    ]
    (path / "part-0.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


WITH_SYSTEM = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "1+1="}]
BAD_INPUTS = {
    # case: (rewards, dataset turns (None: the question column dropped), extra sections, error pattern, setting)
    "returns-messages": (
        "returns_messages",
        WITH_SYSTEM,
        {},
        (
            r"rewards\[1\]\.function .*returns_messages.* returned a message list for completion 0 \(problem "
            r"'0'\).*completion\[0\]\['content'\]"
        ),
        "rewards[1].function",
    ),
    "wrong-length": (
        "one_short",
        WITH_SYSTEM,
        {},
        r"rewards\[1\]\.function .*one_short.* returned 1 values for 2 completions",
        "rewards[1].function",
    ),
    "async-raises": (
        "async_raises",
        WITH_SYSTEM,
        {},
        r"rewards\[1\]\.function .*async_raises.* \(async\) raised KeyError: 'label'",
        "rewards[1].function",
    ),
    "no-question-column": (
        None,
        None,
        {},
        r"dataset: field 'prompt': missing column \(no question column.*columns found: \['answer', 'id'\]",
        None,
    ),
    "last-turn-not-user": (
        None,
        [*WITH_SYSTEM, {"role": "assistant", "content": "2"}],
        {},
        r"part-0\.jsonl line 1, field 'messages': the last turn is 'assistant'",
        None,
    ),
    "strip-with-system-turn": (
        None,
        WITH_SYSTEM,
        {"coevolver": {"kind": "skill_bank"}},
        r"problem '0': its `messages` hold 2 turns \(system, user\); coevolver\.update_context: strip",
        "coevolver.update_context",
    ),
    "plain-format": (
        None,
        WITH_SYSTEM,
        {"prompt": {"format": "plain"}},
        r"problem '0' is a conversation .*prompt\.format: plain",
        "prompt.format",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_stops_before_the_first_rollout_naming_the_setting_or_row(
    tmp_path, tiny_policy_dir, rewards_module, case
):
    reward, turns, sections, pattern, setting = BAD_INPUTS[case]
    (tmp_path / f"{rewards_module}.py").write_text(BAD_REWARDS)
    data = jsonl_dataset(tmp_path / "dataset", turns or WITH_SYSTEM)
    if turns is None:  # a dataset directory without a question column
        (data / "part-0.jsonl").write_text("".join(json.dumps({"id": i, "answer": "1"}) + "\n" for i in range(3)))
    checkpoint = templated_copy(tiny_policy_dir, tmp_path / "chat-ckpt")
    sections = {
        "coevolver": {"kind": "none"},
        "problems": {"source": "file", "path": str(data)},
        "policy": {"checkpoint": str(checkpoint)},
        "prompt": {"format": "chat", "instruction": {"math": None}},
        "rewards": [{"function": "verifier"}] + ([{"function": f"{rewards_module}:{reward}"}] if reward else []),
        **sections,
    }
    result = CliRunner().invoke(app, ["train", "--plain", "--params", str(params_file(tmp_path, **sections)), "--json"])
    assert result.exit_code == 2, result.output
    report = json.loads(result.stdout)  # one JSON object on stdout
    assert re.search(pattern, report["error"]), report["error"]
    assert report["setting"] == setting
    assert re.search(pattern, result.stderr)  # and the message on stderr
    assert not (tmp_path / "data").exists() and not (tmp_path / "run" / "rollouts").exists()  # nothing written
    assert not (tmp_path / "run" / "bootstrap").exists()
