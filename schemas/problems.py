"""Pandera schema of the problems table (train/test splits) and its validated read/write."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pandera.pandas as pa
import pyarrow

from schemas.errors import read_table, validate_frame, write_table


def _non_blank(error: str) -> pa.Check:
    return pa.Check(lambda s: s.str.strip().str.len() > 0, error=error)


EXTRA = "user_fields"  # the optional column of a user file's other fields
MESSAGES = "messages"  # the optional column of conversational problems (TRL's format), as JSON text


def _conversation() -> pa.Check:
    def check(text: str) -> bool:
        if text == "":
            return True
        try:
            turns = json.loads(text)
        except ValueError:
            return False
        return (
            isinstance(turns, list)
            and bool(turns)
            and all(isinstance(t, dict) and {"role", "content"} == set(t) for t in turns)
        )

    return pa.Check(check, element_wise=True, error="not a JSON list of {role, content} turns (or empty)")


def _json_object() -> pa.Check:
    def check(text: str) -> bool:
        try:
            return isinstance(json.loads(text), dict)
        except ValueError:
            return False

    return pa.Check(check, element_wise=True, error="not a JSON object")


PROBLEMS_SCHEMA = pa.DataFrameSchema(
    {
        "id": pa.Column(str, unique=True, description="Stable problem id."),
        "family": pa.Column(str, description="Problem family (add, sub, mul, or a user label)."),
        "level": pa.Column(int, pa.Check.ge(0), description="Difficulty level (operand digits for arithmetic)."),
        "prompt": pa.Column(str, _non_blank("empty prompt"), description="The bare question shown to the policy."),
        "answer": pa.Column(
            str,
            pa.Check(lambda s: (s == "") | (s.str.strip().str.len() > 0), error="blank answer (whitespace only)"),
            description=(
                "The reference answer; '' for a user dataset without an `answer` column, whose problems the run's "
                "reward functions judge (their reference column, e.g. `solution`, reaches them by name)."
            ),
        ),
        MESSAGES: pa.Column(
            str,
            _conversation(),
            required=False,
            description=(
                "Optional: the problem as a conversation (TRL's conversational format: JSON list of {role, content}, "
                "ending in the user's question), or empty for a plain problem; rendered with the chat template "
                "(prompt.format: chat)."
            ),
        ),
        EXTRA: pa.Column(
            str,
            _json_object(),
            required=False,
            description=(
                "Optional: a user file's other fields, as one JSON object per row; reward plugins receive each as a "
                "column (coevo/verification/rewards.py)."
            ),
        ),
    },
    strict=True,
    name="problems",
)

PROBLEMS_ARROW = pyarrow.schema(
    [
        ("id", pyarrow.string()),
        ("family", pyarrow.string()),
        ("level", pyarrow.int64()),
        ("prompt", pyarrow.string()),
        ("answer", pyarrow.string()),
    ]
)


def validate_problems(frame: pd.DataFrame, source: str) -> pd.DataFrame:
    return validate_frame(PROBLEMS_SCHEMA, frame, source)


def read_problems(path: str | Path) -> pd.DataFrame:
    return read_table(PROBLEMS_SCHEMA, path)


def write_problems(path: str | Path, frame: pd.DataFrame) -> None:
    arrow = PROBLEMS_ARROW
    for optional in (MESSAGES, EXTRA):
        arrow = arrow.append(pyarrow.field(optional, pyarrow.string())) if optional in frame.columns else arrow
    write_table(PROBLEMS_SCHEMA, arrow, path, frame)
