"""The number-guessing games (coevo/problems/guessing.py) and their environment
(coevo/environments/guessing.py): splits that share no range and no hidden number with training,
prepared and validated as every source is; the environment loaded as the run loads it, played by
halving through the real tool calls, judged by the run's verifier and read by its reward functions."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from coevo.config import ConfigError
from coevo.environments import experts
from coevo.environments.guessing import fewer_guesses, solved
from coevo.model.bootstrap import bootstrap_policy
from coevo.prepare import prepare_problems
from coevo.problems.guessing import guessing_splits
from coevo.rollout.episodes import replay, toolbox
from coevo.rollout.tools import format_tool_call, parse_tool_call, run_tool
from coevo.verification.family_verifiers import family_verdicts

from ..conftest import tiny_config

RANGE = re.compile(r"from (\d+) to (\d+)\.")
GAME = "coevo.environments.guessing:GuessingGame"
LEVELS = [2, 4, 6]  # not the default levels, so the setting is seen in force


def guessing_config(tmp_path, **overrides):
    settings = {
        "problems": {"source": "guessing", "guess_levels": LEVELS, "n_train": 240, "n_test": 60, "n_val": 30},
        "environment": {"factory": GAME, "max_turns": 8},
        "prompt": {"format": "chat"},
        "coevolver": {"kind": "none", "update_context": "keep"},
    }
    for section, values in overrides.items():
        settings[section] = {**settings.get(section, {}), **values}
    return tiny_config(tmp_path, **settings)


def _range(prompt: str) -> tuple[int, int]:
    low, high = RANGE.search(prompt).groups()
    return int(low), int(high)


def test_held_out_games_share_no_range_and_no_hidden_number_with_training(tmp_path):
    cfg = guessing_config(tmp_path)
    train, test = prepare_problems(cfg)  # written, read back through the problems schema
    val = pd.read_parquet(cfg.problems.data_dir / "val.parquet")
    splits = {"train": train, "test": test, "val": val}
    assert [len(splits[s]) for s in ("train", "test", "val")] == [240, 60, 30]
    ranges = [_range(p) for frame in splits.values() for p in frame["prompt"]]
    assert len(set(ranges)) == len(ranges)  # every game its own range: no held-out prompt is a training prompt
    secrets = {name: set(frame["answer"].astype(int)) for name, frame in splits.items()}
    assert not secrets["test"] & secrets["train"] and not secrets["val"] & (secrets["train"] | secrets["test"])
    for frame in splits.values():
        assert set(frame["family"]) == {"guess"} and set(frame["level"]) == set(LEVELS)
        for row in frame.itertuples():
            low, high = _range(row.prompt)
            assert 2 ** (row.level - 1) + 1 <= high - low + 1 <= 2**row.level and 1 <= low <= int(row.answer) <= high
    again = guessing_splits(LEVELS, 240, 60, 30, cfg.seed)
    assert again["test"]["prompt"].tolist() == test["prompt"].tolist()
    assert guessing_splits(LEVELS, 240, 60, 30, cfg.seed + 1)["test"]["prompt"].tolist() != test["prompt"].tolist()


def test_games_that_cannot_be_drawn_and_a_game_without_its_environment_are_refused(tmp_path):
    with pytest.raises(ValueError, match="no new level-1 game left for the train split"):
        guessing_splits([1], 1000, 10, 0, 0)  # 998 ranges of two numbers fit in 1..999
    with pytest.raises(ValueError, match="guess_levels must be distinct levels from 1 to 9"):
        guessing_splits([10], 10, 10, 0, 0)
    with pytest.raises(ConfigError, match="problems.source guessing needs environment.factory"):
        guessing_config(tmp_path, environment={"factory": None})
    cfg = guessing_config(tmp_path)
    train, _ = prepare_problems(cfg)
    with pytest.raises(ValueError, match="problems.source=guessing: the tiny policy has no warm start for it"):
        bootstrap_policy(cfg, train)
    assert not cfg.bootstrap_dir.exists()


def _play(cfg, row: dict) -> list[dict]:
    """The guessing game's expert (coevo/environments/experts.py: halving the range by the feedback)
    through the environment's own `guess` tool: each call an assistant turn, each result a tool turn,
    then the answer."""
    tools, _, observation = toolbox(cfg).open(row)
    assert observation is None and sorted(tools) == ["guess"]
    messages, results = [], []
    while (call := parse_tool_call(text := experts.guessing(row, results))) is not None:
        results.append(run_tool(call, tools, cfg.environment.tool_timeout_s).content)
        messages += [{"role": "assistant", "content": text}, {"role": "tool", "content": results[-1]}]
    return messages + [{"role": "assistant", "content": text}]


def test_halving_solves_every_held_out_game_and_the_run_judges_and_rewards_it(tmp_path):
    cfg = guessing_config(tmp_path)
    _, test = prepare_problems(cfg)
    rows = test.to_dict("records")
    played = [_play(cfg, row) for row in rows]
    for row, messages in zip(rows, played):
        assert len(messages) // 2 <= row["level"] + 1  # at most L + 1 guesses
    environments = [replay(cfg, row, messages) for row, messages in zip(rows, played)]  # as verification rebuilds them
    assert solved(environments) == [1.0] * len(rows)
    assert fewer_guesses(environments) == [1.0 / (len(m) // 2) for m in played]
    answers = [messages[-1]["content"] for messages in played]
    assert all(r.passed for r in family_verdicts(test, answers, cfg))  # the secret, stated in \boxed{}
    wrong = [f"The number is \\boxed{{{int(row['answer']) + 1}}}." for row in rows]
    assert not any(r.passed for r in family_verdicts(test, wrong, cfg))
    unsolved = [replay(cfg, row, []) for row in rows]  # no guess made
    assert solved(unsolved) == fewer_guesses(unsolved) == [0.0] * len(rows)


def test_a_wrong_guess_is_told_which_way_the_number_lies(tmp_path):
    cfg = guessing_config(tmp_path)
    tools, environment, _ = toolbox(cfg).open({"id": "g", "prompt": "from 10 to 20.", "answer": "15"})
    said = [run_tool(parse_tool_call(format_tool_call("guess", {"number": n})), tools, 5).content for n in (12, 18, 15)]
    assert said == ["12 is too low: the number is higher.", "18 is too high: the number is lower.", "15 is correct."]
    assert environment.guesses == [12, 18, 15] and environment.solved
    wrong_type = run_tool(parse_tool_call(format_tool_call("guess", {"number": "fifteen"})), tools, 5)
    assert wrong_type.error and "number" in wrong_type.content
