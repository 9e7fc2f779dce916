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
        "answer": pa.Column(str, _non_blank("empty answer"), description="The reference answer."),
        EXTRA: pa.Column(str, _json_object(), required=False, description="Optional: a user file's other fields, as one JSON object per row; reward plugins receive each as a column (coevo/rewards.py)."),
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
    arrow = PROBLEMS_ARROW.append(pyarrow.field(EXTRA, pyarrow.string())) if EXTRA in frame.columns else PROBLEMS_ARROW
    write_table(PROBLEMS_SCHEMA, arrow, path, frame)
