"""The "none" co-evolver: plain GRPO, the baseline every co-evolver is compared with.

Every problem gets one "solo" variant of the whole group with no context; nothing evolves; the saved
directory holds only a manifest, so every version has the same content hash.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from coevo.coevolvers.base import (
    TextGenerator,
    read_artifact,
    register_coevolver,
    save_artifact,
)
from coevo.config import CoevolverConfig
from coevo.types import ContextVariant


@register_coevolver("none")
class NoCoEvolver:
    kind: str
    roles: frozenset[str] = frozenset()

    def __init__(self, cfg: CoevolverConfig, seed: int, generate: TextGenerator | None = None):
        self.cfg = cfg
        self.seed = seed
        self.frozen = cfg.frozen

    def plan(self, problems: pd.DataFrame, group_size: int) -> list[ContextVariant]:
        return [ContextVariant(problem_id=str(pid), variant="solo", n=group_size) for pid in problems["id"]]

    def context_for(self, problem: Mapping) -> list[str]:
        return []

    def teacher_context(self, problem: Mapping) -> list[str]:
        return []

    def update(self, iteration: int, problems: pd.DataFrame, rollouts: pd.DataFrame, rewards: pd.DataFrame) -> dict:
        return {}

    def save(self, directory: Path) -> str:
        return save_artifact(directory, self.kind, files={})

    @classmethod
    def load(
        cls, directory: Path, cfg: CoevolverConfig, seed: int, generate: TextGenerator | None = None
    ) -> NoCoEvolver:
        read_artifact(directory, cls.kind)
        return cls(cfg, seed)
