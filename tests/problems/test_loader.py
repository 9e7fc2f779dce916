"""User problem files: jsonl and parquet happy paths, errors naming file/row/field, deterministic split."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from coevo.problems.loader import ProblemsFileError, load_problem_file, split_problems
from schemas import validate_problems


def write_jsonl(path, rows: list) -> None:
    path.write_text("\n".join(row if isinstance(row, str) else json.dumps(row) for row in rows) + "\n")


def error(path) -> str:
    with pytest.raises(ProblemsFileError) as info:
        load_problem_file(path)
    return str(info.value)


def test_jsonl_happy_path_normalises_and_defaults(tmp_path):
    path = tmp_path / "p.jsonl"
    write_jsonl(
        path,
        [
            {"id": 1, "prompt": "What is 2+3?", "answer": 5, "source": "kept for reward plugins"},
            "",
            {"id": "q2", "prompt": "Half of 9?", "answer": "4.5", "family": "frac", "level": 2},
        ],
    )
    frame = load_problem_file(path)
    assert frame["id"].tolist() == ["1", "q2"]
    assert frame["answer"].tolist() == ["5", "4.5"]
    assert frame["family"].tolist() == ["math", "frac"]
    assert frame["level"].tolist() == [0, 2]
    assert list(frame.columns) == ["id", "family", "level", "prompt", "answer", "user_fields"]
    assert [json.loads(fields) for fields in frame["user_fields"]] == [{"source": "kept for reward plugins"}, {}]
    validate_problems(frame, "again")


def test_parquet_happy_path(tmp_path):
    path = tmp_path / "p.parquet"
    pd.DataFrame({"id": [10, 11], "prompt": ["1+1?", "2*3?"], "answer": [2, 6], "family": ["a", "m"]}).to_parquet(path)
    frame = load_problem_file(path)
    assert frame["id"].tolist() == ["10", "11"]
    assert frame["answer"].tolist() == ["2", "6"]
    assert frame["level"].tolist() == [0, 0]


def test_loader_writes_nothing(tmp_path):
    path = tmp_path / "p.jsonl"
    write_jsonl(path, [{"id": 1, "prompt": "x", "answer": 1}])
    load_problem_file(path)
    assert [p.name for p in tmp_path.iterdir()] == ["p.jsonl"]


def test_jsonl_missing_column(tmp_path):
    path = tmp_path / "p.jsonl"
    write_jsonl(path, [{"id": 1, "prompt": "x", "answer": 1}, {"id": 2, "prompt": "y"}])
    assert f"{path}: line 2, field 'answer': missing" in error(path)


def test_a_dataset_without_answers_loads_with_its_reference_column_for_the_reward_functions(tmp_path):
    """No row has an `answer` (TRL's reward functions read their own reference column): every answer
    is '' and the column reaches them by name; one row with an answer and one without is an error."""
    path = tmp_path / "p.jsonl"
    write_jsonl(path, [{"prompt": "1+1=", "solution": "2"}, {"prompt": "2*3=", "solution": "6"}])
    frame = load_problem_file(path)
    assert frame["answer"].tolist() == ["", ""] and frame["id"].tolist() == ["0", "1"]
    assert [json.loads(fields) for fields in frame["user_fields"]] == [{"solution": "2"}, {"solution": "6"}]
    write_jsonl(path, [{"prompt": "1+1=", "answer": "2"}, {"prompt": "2*3=", "solution": "6"}])
    assert f"{path}: line 2, field 'answer': missing" in error(path)


def test_column_missing_everywhere_is_one_error(tmp_path):
    path = tmp_path / "p.parquet"
    pd.DataFrame({"id": ["a", "b"], "question": ["x", "y"], "answer": ["1", "2"]}).to_parquet(path)
    message = error(path)
    assert f"{path}: field 'prompt': missing column" in message
    assert len(message.splitlines()) == 1


@pytest.mark.parametrize("bad", [1.5, [1], {"a": 1}, True, None])
def test_jsonl_wrong_type(tmp_path, bad):
    path = tmp_path / "p.jsonl"
    write_jsonl(path, [{"id": 1, "prompt": "x", "answer": 1}, {"id": 2, "prompt": "y", "answer": bad}])
    assert f"{path}: line 2, field 'answer': wrong type" in error(path)


def test_parquet_wrong_type_names_zero_based_row(tmp_path):
    path = tmp_path / "p.parquet"
    pd.DataFrame({"id": ["a", "b"], "prompt": ["x", "y"], "answer": [1.0, 2.0]}).to_parquet(path)
    message = error(path)
    assert f"{path}: row 0 (0-based), field 'answer': wrong type float" in message
    assert f"{path}: row 1 (0-based), field 'answer': wrong type float" in message


def test_parquet_null_is_wrong_type(tmp_path):
    path = tmp_path / "p.parquet"
    pd.DataFrame({"id": ["a", None], "prompt": ["x", "y"], "answer": ["1", "2"]}).to_parquet(path)
    assert f"{path}: row 1 (0-based), field 'id': wrong type null" in error(path)


@pytest.mark.parametrize("prompt", ["", "   ", "\n\t"])
def test_empty_prompt(tmp_path, prompt):
    path = tmp_path / "p.jsonl"
    write_jsonl(path, [{"id": 1, "prompt": "x", "answer": 1}, {"id": 2, "prompt": prompt, "answer": 2}])
    assert f"{path}: line 2, field 'prompt': empty prompt" in error(path)


def test_parquet_empty_prompt(tmp_path):
    path = tmp_path / "p.parquet"
    pd.DataFrame({"id": ["a", "b"], "prompt": ["x", " "], "answer": ["1", "2"]}).to_parquet(path)
    assert f"{path}: row 1 (0-based), field 'prompt': empty prompt" in error(path)


def test_duplicate_id_names_both_rows(tmp_path):
    path = tmp_path / "p.jsonl"
    write_jsonl(path, [{"id": 7, "prompt": "x", "answer": 1}, "", {"id": "7", "prompt": "y", "answer": 2}])
    assert f"{path}: line 3, field 'id': duplicate id '7' (first at line 1)" in error(path)


def test_parquet_duplicate_id(tmp_path):
    path = tmp_path / "p.parquet"
    pd.DataFrame({"id": ["a", "b", "a"], "prompt": ["x", "y", "z"], "answer": ["1", "2", "3"]}).to_parquet(path)
    assert f"{path}: row 2 (0-based), field 'id': duplicate id 'a' (first at row 0 (0-based))" in error(path)


def test_invalid_json_and_all_errors_in_one_message(tmp_path):
    path = tmp_path / "p.jsonl"
    write_jsonl(
        path,
        [
            {"id": 1, "prompt": "x", "answer": 1},
            "{not json",
            {"id": 2, "prompt": " ", "answer": 2},
            {"id": 3, "prompt": "z", "answer": 3, "level": -1},
            "[1, 2]",
        ],
    )
    message = error(path)
    assert f"{path}: line 2: invalid JSON" in message
    assert f"{path}: line 3, field 'prompt': empty prompt" in message
    assert f"{path}: line 4, field 'level'" in message
    assert f"{path}: line 5: expected a JSON object" in message


def test_unsupported_extension_and_empty_file(tmp_path):
    csv = tmp_path / "p.csv"
    csv.write_text("id,prompt,answer\n")
    assert str(csv) in error(csv)
    empty = tmp_path / "e.jsonl"
    empty.write_text("\n\n")
    assert "no problems" in error(empty)


def test_errors_are_value_errors():
    assert issubclass(ProblemsFileError, ValueError)


def frame_of(n: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "id": [f"p{i}" for i in range(n)],
            "family": "math",
            "level": 0,
            "prompt": [f"q{i}" for i in range(n)],
            "answer": "1",
        }
    )


def test_split_is_deterministic_disjoint_and_sized():
    frame = frame_of(50)
    train, test = split_problems(frame, 0.2, seed=1)
    again = split_problems(frame, 0.2, seed=1)
    other = split_problems(frame, 0.2, seed=2)
    pd.testing.assert_frame_equal(train, again[0])
    pd.testing.assert_frame_equal(test, again[1])
    assert not test.equals(other[1])
    assert len(test) == 10 and len(train) == 40
    assert not set(train["id"]) & set(test["id"])
    assert train["id"].tolist() == sorted(train["id"], key=lambda s: int(s[1:]))  # original order kept


def test_split_keeps_at_least_one_on_each_side():
    train, test = split_problems(frame_of(2), 0.01, seed=0)
    assert len(train) == 1 and len(test) == 1
    with pytest.raises(ValueError, match="need at least 2 distinct problems to split; got 1"):
        split_problems(frame_of(1), 0.5, seed=0)
    with pytest.raises(
        ValueError,
        match=r"test_fraction must be in \(0, 1\), val_fraction in \[0, 1\) and their sum < 1; got 1\.0, 0\.0",
    ):
        split_problems(frame_of(5), 1.0, seed=0)
