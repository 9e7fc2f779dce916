"""Objectives by name: a class decorator registers, `build_objective` instantiates from config.

Variants are registry entries, never `if name == ...` chains (verl's `register_policy_loss`).
"""

from __future__ import annotations

from collections.abc import Callable

from coevo.config import ObjectiveConfig
from coevo.objectives.base import Objective

_REGISTRY: dict[str, type] = {}


def register_objective(name: str) -> Callable[[type], type]:
    """Class decorator: register `cls` under `name` and set `cls.name = name`.

    The class is constructed as `cls(cfg: ObjectiveConfig)`. Registering a name twice raises ValueError.
    """

    def decorate(cls: type) -> type:
        if name in _REGISTRY:
            raise ValueError(f"objective {name!r} is already registered (by {_REGISTRY[name].__qualname__})")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return decorate


def build_objective(cfg: ObjectiveConfig) -> Objective:
    """Instantiate the objective registered under `cfg.name`; unknown names raise ValueError."""
    try:
        cls = _REGISTRY[cfg.name]
    except KeyError:
        raise ValueError(f"unknown objective {cfg.name!r}; known: {objective_names()}") from None
    return cls(cfg)


def objective_names() -> list[str]:
    """Registered objective names, sorted."""
    return sorted(_REGISTRY)
