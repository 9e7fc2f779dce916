"""Load a user's math problems into a problems frame, and split it train/test.

Sources (`problems.path`): a .jsonl or .parquet file, a Hugging Face `datasets` dataset saved with
`save_to_disk` (a Dataset, or a DatasetDict's "train" split), or a directory of .parquet / .jsonl
files (read in name order, as one dataset).

Fields: answer (in every row, or in none: a dataset without reference answers, as TRL's reward
functions take them from a column of their own such as `solution`, gets answer '' and is judged by
the run's `rewards:` functions, never by the built-in `verifier`); the question as `prompt` (a
string: TRL's standard format) or as a conversation (TRL's conversational format: a list of {role,
content}, roles system/user/assistant, any number of turns, ending in the user's question), held in
`messages` or in `prompt` itself; a conversation's `prompt` is its last user turn, and it is
rendered under `prompt.format: chat` only (coevo/rollout/prompting.py). Optional: id (default: the
0-based row index, when no row has one), family (default "math"), level (default 0). id and answer
may be int or str and are normalised to str; any other type is an error. Other fields are kept, as
one JSON object per row in the `user_fields` column (only when some row has one), and reach reward
plugins as keyword arguments of their own (coevo/verification/rewards.py); the plugins' own argument
names (`completions`, `prompts`, `completion_ids`, `trainer_state`, `log_metric`, `log_extra`) are
reserved. Every problem found is reported in one `ProblemsFileError`, naming the file, the row
(jsonl: 1-based line number; parquet and datasets: 0-based row index; in a directory, prefixed by
the file name) and the field. The loader writes nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow
import pyarrow.parquet

from coevo.problems.heldout import keys_of
from coevo.rollout.prompting import validate_messages
from schemas.problems import EXTRA, MESSAGES, validate_problems

REQUIRED = ("id", "prompt", "answer")
DEFAULTS = {"family": "math", "level": 0}
KNOWN = {*REQUIRED, *DEFAULTS, MESSAGES}  # fields of the problems table; the others go to its `user_fields` column
RESERVED = {
    "completions",
    "prompts",
    "completion_ids",
    "trainer_state",
    "log_metric",
    "log_extra",
}  # reward plugins' own arguments (coevo/verification/reward_calls.py)
MAX_LINES = 50  # errors listed in one message; the rest are counted
HF_STATE, HF_DICT = "state.json", "dataset_dict.json"  # what `save_to_disk` writes (a Dataset, a DatasetDict)


class ProblemsFileError(ValueError):
    """A problem file could not be read; the message names the file, rows and fields."""


def load_problem_file(path: str | Path) -> pd.DataFrame:
    """Read and check a problem file (.jsonl, .parquet) or dataset directory (a Hugging Face dataset
    saved with `save_to_disk`, or a directory of .parquet / .jsonl files); returns a frame valid
    under the problems schema."""
    path = Path(path)
    records, rows, errors = read_records(path)
    records = [_as_messages(record) for record in records]
    errors += _conversation_columns(records, rows)
    if not errors:
        records = _with_ids(records)
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
        frame[MESSAGES] = [
            json.dumps(record[MESSAGES], ensure_ascii=False) if MESSAGES in record else "" for record in records
        ]
    return validate_problems(frame, source=str(path))


def read_records(path: Path) -> tuple[list[dict], list[str], list[str]]:
    """(records, row labels, read errors) of a file or a dataset directory."""
    if path.is_dir():
        return read_dataset_dir(path)
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return _read_jsonl(path)
    if suffix == ".parquet":
        return _read_parquet(path)
    if not path.exists():
        raise ProblemsFileError(f"{path}: no such file or directory (problems.path)")
    raise ProblemsFileError(
        f"{path}: unsupported extension {path.suffix!r} (expected .jsonl or .parquet, or a dataset directory)"
    )


def split_problems(frame: pd.DataFrame, test_fraction: float, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Train and test of `frame` (no validation split); see `split_held_out`."""
    splits = split_held_out(frame, test_fraction, 0.0, seed)
    return splits["train"], splits["test"]


def split_held_out(
    frame: pd.DataFrame, test_fraction: float, val_fraction: float, seed: int
) -> dict[str, pd.DataFrame]:
    """{"train", "val", "test"}: round(groups * fraction) content groups held out for test (at least
    1) and for validation, at least one group left for training, by seed.

    A content group is the rows sharing a content key (coevo/problems/heldout.py: normalised prompt
    text, arithmetic operands up to commutation, code signature + docstring), so a problem written
    twice in the file lands in one split only. Every split keeps the file's row order.
    """
    if not 0 < test_fraction < 1 or not 0 <= val_fraction < 1 or test_fraction + val_fraction >= 1:
        raise ValueError(
            f"test_fraction must be in (0, 1), val_fraction in [0, 1) and their sum < 1; got {test_fraction}, "
            f"{val_fraction}"
        )
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
    held_keys = set(keys_of(held))
    seen = np.array([key in held_keys for key in keys_of(train)], dtype=bool)
    if seen.all():
        raise ValueError(
            f"{source}: every training problem ({len(train)}) is also in the held-out file; nothing left to train on"
        )
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
        records = [_without_nulls(record) for record in pyarrow.parquet.read_table(path).to_pylist()]
    except (OSError, pyarrow.ArrowException) as exc:
        raise ProblemsFileError(f"{path}: cannot read parquet: {exc}") from exc
    return records, [f"row {i} (0-based)" for i in range(len(records))], []


def read_dataset_dir(path: Path) -> tuple[list[dict], list[str], list[str]]:
    """A Hugging Face dataset saved with `save_to_disk` (a Dataset, or a DatasetDict's "train" split),
    or the .parquet and .jsonl files of a directory in name order; rows are labelled with their file."""
    if (path / HF_DICT).is_file() or (path / HF_STATE).is_file():
        return _read_saved_dataset(path)
    files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in (".parquet", ".jsonl"))
    if not files:
        raise ProblemsFileError(
            f"{path}: a directory with no .parquet or .jsonl files that is not a dataset saved with save_to_disk "
            f"(no {HF_STATE} or {HF_DICT}) (problems.path)"
        )
    records, rows, errors = [], [], []
    for file in files:
        found, labels, problems = _read_jsonl(file) if file.suffix.lower() == ".jsonl" else _read_parquet(file)
        records += found
        rows += [f"{file.name} {label}" for label in labels]
        errors += [f"{file.name} {problem}" for problem in problems]
    return records, rows, errors


def _read_saved_dataset(path: Path) -> tuple[list[dict], list[str], list[str]]:
    import datasets  # imported here: ~1 s, and only dataset directories need it

    try:
        loaded = datasets.load_from_disk(str(path))
    except Exception as exc:
        raise ProblemsFileError(
            f"{path}: cannot load the dataset saved with save_to_disk ({type(exc).__name__}: {exc})"
        ) from exc
    label = ""
    if isinstance(loaded, datasets.DatasetDict):
        if "train" not in loaded:
            raise ProblemsFileError(
                f"{path}: a DatasetDict without a 'train' split (splits: {sorted(loaded)}); save the split to "
                f"use with save_to_disk, or name it 'train'"
            )
        loaded, label = loaded["train"], "split 'train' "
    records = [_without_nulls(record) for record in loaded.to_list()]
    return records, [f"{label}row {i} (0-based)" for i in range(len(records))], []


def _without_nulls(record: dict) -> dict:
    """A columnar record without null `prompt` / `messages` (a column every row has, empty in some)."""
    return {key: value for key, value in record.items() if not (key in ("prompt", MESSAGES) and value is None)}


def _as_messages(record: dict) -> dict:
    """TRL's conversational prompt-only format (`prompt` holds the conversation) as coevo's `messages`."""
    if isinstance(record.get("prompt"), list) and MESSAGES not in record:
        record = dict(record)
        record[MESSAGES] = record.pop("prompt")
    return record


def _conversation_columns(records: list[dict], rows: list[str]) -> list[str]:
    """One error when no row has a question column: `prompt` or `messages`."""
    if records and not any("prompt" in record or MESSAGES in record for record in records):
        found = sorted(dict.fromkeys(key for record in records for key in record))
        return [
            (
                f"field 'prompt': missing column (no question column: expected 'prompt', a string or a conversation "
                f"in TRL's format, or 'messages', a list of {{role, content}} ending in the user's question; columns "
                f"found: {found})"
            )
        ]
    return []


def _with_ids(records: list[dict]) -> list[dict]:
    """Records with an `id`: when no row has one (a dataset as TRL users have it), the 0-based row index."""
    if any("id" in record for record in records):
        return records
    return [{"id": str(i), **record} for i, record in enumerate(records)]


def _missing_columns(records: list[dict], rows: list[str]) -> list[str]:
    """A required field absent from every row is one error; absent from some rows, one per row."""
    errors = []
    for field in REQUIRED:
        if field == "prompt" and records and not any("prompt" in record or MESSAGES in record for record in records):
            continue  # no question column at all: one error (_conversation_columns)
        lacking = [
            row
            for record, row in zip(records, rows)
            if field not in record and not (field == "prompt" and MESSAGES in record)
        ]
        if records and len(lacking) == len(records):
            if field != "answer":  # no row with an answer: a dataset whose reward functions judge it
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
        errors += [
            f"{row}, field '{key}': reserved (reward functions receive their own {key} under this name)"
            for key in RESERVED & set(extra)
        ]
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
        if field in record:
            values[field] = str(value)
        else:  # no id: the row index (set by the caller); no answer: '' (judged by the run's reward functions)
            values[field] = None if field == "id" else ""
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
