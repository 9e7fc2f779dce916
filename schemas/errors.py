"""Turn pandera's lazy failure report into one readable `SchemaError`, plus shared read/write helpers.

A message has one line per failure, each naming the source (file path or stage name), the row (the
frame's index label) and the field (column) and the check, e.g.
`data/x.parquet: row 3, field 'prompt': empty prompt`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pandera.pandas as pa
import pyarrow as pyarrow_lib

from coevo.io import atomic_path

MAX_LINES = 50  # failures listed in one message; the rest are counted


class SchemaError(ValueError):
    """A table did not match its schema; the message names the source, rows, fields and checks."""


def validate_frame(schema: pa.DataFrameSchema, frame: pd.DataFrame, source: str) -> pd.DataFrame:
    """Validate `frame` against `schema` lazily (all failures at once); raise SchemaError on failure."""
    if not isinstance(frame, pd.DataFrame):
        raise SchemaError(f"{source}: expected a pandas DataFrame, got {type(frame).__name__}")
    try:
        return schema.validate(frame, lazy=True)
    except pa.errors.SchemaErrors as exc:
        raise SchemaError(format_failures(exc.failure_cases, source)) from exc
    except pa.errors.SchemaError as exc:  # raised eagerly by some checks even under lazy=True
        raise SchemaError(f"{source}: {exc}") from exc


def format_failures(cases: pd.DataFrame, source: str) -> str:
    """One line per failure; a frame-wide check that flags several columns of one row is one line."""
    entries: list[tuple[object, list[str], object]] = []  # (index, columns, case)
    frame_wide: dict[tuple, list[str]] = {}
    for case in cases.itertuples(index=False):
        index = None if _is_missing(case.index) else case.index
        column = None if _is_missing(case.column) else str(case.column)
        if case.schema_context == "DataFrameSchema" and index is not None and column is not None:
            key = (index, str(case.check))
            if key in frame_wide:
                frame_wide[key].append(column)
                continue
            frame_wide[key] = [column]
            entries.append((index, frame_wide[key], case))
        else:
            entries.append((index, [column] if column is not None else [], case))
    lines = [f"{source}: {_describe(case, index, _named(columns, case))}" for index, columns, case in entries]
    if len(lines) > MAX_LINES:
        lines = lines[:MAX_LINES] + [f"{source}: ... and {len(lines) - MAX_LINES} more failures"]
    return "\n".join(lines)


def _named(columns: list[str], case) -> list[str]:
    """A frame-wide check is reported by pandera on every column; keep those its message names."""
    if case.schema_context != "DataFrameSchema":
        return columns
    named = [c for c in columns if re.search(rf"(?<!\w){re.escape(c)}(?!\w)", str(case.check))]
    return named or columns


def _describe(case, index, columns: list[str]) -> str:
    check, value = str(case.check), case.failure_case
    if check == "column_in_schema":
        return f"field '{value}': unexpected column (the schema is strict)"
    if check == "column_in_dataframe":
        return f"field '{value}': missing column"
    where = f"row {index}, " if index is not None else ""
    if not columns:
        field = "frame"
    else:
        field = ("field " if len(columns) == 1 else "fields ") + ", ".join(f"'{c}'" for c in columns)
    if check == "not_nullable":
        return f"{where}{field}: null value"
    if check == "field_uniqueness":
        return f"{where}{field}: duplicate value {value!r}"
    if check.startswith("dtype("):
        expected = check[len("dtype(") : -1].strip("'\"")
        if index is None:
            return f"{field}: wrong dtype {value}, expected {expected}"
        return f"{where}{field}: wrong type, {_short(value)} is not {expected}"
    if len(columns) > 1:  # frame-wide check: the values are spread over several fields
        return f"{where}{field}: {check}"
    return f"{where}{field}: {check} (got {_short(value)})"


def _short(value: object, limit: int = 80) -> str:
    text = repr(value.tolist() if hasattr(value, "tolist") else value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def read_table(
    schema: pa.DataFrameSchema, path: str | Path, upgrade: Callable[[pd.DataFrame], pd.DataFrame] | None = None
) -> pd.DataFrame:
    """Read a parquet file and validate it with source=path; `upgrade` first adds the columns an
    older table lacks."""
    try:
        frame = pd.read_parquet(path)
    except pyarrow_lib.ArrowException as exc:
        raise SchemaError(f"{path}: cannot read parquet: {exc}") from exc
    return validate_frame(schema, upgrade(frame) if upgrade else frame, str(path))


def write_table(
    schema: pa.DataFrameSchema, arrow_schema: pyarrow_lib.Schema, path: str | Path, frame: pd.DataFrame
) -> None:
    """Validate first (nothing is written on failure), then write atomically with a fixed arrow schema.

    The explicit arrow schema keeps every shard's column types identical (an all-empty list column
    would otherwise be inferred as list<null>).
    """
    validate_frame(schema, frame, str(path))
    with atomic_path(path) as tmp:
        frame.to_parquet(tmp, index=False, schema=arrow_schema)
