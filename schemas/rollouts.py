"""Pandera schema of the rollouts table (one sampled completion per row) and its validated read/write.

List columns are object dtype holding lists in memory; after a parquet round trip they come back as
numpy arrays, so the element checks accept list, tuple and np.ndarray.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pandera.pandas as pa
import pyarrow

from schemas.errors import read_table, validate_frame, write_table

VARIANTS = ("solo", "base", "probe")
_SEQUENCE = (list, tuple, np.ndarray)


def _is_int(x: object) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _is_real(x: object) -> bool:
    return isinstance(x, (float, np.floating)) or _is_int(x)


def _list_of(kind: str, ok, array_kinds: str = "") -> pa.Check:
    """Element-wise check: a list/tuple/array whose items all pass `ok` (arrays of `array_kinds` pass at once)."""

    def check(value: object) -> bool:
        if isinstance(value, np.ndarray) and value.dtype.kind in array_kinds:
            return True  # fast path for parquet round trips: numeric arrays of the right kind
        return isinstance(value, _SEQUENCE) and all(ok(x) for x in value)

    return pa.Check(check, element_wise=True, error=f"not a list of {kind}")


def _all_non_positive(value: object) -> bool:
    if not (isinstance(value, _SEQUENCE) and all(_is_real(x) for x in value)):
        return True  # the list-of-float check reports it
    return bool(np.all(np.asarray(value, dtype=float) <= 0))  # NaN fails


def _logprobs_match_completion(frame: pd.DataFrame) -> pd.Series | bool:
    if not {"sampling_logprobs", "completion_ids"} <= set(frame.columns):
        return True  # the missing column is reported on its own
    return pd.Series(
        [_length(a) == _length(b) for a, b in zip(frame["sampling_logprobs"], frame["completion_ids"])],
        index=frame.index,
    )


def _length(value: object) -> int:
    return len(value) if isinstance(value, _SEQUENCE) else -1


ROLLOUTS_SCHEMA = pa.DataFrameSchema(
    {
        "rollout_id": pa.Column(str, unique=True, description="Unique id of this completion."),
        "iteration": pa.Column(int, pa.Check.ge(0), description="Training iteration that sampled it."),
        "problem_id": pa.Column(str, description="Problem id (problems table)."),
        "family": pa.Column(str, description="Problem family."),
        "variant": pa.Column(str, pa.Check.isin(VARIANTS), description="Context variant: solo, base or probe."),
        "probe_skill": pa.Column(str, description="Skill whose utility this group measures ('' if none)."),
        "skills": pa.Column(
            object,
            _list_of("str", lambda x: isinstance(x, str)),
            description="Skill ids rendered into the prompt, in order.",
        ),
        "question": pa.Column(str, description="The bare question."),
        "prompt": pa.Column(str, description="The full prompt (context + question) the policy saw."),
        "completion": pa.Column(str, description="The sampled completion text."),
        "prompt_ids": pa.Column(object, _list_of("int", _is_int, "iu"), description="Prompt token ids."),
        "completion_ids": pa.Column(object, _list_of("int", _is_int, "iu"), description="Completion token ids."),
        "sampling_logprobs": pa.Column(
            object,
            [
                _list_of("float", _is_real, "fiu"),
                pa.Check(_all_non_positive, element_wise=True, error="logprob > 0 or NaN"),
            ],
            description="Engine's per-token sampling logprobs, one per completion token.",
        ),
        "finished": pa.Column(bool, description="False when cut at max_new_tokens before EOS."),
        "policy_version": pa.Column(str, description="Checkpoint that sampled it."),
    },
    checks=[pa.Check(_logprobs_match_completion, error="len(sampling_logprobs) != len(completion_ids)")],
    strict=True,
    name="rollouts",
)

ROLLOUTS_ARROW = pyarrow.schema(
    [
        ("rollout_id", pyarrow.string()),
        ("iteration", pyarrow.int64()),
        ("problem_id", pyarrow.string()),
        ("family", pyarrow.string()),
        ("variant", pyarrow.string()),
        ("probe_skill", pyarrow.string()),
        ("skills", pyarrow.list_(pyarrow.string())),
        ("question", pyarrow.string()),
        ("prompt", pyarrow.string()),
        ("completion", pyarrow.string()),
        ("prompt_ids", pyarrow.list_(pyarrow.int64())),
        ("completion_ids", pyarrow.list_(pyarrow.int64())),
        ("sampling_logprobs", pyarrow.list_(pyarrow.float64())),
        ("finished", pyarrow.bool_()),
        ("policy_version", pyarrow.string()),
    ]
)


def validate_rollouts(frame: pd.DataFrame, source: str) -> pd.DataFrame:
    return validate_frame(ROLLOUTS_SCHEMA, frame, source)


def read_rollouts(path: str | Path) -> pd.DataFrame:
    return read_table(ROLLOUTS_SCHEMA, path)


def write_rollouts(path: str | Path, frame: pd.DataFrame) -> None:
    write_table(ROLLOUTS_SCHEMA, ROLLOUTS_ARROW, path, frame)
