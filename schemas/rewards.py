"""Pandera schema of the rewards table (one verifier judgement per rollout) and its validated read/write."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pandera.pandas as pa
import pyarrow

from schemas.errors import read_table, validate_frame, write_table

COMPONENTS = "components"
LOGGED = "logged"  # what reward plugins logged (log_extra / log_metric), JSON per row


def _components() -> pa.Check:
    def check(text: str) -> bool:
        try:
            value = json.loads(text)
        except ValueError:
            return False
        return isinstance(value, dict) and all(
            v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v))
            for v in value.values()
        )

    return pa.Check(check, element_wise=True, error="not a JSON object of finite numbers or nulls")


def _logged() -> pa.Check:
    def check(text: str) -> bool:
        try:
            value = json.loads(text)
        except ValueError:
            return False
        return (
            isinstance(value, dict)
            and set(value) <= {"extra", "metric"}
            and all(isinstance(v, dict) for v in value.values())
        )

    return pa.Check(check, element_wise=True, error="not a JSON object {extra: {...}, metric: {...}}")


REWARDS_SCHEMA = pa.DataFrameSchema(
    {
        "rollout_id": pa.Column(str, unique=True, description="The rollout this reward judges."),
        "iteration": pa.Column(int, description="Training iteration of the rollout."),
        "problem_id": pa.Column(str, description="Problem of the rollout."),
        "role": pa.Column(
            str,
            required=False,
            description=(
                "The rollout's role (coevo/rollout/roles.py), whose reward this is. Optional on read (shards written "
                "before it are read as 'solver'); always written."
            ),
        ),
        "reward": pa.Column(float, description="Scalar reward."),
        "passed": pa.Column(bool, description="Whether the completion was judged correct."),
        "verifier": pa.Column(str, description="Name of the verifier that judged it."),
        "details": pa.Column(
            str,
            description=(
                "Human-readable reason (may be empty); code verifiers write key=value pairs: verdict (passed, "
                "failed, timeout, memory, crashed, invalid, spoofed), test (first failing test), passed (k/n tests), "
                "mode (sandbox isolation); `parse_details` reads them."
            ),
        ),
        COMPONENTS: pa.Column(
            str,
            _components(),
            required=False,
            description=(
                "Each reward function's value, as a JSON object {name: float or null (not applicable)} in `rewards:` "
                "order; `reward` is their weighted sum. Optional on read (shards written before it are read as "
                "'{}'); always written."
            ),
        ),
        LOGGED: pa.Column(
            str,
            _logged(),
            required=False,
            description=(
                "What reward plugins logged for this completion (TRL's log_extra / log_metric): a JSON object "
                '{"extra": {column: value}, "metric": {name: the batch\'s mean}}, or \'{}\'. Optional on read '
                "(shards written before it are read as '{}'); always written."
            ),
        ),
    },
    strict=True,
    name="rewards",
)

REWARDS_ARROW = pyarrow.schema(
    [
        ("rollout_id", pyarrow.string()),
        ("iteration", pyarrow.int64()),
        ("problem_id", pyarrow.string()),
        ("reward", pyarrow.float64()),
        ("passed", pyarrow.bool_()),
        ("verifier", pyarrow.string()),
        ("details", pyarrow.string()),
        (COMPONENTS, pyarrow.string()),
        (LOGGED, pyarrow.string()),
        ("role", pyarrow.string()),
    ]
)


def parse_details(details: str) -> dict[str, str]:
    """The key=value pairs of a details string (free text without '=' is skipped)."""
    return dict(part.split("=", 1) for part in details.split() if "=" in part and not part.startswith("="))


def validate_rewards(frame: pd.DataFrame, source: str) -> pd.DataFrame:
    return validate_frame(REWARDS_SCHEMA, frame, source)


def read_rewards(path: str | Path) -> pd.DataFrame:
    return with_components(read_table(REWARDS_SCHEMA, path))


def write_rewards(path: str | Path, frame: pd.DataFrame) -> None:
    write_table(REWARDS_SCHEMA, REWARDS_ARROW, path, with_components(frame))


def with_components(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with `components`, `logged` and `role` columns: as they are, or '{}' ('solver' for the
    role) on every row where it has none."""
    if not isinstance(frame, pd.DataFrame):
        return frame  # validation reports a non-frame
    missing = {column: "{}" for column in (COMPONENTS, LOGGED) if column not in frame.columns}
    if "role" not in frame.columns:
        missing["role"] = "solver"
    return frame.assign(**missing) if missing else frame
