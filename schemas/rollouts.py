"""Pandera schema of the rollouts table (one sample per row: a completion, or a multi-turn episode)
and its validated read/write.

An episode (coevo/rollout/episodes.py) keeps the policy's turns and the tool turns between them in
`completion_ids`; `policy_mask` marks the policy's tokens (empty: all of them, one turn without
tools) and `messages` holds the turns as JSON; `role` names the role the problem was posed to. A
table written before these columns existed reads as one-turn samples of the solver (`EPISODE_DEFAULTS`).

List columns are object dtype holding lists in memory; after a parquet round trip they come back as
numpy arrays, so the element checks accept list, tuple and np.ndarray.
"""

from __future__ import annotations

import json
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


def _mask_matches_completion(frame: pd.DataFrame) -> pd.Series | bool:
    if not {"policy_mask", "completion_ids"} <= set(frame.columns):
        return True
    return pd.Series(
        [_length(m) in (0, _length(c)) for m, c in zip(frame["policy_mask"], frame["completion_ids"])],
        index=frame.index,
    )


def _messages_json(value: object) -> bool:
    if value == "":
        return True
    try:
        turns = json.loads(value)
    except (TypeError, ValueError):
        return False
    return isinstance(turns, list) and all(isinstance(t, dict) and {"role", "content"} <= set(t) for t in turns)


def _length(value: object) -> int:
    return len(value) if isinstance(value, _SEQUENCE) else -1


ROLLOUTS_SCHEMA = pa.DataFrameSchema(
    {
        "rollout_id": pa.Column(str, unique=True, description="Unique id of this completion."),
        "iteration": pa.Column(int, pa.Check.ge(0), description="Training iteration that sampled it."),
        "problem_id": pa.Column(str, description="Problem id (problems table)."),
        "role": pa.Column(
            str, description="The role the problem was posed to (coevo/rollout/roles.py; 'solver' by default)."
        ),
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
        "turns": pa.Column(int, pa.Check.ge(1), description="Assistant turns of the episode (1: one completion)."),
        "tool_calls": pa.Column(int, pa.Check.ge(0), description="Tool calls the episode made."),
        "tool_errors": pa.Column(int, pa.Check.ge(0), description="Of them, calls whose tool turn is an error."),
        "truncated": pa.Column(bool, description="Ended by max_turns or max_tokens with a call unanswered."),
        "messages": pa.Column(
            str,
            pa.Check(_messages_json, element_wise=True, error="not a JSON list of {role, content} turns"),
            description="The episode's turns after the prompt as JSON ('' for one turn without tools).",
        ),
        "policy_mask": pa.Column(
            object,
            _list_of("int", _is_int, "iu"),
            description="1 on the policy's tokens of completion_ids, 0 on tool turns ([]: every token).",
        ),
    },
    checks=[
        pa.Check(_logprobs_match_completion, error="len(sampling_logprobs) != len(completion_ids)"),
        pa.Check(_mask_matches_completion, error="len(policy_mask) is neither 0 nor len(completion_ids)"),
    ],
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
        ("turns", pyarrow.int64()),
        ("tool_calls", pyarrow.int64()),
        ("tool_errors", pyarrow.int64()),
        ("truncated", pyarrow.bool_()),
        ("messages", pyarrow.string()),
        ("policy_mask", pyarrow.list_(pyarrow.int64())),
        ("role", pyarrow.string()),
    ]
)
EPISODE_DEFAULTS = {"turns": 1, "tool_calls": 0, "tool_errors": 0, "truncated": False, "messages": "", "role": "solver"}


def with_episode_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with the episode columns a table written before them lacks, as one-turn samples of the solver."""
    missing = {k: v for k, v in EPISODE_DEFAULTS.items() if k not in frame.columns}
    if "policy_mask" not in frame.columns:
        missing["policy_mask"] = [[] for _ in range(len(frame))]
    return frame.assign(**missing) if missing else frame


def validate_rollouts(frame: pd.DataFrame, source: str) -> pd.DataFrame:
    return validate_frame(ROLLOUTS_SCHEMA, with_episode_columns(frame), source)


def read_rollouts(path: str | Path) -> pd.DataFrame:
    return read_table(ROLLOUTS_SCHEMA, path, with_episode_columns)


def write_rollouts(path: str | Path, frame: pd.DataFrame) -> None:
    write_table(ROLLOUTS_SCHEMA, ROLLOUTS_ARROW, path, with_episode_columns(frame))
