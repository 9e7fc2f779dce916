"""Pandera schemas for every table that crosses a stage boundary, with validated parquet read/write."""

from schemas.errors import SchemaError
from schemas.problems import PROBLEMS_SCHEMA, read_problems, validate_problems, write_problems
from schemas.rewards import REWARDS_SCHEMA, read_rewards, validate_rewards, write_rewards
from schemas.rollouts import ROLLOUTS_SCHEMA, VARIANTS, read_rollouts, validate_rollouts, write_rollouts

__all__ = [
    "PROBLEMS_SCHEMA",
    "REWARDS_SCHEMA",
    "ROLLOUTS_SCHEMA",
    "VARIANTS",
    "SchemaError",
    "read_problems",
    "read_rewards",
    "read_rollouts",
    "validate_problems",
    "validate_rewards",
    "validate_rollouts",
    "write_problems",
    "write_rewards",
    "write_rollouts",
]

from schemas.skill_events import EVENTS, SKILL_EVENTS_SCHEMA, validate_skill_events  # noqa: E402

__all__ += ["EVENTS", "SKILL_EVENTS_SCHEMA", "validate_skill_events"]

from schemas.curriculum_arms import CURRICULUM_ARMS_SCHEMA, validate_curriculum_arms  # noqa: E402

__all__ += ["CURRICULUM_ARMS_SCHEMA", "validate_curriculum_arms"]
