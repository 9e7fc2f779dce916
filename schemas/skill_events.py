"""Pandera schema of the skill events table: one row per step of a skill's lifecycle in one iteration.

The rows come from the co-evolver's evolution report (`SkillBank.update`): `created` (a new trial
candidate), `measured` (one matched-group gap on one problem), `admitted`, `rejected`, `promoted`,
`retired`. Fields that do not apply to an event hold "" (strings) or null (numbers), never a sentinel.
"""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa

from schemas.errors import validate_frame

EVENTS = ("created", "measured", "admitted", "rejected", "promoted", "retired")


UNIT_TEST = "unit test: "  # the reason of a test bank's event (coevo/coevolvers/unit_tests.py), then the test


def _set_exactly_on_measured(column: str, is_set, or_unit_tests: bool = False) -> pa.Check:
    def check(frame: pd.DataFrame) -> pd.Series | bool:
        if not {"event", column, "reason"} <= set(frame.columns):
            return True  # the missing column is reported on its own
        expected = frame["event"] == "measured"
        if or_unit_tests:
            expected |= frame["reason"].str.startswith(UNIT_TEST)
        return is_set(frame[column]) == expected

    also = " or the event is a unit test's" if or_unit_tests else ""
    return pa.Check(check, error=f"{column} is set exactly when event is 'measured'{also}")


def _retired_has_reason(frame: pd.DataFrame) -> pd.Series | bool:
    if not {"event", "reason"} <= set(frame.columns):
        return True
    return (frame["event"] != "retired") | (frame["reason"].str.strip().str.len() > 0)


SKILL_EVENTS_SCHEMA = pa.DataFrameSchema(
    {
        "iteration": pa.Column(
            int, pa.Check.ge(0), description="Iteration whose co-evolution step produced the event."
        ),
        "skill_id": pa.Column(str, pa.Check.str_length(min_value=1), description="Skill id (skills.jsonl)."),
        "event": pa.Column(str, pa.Check.isin(EVENTS), description="Lifecycle event: " + ", ".join(EVENTS) + "."),
        "problem_id": pa.Column(
            str, description="Problem of the matched group (measured events) or of the unit test ('' otherwise)."
        ),
        "gap": pa.Column(
            float, nullable=True, description="Mean probe reward - mean base reward (measured events; null otherwise)."
        ),
        "utility": pa.Column(
            float, nullable=True, description="Running utility after the event (null where the report has none)."
        ),
        "reason": pa.Column(
            str,
            description=(
                "Why the skill was retired ('low utility', 'capacity'; '' otherwise); 'rubric criterion' on a rubric "
                "criterion's measured event; 'unit test: <test>' on a test bank's admitted and retired events."
            ),
        ),
    },
    checks=[
        _set_exactly_on_measured("gap", lambda s: s.notna()),
        _set_exactly_on_measured("problem_id", lambda s: s.str.len() > 0, or_unit_tests=True),
        pa.Check(_retired_has_reason, error="a retired event needs a reason"),
    ],
    unique=["iteration", "skill_id", "event", "problem_id"],
    strict=True,
    name="skill_events",
)


def validate_skill_events(frame: pd.DataFrame, source: str) -> pd.DataFrame:
    return validate_frame(SKILL_EVENTS_SCHEMA, frame, source)
