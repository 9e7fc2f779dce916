"""Load a user's math problem file (jsonl or parquet) into a problems frame, and split it train/test.

Required fields: id, prompt, answer; optional: family (default "math"), level (default 0), messages
(TRL's conversational format: a list of {role, content}, roles system/user/assistant, ending in the
user's question; `prompt` may then be omitted and is the last user turn; rendered under
`prompt.format: chat` only, coevo/prompting.py). id and
answer may be int or str and are normalised to str; any other type is an error. Other fields are
kept, as one JSON object per row in the `user_fields` column (only when some row has one), and reach
reward plugins as columns of their own (coevo/rewards.py); `completions` and `prompts` are reserved
for the plugins' own arguments. Every problem found is reported in one `ProblemsFileError`, naming the file, the row (jsonl:
1-based line number; parquet: 0-based row index) and the field. The loader writes nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow
import pyarrow.parquet

from coevo.prompting import validate_messages
from schemas.problems import EXTRA, MESSAGES, validate_problems

REQUIRED = ("id", "prompt", "answer")
DEFAULTS = {"family": "math", "level": 0}
KNOWN = {*REQUIRED, *DEFAULTS, MESSAGES}  # fields of the problems table; the others go to its `user_fields` column
RESERVED = {"completions", "prompts"}  # reward plugins' own arguments (coevo/rewards.py)
MAX_LINES = 50  # errors listed in one message; the rest are counted


class ProblemsFileError(ValueError):
    """A problem file could not be read; the message names the file, rows and fields."""


def load_problem_file(path: str | Path) -> pd.DataFrame:
    """Read and check a .jsonl or .parquet problem file; returns a frame valid under the problems schema."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        records, rows, errors = _read_jsonl(path)
    elif suffix == ".parquet":
        records, rows, errors = _read_parquet(path)
    else:
        raise ProblemsFileError(f"{path}: unsupported extension {path.suffix!r} (expected .jsonl or .parquet)")
    errors += _missing_columns(records, rows)
    frame, row_errors = _normalise(records, rows)
    extras, extra_errors = _extras(records, rows)
    errors += row_errors + extra_errors
    if not records and not errors:
        errors.append("no problems in file")
    if errors:
        raise ProblemsFileError(_message(path, errors))
    if any(extra != "{}" for extra in extras):
        frame[EXTRA] = extras
    if any(MESSAGES in record for record in records):
        frame[MESSAGES] = [json.dumps(record[MESSAGES], ensure_ascii=False) if MESSAGES in record else "" for record in records]
    return validate_problems(frame, source=str(path))


def split_problems(frame: pd.DataFrame, test_fraction: float, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Train and test of `frame` (no validation split); see `split_held_out`."""
    splits = split_held_out(frame, test_fraction, 0.0, seed)
    return splits["train"], splits["test"]


def split_held_out(frame: pd.DataFrame, test_fraction: float, val_fraction: float, seed: int) -> dict[str, pd.DataFrame]:
    """{"train", "val", "test"}: round(groups * fraction) content groups held out for test (at least
    1) and for validation, at least one group left for training, by seed.

    A content group is the rows sharing a content key (coevo/problems/heldout.py: normalised prompt
    text, arithmetic operands up to commutation, code signature + docstring), so a problem written
    twice in the file lands in one split only. Every split keeps the file's row order.
    """
    from coevo.problems.heldout import keys_of

    if not 0 < test_fraction < 1 or not 0 <= val_fraction < 1 or test_fraction + val_fraction >= 1:
        raise ValueError(f"test_fraction must be in (0, 1), val_fraction in [0, 1) and their sum < 1; got {test_fraction}, {val_fraction}")
    group = pd.factorize(pd.Series(keys_of(frame), dtype=object))[0]  # [rows] content group of each row
    n_groups = int(group.max()) + 1 if len(frame) else 0
    if n_groups < 2:
        raise ValueError(f"need at least 2 distinct problems to split; got {n_groups} (in {len(frame)} rows)")
    n_test = min(n_groups - 1, max(1, round(n_groups * test_fraction)))
    n_val = min(n_groups - 1 - n_test, round(n_groups * val_fraction))
    order = np.random.default_rng(seed & (2**64 - 1)).permutation(n_groups)
    where = np.zeros(n_groups, dtype=np.int8)  # 0 train, 1 test, 2 val
    where[order[:n_test]], where[order[n_test : n_test + n_val]] = 1, 2
    side = where[group]  # [rows]
    return {name: frame[side == code].reset_index(drop=True) for name, code in (("train", 0), ("test", 1), ("val", 2))}


def drop_seen(train: pd.DataFrame, held: pd.DataFrame, source: str) -> tuple[pd.DataFrame, int]:
    """`train` without the rows whose content key a held-out problem has (a user's own test file
    that repeats training problems: the test file is kept whole, training loses the repeats), and
    the count dropped; an error when nothing would be left to train on."""
    from coevo.problems.heldout import keys_of

    held_keys = set(keys_of(held))
    seen = np.array([key in held_keys for key in keys_of(train)], dtype=bool)
    if seen.all():
        raise ValueError(f"{source}: every training problem ({len(train)}) is also in the held-out file; nothing left to train on")
    return train[~seen].reset_index(drop=True), int(seen.sum())


def _read_jsonl(path: Path) -> tuple[list[dict], list[str], list[str]]:
    """Records, their row labels ("line N") and parse errors."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ProblemsFileError(f"{path}: cannot read: {exc}") from exc
    numbered, errors = jsonl_objects(text)
    return [record for _, record in numbered], [f"line {number}" for number, _ in numbered], errors


def jsonl_objects(text: str) -> tuple[list[tuple[int, dict]], list[str]]:
    """(line number, JSON object) per non-blank line, and one error per line that is not an object."""
    objects, errors = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            errors.append(f"line {number}: invalid JSON: {exc.msg} (column {exc.colno})")
            continue
        if not isinstance(record, dict):
            errors.append(f"line {number}: expected a JSON object, got {type(record).__name__}")
            continue
        objects.append((number, record))
    return objects, errors


def _read_parquet(path: Path) -> tuple[list[dict], list[str], list[str]]:
    """Records as Python values (ints stay ints, nulls are None), row labels ("row N (0-based)"), no errors."""
    try:
        records = pyarrow.parquet.read_table(path).to_pylist()
    except (OSError, pyarrow.ArrowException) as exc:
        raise ProblemsFileError(f"{path}: cannot read parquet: {exc}") from exc
    return records, [f"row {i} (0-based)" for i in range(len(records))], []


def _missing_columns(records: list[dict], rows: list[str]) -> list[str]:
    """A required field absent from every row is one error; absent from some rows, one per row."""
    errors = []
    for field in REQUIRED:
        lacking = [row for record, row in zip(records, rows) if field not in record and not (field == "prompt" and MESSAGES in record)]
        if records and len(lacking) == len(records):
            errors.append(f"field '{field}': missing column (absent from every row)")
        else:
            errors += [f"{row}, field '{field}': missing" for row in lacking]
    return errors


def _extras(records: list[dict], rows: list[str]) -> tuple[list[str], list[str]]:
    """Each record's fields beyond the problems table's, as a JSON object, and one error per reserved
    or non-JSON field."""
    extras, errors = [], []
    for record, row in zip(records, rows):
        extra = {key: value for key, value in record.items() if key not in KNOWN}
        errors += [f"{row}, field '{key}': reserved (reward functions receive their own {key} under this name)" for key in RESERVED & set(extra)]
        try:
            extras.append(json.dumps(extra, ensure_ascii=False))
        except (TypeError, ValueError) as exc:
            bad = [key for key, value in extra.items() if not _json_ok(value)]
            errors += [f"{row}, field '{key}': {type(extra[key]).__name__} value is not JSON ({exc})" for key in bad]
    return extras, errors


def _json_ok(value: object) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _normalise(records: list[dict], rows: list[str]) -> tuple[pd.DataFrame, list[str]]:
    """Type-check and normalise each record; report wrong types, empty values and duplicate ids."""
    out: dict[str, list] = {"id": [], "family": [], "level": [], "prompt": [], "answer": []}
    errors: list[str] = []
    first_row_of: dict[str, str] = {}
    for record, row in zip(records, rows):
        values, problems = _normalise_record(record)
        errors += [f"{row}, field '{field}': {problem}" for field, problem in problems]
        pid = values["id"]
        if pid is not None and "id" not in dict(problems):
            if pid in first_row_of:
                errors.append(f"{row}, field 'id': duplicate id {pid!r} (first at {first_row_of[pid]})")
            else:
                first_row_of[pid] = row
        for key in out:
            out[key].append(values[key])
    if errors:
        return pd.DataFrame(), errors
    frame = pd.DataFrame(out, columns=list(out)).astype(
        {"id": str, "family": str, "level": np.int64, "prompt": str, "answer": str}
    )
    return frame, errors


def _normalise_record(record: dict) -> tuple[dict, list[tuple[str, str]]]:
    """Normalised values of one record and its (field, problem) list; missing required fields are skipped."""
    values: dict[str, object] = {}
    problems: list[tuple[str, str]] = []
    for field in ("id", "answer"):
        value = record.get(field)
        if field in record and not _is_int(value) and not isinstance(value, str):
            problems.append((field, f"wrong type {_type_name(value)} (expected int or str)"))
        elif field in record and not str(value).strip():
            problems.append((field, f"empty {field}"))
        values[field] = str(value) if field in record else None
    if MESSAGES in record:
        problems += [(MESSAGES, problem) for problem in validate_messages(record[MESSAGES])]
    for field in ("prompt", "family"):
        value = record.get(field, DEFAULTS.get(field))
        if field == "prompt" and field not in record and MESSAGES in record and not validate_messages(record[MESSAGES]):
            value = [turn for turn in record[MESSAGES] if turn["role"] == "user"][-1]["content"]  # the question
        if field in record and not isinstance(value, str):
            problems.append((field, f"wrong type {_type_name(value)} (expected str)"))
        elif field in record and not value.strip():
            problems.append((field, f"empty {field} (whitespace only counts as empty)"))
        values[field] = value
    level = record.get("level", DEFAULTS["level"])
    if not _is_int(level):
        problems.append(("level", f"wrong type {_type_name(level)} (expected int)"))
    elif not 0 <= level < 2**63:
        problems.append(("level", f"level {level} out of range (expected 0 <= level < 2**63)"))
    values["level"] = level
    return values, problems


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _message(path: Path, errors: list[str]) -> str:
    lines = [f"{path}: {error}" for error in errors[:MAX_LINES]]
    if len(errors) > MAX_LINES:
        lines.append(f"{path}: ... and {len(errors) - MAX_LINES} more errors")
    return "\n".join(lines)
