"""Pandera schema of the curriculum arms table: each category's bandit state after one iteration.

The rows come from the curriculum co-evolver's evolution report (`Curriculum.update`, its "arms"
list): one row per arm the curriculum knows after that iteration's update, drawn or not.
"""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa

from schemas.errors import validate_frame

CURRICULUM_ARMS_SCHEMA = pa.DataFrameSchema(
    {
        "iteration": pa.Column(
            int, pa.Check.ge(0), description="Iteration whose co-evolution step produced the state."
        ),
        "category": pa.Column(
            str,
            pa.Check.str_length(min_value=1),
            description="The arm: the values of coevolver.curriculum.category joined by '/'.",
        ),
        "value": pa.Column(float, description="Arm value after the TD(0) update."),
        "count": pa.Column(int, pa.Check.ge(0), description="Groups the arm has been measured on so far."),
        "reward": pa.Column(
            float,
            nullable=True,
            description="The arm's last reward, mean |advantage| of its groups (null: never measured).",
        ),
        "prob": pa.Column(
            float, pa.Check.in_range(0, 1), description="Probability the next batch's draws pick the arm."
        ),
    },
    unique=["iteration", "category"],
    strict=True,
    name="curriculum_arms",
)


def validate_curriculum_arms(frame: pd.DataFrame, source: str) -> pd.DataFrame:
    return validate_frame(CURRICULUM_ARMS_SCHEMA, frame, source)
