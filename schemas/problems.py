"""Pandera schema of the problems table (train/test splits) and its validated read/write."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pandera.pandas as pa
import pyarrow

from schemas.errors import read_table, validate_frame, write_table


def _non_blank(error: str) -> pa.Check:
    return pa.Check(lambda s: s.str.strip().str.len() > 0, error=error)


PROBLEMS_SCHEMA = pa.DataFrameSchema(
    {
        "id": pa.Column(str, unique=True, description="Stable problem id."),
        "family": pa.Column(str, description="Problem family (add, sub, mul, or a user label)."),
        "level": pa.Column(int, pa.Check.ge(0), description="Difficulty level (operand digits for arithmetic)."),
        "prompt": pa.Column(str, _non_blank("empty prompt"), description="The bare question shown to the policy."),
        "answer": pa.Column(str, _non_blank("empty answer"), description="The reference answer."),
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
    write_table(PROBLEMS_SCHEMA, PROBLEMS_ARROW, path, frame)
