"""Co-evolvers: the artifacts that evolve from the policy's rollouts. Importing this package registers
"skill_bank", "memory", "none", "curriculum", "rubrics", "harness" and "unit_tests"."""

from coevo.coevolvers.base import (
    CoEvolver,
    TextGenerator,
    build_coevolver,
    coevolver_kinds,
    load_coevolver,
    register_coevolver,
)
from coevo.coevolvers.curriculum import Curriculum
from coevo.coevolvers.harness import Harness
from coevo.coevolvers.memory import ProceduralMemory
from coevo.coevolvers.none import NoCoEvolver
from coevo.coevolvers.rubrics import RubricsCoEvolver
from coevo.coevolvers.skill_bank import Skill, SkillBank
from coevo.coevolvers.unit_tests import TestBank
from coevo.coevolvers.writers import (
    OpenAIChatWriter,
    SkillDraft,
    SkillWriter,
    WorkedExampleWriter,
    build_writer,
)

__all__ = [
    "CoEvolver",
    "Curriculum",
    "Harness",
    "NoCoEvolver",
    "OpenAIChatWriter",
    "ProceduralMemory",
    "RubricsCoEvolver",
    "Skill",
    "SkillBank",
    "SkillDraft",
    "SkillWriter",
    "TestBank",
    "TextGenerator",
    "WorkedExampleWriter",
    "build_coevolver",
    "build_writer",
    "coevolver_kinds",
    "load_coevolver",
    "register_coevolver",
]
