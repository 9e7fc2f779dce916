"""Policy-update objectives behind one Protocol, chosen by name from a registry.

Importing this package registers the built-in objectives ("grpo").
"""

from coevo.objectives.advantages import group_advantages, nonzero_variance_groups
from coevo.objectives.base import Objective, PolicyBatch
from coevo.objectives.grpo import GRPO
from coevo.objectives.kl import AGGREGATIONS, KL_ESTIMATORS, aggregate, kl_per_token
from coevo.objectives.registry import build_objective, objective_names, register_objective

__all__ = [
    "AGGREGATIONS",
    "GRPO",
    "KL_ESTIMATORS",
    "Objective",
    "PolicyBatch",
    "aggregate",
    "build_objective",
    "group_advantages",
    "kl_per_token",
    "nonzero_variance_groups",
    "objective_names",
    "register_objective",
]
