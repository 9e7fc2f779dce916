"""Schemas: valid frames pass, failures name source/row/field, parquet round trips, writes are all-or-nothing."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from schemas import (
    SchemaError,
    read_problems,
    read_rewards,
    read_rollouts,
    validate_problems,
    validate_rewards,
    validate_rollouts,
    write_problems,
    write_rewards,
    write_rollouts,
)


def problems() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "id": ["add-1-000000", "add-1-000001", "sub-2-000000"],
            "family": ["add", "add", "sub"],
            "level": [1, 1, 2],
            "prompt": ["1+2=", "3+4=", "12-34="],
            "answer": ["3", "7", "-22"],
        }
    )


def rollouts() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "rollout_id": ["r0", "r1", "r2"],
            "iteration": [0, 0, 1],
            "problem_id": ["p0", "p0", "p1"],
            "family": ["add", "add", "mul"],
            "variant": ["solo", "probe", "base"],
            "probe_skill": ["", "s1", ""],
            "skills": [[], ["s1"], ["s0", "s2"]],
            "question": ["1+2=", "1+2=", "3*4="],
            "prompt": ["1+2=", "s1\n1+2=", "s0\ns2\n3*4="],
            "completion": ["3", "4", "12"],
            "prompt_ids": [[1, 2, 3], [5, 1, 2, 3], [4, 4, 4]],
            "completion_ids": [[7], [8], [9, 10, 11]],
            "sampling_logprobs": [[-0.1], [-2.0], [-0.5, 0.0, -0.2]],
            "finished": [True, True, False],
            "policy_version": ["iter_0000", "iter_0000", "iter_0001"],
            "turns": [1, 1, 2],
            "tool_calls": [0, 0, 1],
            "tool_errors": [0, 0, 0],
            "truncated": [False, False, False],
            "messages": ["", "", json.dumps([{"role": "assistant", "content": "c"}, {"role": "tool", "content": "1"}])],
            "policy_mask": [[], [], [1, 0, 1]],
            "role": ["solver", "solver", "tester"],
        }
    )


def rewards() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "rollout_id": ["r0", "r1"],
            "iteration": [0, 0],
            "problem_id": ["p0", "p0"],
            "reward": [1.0, 0.0],
            "passed": [True, False],
            "verifier": ["math_exact", "math_exact"],
            "details": ["extracted=3 expected=3", "extracted=4 expected=3"],
        }
    )


def failure(call) -> str:
    with pytest.raises(SchemaError) as info:
        call()
    return str(info.value)


def test_valid_frames_pass():
    for validate, frame in [
        (validate_problems, problems()),
        (validate_rollouts, rollouts()),
        (validate_rewards, rewards()),
    ]:
        assert validate(frame, "stage").equals(frame)


def test_a_rollouts_table_from_before_episodes_reads_as_one_turn_samples(tmp_path):
    old = rollouts().drop(
        columns=["turns", "tool_calls", "tool_errors", "truncated", "messages", "policy_mask", "role"]
    )
    old.to_parquet(tmp_path / "old.parquet", index=False)
    back = read_rollouts(tmp_path / "old.parquet")
    assert list(back["turns"]) == [1, 1, 1] and list(back["tool_calls"]) == [0, 0, 0]
    assert list(back["messages"]) == ["", "", ""] and [list(m) for m in back["policy_mask"]] == [[], [], []]
    assert list(back["role"]) == ["solver"] * 3  # a table from before roles holds the solver's samples


@pytest.mark.parametrize(
    "column, value, says",
    [
        ("policy_mask", [1, 0], "len(policy_mask) is neither 0 nor len(completion_ids)"),
        ("messages", '[{"role": "tool"}]', "not a JSON list of {role, content} turns"),
        ("turns", 0, "greater_than_or_equal_to(1)"),
    ],
)
def test_a_bad_episode_column_names_the_row_and_field(column, value, says):
    frame = rollouts()
    frame.at[2, column] = value
    message = failure(lambda: validate_rollouts(frame, "runs/r/rollouts/iter_0001.parquet"))
    assert "runs/r/rollouts/iter_0001.parquet" in message and says in message


def test_schema_error_is_value_error():
    assert issubclass(SchemaError, ValueError)


def test_empty_prompt_names_source_row_and_field():
    frame = problems()
    frame.loc[2, "prompt"] = "   "
    message = failure(lambda: validate_problems(frame, "data/x.parquet"))
    assert "data/x.parquet: row 2, field 'prompt': empty prompt" in message


def test_problem_failures_are_all_reported():
    frame = problems()
    frame.loc[1, "id"] = "add-1-000000"
    frame.loc[0, "level"] = -1
    frame.loc[2, "answer"] = "  "  # '' is a dataset without reference answers; whitespace is a mistake
    frame["extra"] = 1
    message = failure(lambda: validate_problems(frame, "gen"))
    assert "gen: row 0, field 'id': duplicate value 'add-1-000000'" in message
    assert "gen: row 1, field 'id': duplicate value" in message
    assert "gen: row 0, field 'level'" in message
    assert "gen: row 2, field 'answer': blank answer (whitespace only)" in message
    assert "gen: field 'extra': unexpected column" in message


def test_missing_column_and_wrong_dtype():
    frame = problems().drop(columns=["answer"]).assign(level=[1.0, 1.0, 2.0])
    message = failure(lambda: validate_problems(frame, "gen"))
    assert "field 'answer': missing column" in message
    assert "field 'level': wrong dtype float64" in message


def test_wrong_element_type_names_row():
    frame = problems().astype({"id": object})
    frame.loc[1, "id"] = 7
    message = failure(lambda: validate_problems(frame, "gen"))
    assert "row 1, field 'id': wrong type" in message


def test_rollout_failures_name_row_and_field():
    frame = rollouts()
    frame.at[0, "variant"] = "teacher"
    frame.at[1, "sampling_logprobs"] = [0.3]
    frame.at[2, "sampling_logprobs"] = [-0.5]  # one logprob for two completion tokens
    frame.at[1, "skills"] = ["s1", 3]
    frame.at[2, "prompt_ids"] = [1.5, 2.0]
    message = failure(lambda: validate_rollouts(frame, "runs/r/rollouts/iter_0001.parquet"))
    source = "runs/r/rollouts/iter_0001.parquet"
    assert f"{source}: row 0, field 'variant'" in message
    assert f"{source}: row 1, field 'sampling_logprobs': logprob > 0" in message
    assert (
        f"{source}: row 2, fields 'completion_ids', 'sampling_logprobs': len(sampling_logprobs) != len(completion_ids)"
        in message
    )
    assert f"{source}: row 1, field 'skills': not a list of str" in message
    assert f"{source}: row 2, field 'prompt_ids': not a list of int" in message


def test_rollout_nan_logprob_and_non_list_fail():
    frame = rollouts()
    frame.at[0, "sampling_logprobs"] = [float("nan")]
    frame.at[1, "completion_ids"] = "8"
    message = failure(lambda: validate_rollouts(frame, "stage"))
    assert "row 0, field 'sampling_logprobs': logprob > 0 or NaN" in message
    assert "row 1, field 'completion_ids': not a list of int" in message


def test_rewards_checks():
    frame = rewards()
    frame.loc[1, "rollout_id"] = "r0"
    message = failure(lambda: validate_rewards(frame.assign(passed=["yes", "no"]), "verify"))
    assert "verify: row 1, field 'rollout_id': duplicate value 'r0'" in message
    assert "field 'passed': wrong dtype" in message


def test_rollouts_round_trip_with_list_columns(tmp_path):
    path = tmp_path / "rollouts.parquet"
    write_rollouts(path, rollouts())
    back = read_rollouts(path)
    assert isinstance(back.loc[2, "skills"], np.ndarray)  # lists come back as arrays and still validate
    assert list(back.loc[2, "skills"]) == ["s0", "s2"]
    assert list(back.loc[0, "skills"]) == []
    assert list(back.loc[2, "completion_ids"]) == [9, 10, 11]
    assert back.loc[2, "sampling_logprobs"].tolist() == [-0.5, 0.0, -0.2]
    assert back["finished"].tolist() == [True, True, False]
    validate_rollouts(back, "again")


def test_all_empty_list_column_keeps_its_type(tmp_path):
    import pyarrow.parquet as pq

    frame = rollouts().assign(skills=[[], [], []])
    write_rollouts(tmp_path / "r.parquet", frame)
    assert str(pq.read_schema(tmp_path / "r.parquet").field("skills").type) == "list<element: string>"


def test_problems_and_rewards_round_trip(tmp_path):
    write_problems(tmp_path / "p.parquet", problems())
    write_rewards(tmp_path / "w.parquet", rewards())
    pd.testing.assert_frame_equal(
        read_problems(tmp_path / "p.parquet"), validate_problems(problems(), "x"), check_dtype=False
    )
    assert read_rewards(tmp_path / "w.parquet")["reward"].tolist() == [1.0, 0.0]


@pytest.mark.parametrize(
    ("write", "frame"),
    [
        (write_problems, problems().assign(prompt=["", "x", "y"])),
        (write_rollouts, rollouts().assign(iteration=[-1, 0, 0])),
        (write_rewards, rewards().drop(columns=["details"])),
    ],
)
def test_write_writes_nothing_on_invalid_input(tmp_path, write, frame):
    (tmp_path / "keep.txt").write_text("x")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    with pytest.raises(SchemaError) as info:
        write(tmp_path / "out" / "table.parquet", frame)
    assert str(tmp_path / "out" / "table.parquet") in str(info.value)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_read_validates_with_path_as_source(tmp_path):
    path = tmp_path / "bad.parquet"
    problems().assign(prompt=["1+2=", " ", "x"]).to_parquet(path, index=False)  # written around the schema
    message = failure(lambda: read_problems(path))
    assert f"{path}: row 1, field 'prompt': empty prompt" in message


def test_read_non_parquet_is_schema_error(tmp_path):
    path = tmp_path / "junk.parquet"
    path.write_text("not parquet")
    assert str(path) in failure(lambda: read_problems(path))
