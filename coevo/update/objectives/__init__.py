"""Policy-update objectives behind one Protocol, chosen by name from a registry.

Importing this package registers the built-in objectives: grpo, opsd, rlsd, sdar, ess, opsa.
"""

from coevo.update.objectives.advantages import group_advantages, nonzero_variance_groups
from coevo.update.objectives.base import Objective, PolicyBatch
from coevo.update.objectives.ess import ESSAdaptive, effective_sample_size
from coevo.update.objectives.grpo import GRPO
from coevo.update.objectives.kl import AGGREGATIONS, KL_ESTIMATORS, aggregate, kl_per_token
from coevo.update.objectives.opsa import OPSA, token_entropy
from coevo.update.objectives.registry import (
    build_objective,
    objective_names,
    register_objective,
)
from coevo.update.objectives.self_distill import OPSD, RLSD, SDAR, divergence_per_token

__all__ = [
    "AGGREGATIONS",
    "GRPO",
    "KL_ESTIMATORS",
    "OPSA",
    "OPSD",
    "RLSD",
    "SDAR",
    "ESSAdaptive",
    "Objective",
    "PolicyBatch",
    "aggregate",
    "build_objective",
    "divergence_per_token",
    "effective_sample_size",
    "group_advantages",
    "kl_per_token",
    "nonzero_variance_groups",
    "objective_names",
    "register_objective",
    "token_entropy",
]
