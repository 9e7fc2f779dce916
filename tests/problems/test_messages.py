"""Conversational problems: the `messages` column (TRL's format) in user files, and its errors."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow
import pyarrow.parquet
import pytest

from coevo.problems.loader import ProblemsFileError, load_problem_file
from schemas.problems import read_problems, write_problems


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_messages_load_beside_prompt_and_round_trip(tmp_path):
    turns = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "What is 3+4?"}]
    path = write_jsonl(
        tmp_path / "p.jsonl", [{"id": 1, "prompt": "2+2=", "answer": 4}, {"id": 2, "messages": turns, "answer": "7"}]
    )
    frame = load_problem_file(path)
    assert list(frame["prompt"]) == ["2+2=", "What is 3+4?"]  # a conversation's prompt is its last user turn
    assert frame["messages"].iloc[0] == "" and json.loads(frame["messages"].iloc[1]) == turns
    write_problems(tmp_path / "s.parquet", frame)
    pd.testing.assert_frame_equal(read_problems(tmp_path / "s.parquet"), frame)


def test_parquet_messages_load(tmp_path):
    table = pyarrow.table({"id": ["a"], "answer": ["1"], "messages": [[{"role": "user", "content": "0+1?"}]]})
    pyarrow.parquet.write_table(table, tmp_path / "p.parquet")
    assert load_problem_file(tmp_path / "p.parquet")["prompt"].tolist() == ["0+1?"]


@pytest.mark.parametrize(
    ("messages", "error"),
    [
        ([], "line 1, field 'messages': expected a non-empty list"),
        ("hi", "line 1, field 'messages': expected a non-empty list of {role, content} objects, got str"),
        ([{"role": "bot", "content": "x"}], "line 1, field 'messages': turn 0: unknown role 'bot'"),
        ([{"role": "user", "content": " "}], "line 1, field 'messages': turn 0: empty content"),
        (
            [{"role": "user"}],
            "line 1, field 'messages': turn 0: expected an object with exactly the keys role and content",
        ),
        (
            [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
            "line 1, field 'messages': the last turn is 'assistant'",
        ),
    ],
)
def test_bad_messages_name_file_row_and_field(tmp_path, messages, error):
    path = write_jsonl(tmp_path / "bad.jsonl", [{"id": 1, "messages": messages, "answer": "7"}])
    with pytest.raises(ProblemsFileError) as info:
        load_problem_file(path)
    assert f"{path}: {error}" in str(info.value)
    assert "field 'prompt'" not in str(info.value)  # messages stand in for a missing prompt
