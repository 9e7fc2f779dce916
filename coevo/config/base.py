"""The base of every settings model (strict: unknown keys are errors, values frozen) and shared types."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
)

Family = Literal["add", "sub", "mul"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
