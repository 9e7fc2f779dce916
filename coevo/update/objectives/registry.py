"""Objectives by name: a class decorator registers, `build_objective` instantiates from config.

Each objective class is constructed as `cls(cfg: ObjectiveConfig)`; registration sets `cls.name`.
"""

from __future__ import annotations

from coevo.config import ObjectiveConfig
from coevo.registry import Registry
from coevo.update.objectives.base import Objective

OBJECTIVES = Registry("objective", name_attribute="name")
register_objective = OBJECTIVES.register
objective_names = OBJECTIVES.names


def build_objective(cfg: ObjectiveConfig) -> Objective:
    """Instantiate the objective registered under `cfg.name`; unknown names raise ValueError."""
    return OBJECTIVES[cfg.name](cfg)
