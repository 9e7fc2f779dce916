"""Pandera schema of code problems (HumanEval layout, decoded) and its validated read/write.

Code problems cross the prepare -> rollout/verify boundary inside the ordinary problems table
(schemas/problems.py): `answer` holds the JSON of {entry_point, tests, solution} (see
coevo/code/problems.py). This schema checks the decoded form: every problem has a non-blank prompt
and entry point and at least one hidden test; `solution` (a reference completion) may be empty.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pandera.pandas as pa
import pyarrow

from schemas.errors import read_table, validate_frame, write_table


def _non_blank(error: str) -> pa.Check:
    return pa.Check(lambda s: s.str.strip().str.len() > 0, error=error)


def _tests_ok(value: object) -> bool:
    return (
        isinstance(value, (list, tuple, np.ndarray))
        and len(value) > 0
        and all(isinstance(t, str) and t.strip() for t in value)
    )


CODE_PROBLEMS_SCHEMA = pa.DataFrameSchema(
    {
        "id": pa.Column(str, unique=True, description="Stable problem id (HumanEval task_id)."),
        "family": pa.Column(str, description="humaneval, code (a user file) or code-<op> (synthetic)."),
        "level": pa.Column(int, pa.Check.ge(0), description="Difficulty level (0 when unknown)."),
        "prompt": pa.Column(
            str,
            _non_blank("empty prompt"),
            description="Code prefix shown to the coder; program = prompt + completion.",
        ),
        "entry_point": pa.Column(str, _non_blank("empty entry_point"), description="Name of the function under test."),
        "tests": pa.Column(
            object,
            pa.Check(_tests_ok, element_wise=True, error="tests must be a non-empty list of non-blank strings"),
            description="Hidden ground-truth test snippets, run in the program's namespace.",
        ),
        "solution": pa.Column(str, description="Reference completion (canonical solution); may be empty."),
    },
    strict=True,
    name="code_problems",
)

CODE_PROBLEMS_ARROW = pyarrow.schema(
    [
        ("id", pyarrow.string()),
        ("family", pyarrow.string()),
        ("level", pyarrow.int64()),
        ("prompt", pyarrow.string()),
        ("entry_point", pyarrow.string()),
        ("tests", pyarrow.list_(pyarrow.string())),
        ("solution", pyarrow.string()),
    ]
)


def validate_code_problems(frame: pd.DataFrame, source: str) -> pd.DataFrame:
    return validate_frame(CODE_PROBLEMS_SCHEMA, frame, source)


def read_code_problems(path: str | Path) -> pd.DataFrame:
    return read_table(CODE_PROBLEMS_SCHEMA, path)


def write_code_problems(path: str | Path, frame: pd.DataFrame) -> None:
    write_table(CODE_PROBLEMS_SCHEMA, CODE_PROBLEMS_ARROW, path, frame)
