"""One strict configuration tree that mirrors params.yaml.

Every knob of a run lives in params.yaml and lands here. Unknown keys are errors (extra="forbid"),
every field says what it does, and values derived from several fields are computed in one place:
the properties at the bottom of `Config` (labelled "derived"). One module per part of the tree:
base.py (the strict base model), run.py, problems.py, policy.py, rollout.py, coevolvers.py, code.py
(the sections), tree.py (`Config`, the whole tree) and load.py (`load_config`: params.yaml and
`--set` into a `Config`, with errors naming file, line and key). Every name is importable from here.
"""

from coevo.config.base import Family, Strict
from coevo.config.code import CodeConfig, CureConfig, SandboxConfig, SynthCodeConfig
from coevo.config.coevolvers import (
    CONTEXT_KINDS,
    CoevolverConfig,
    CurriculumConfig,
    HarnessConfig,
    MemoryConfig,
    ProposerConfig,
    RubricsConfig,
    SkillBankConfig,
    WriterConfig,
)
from coevo.config.load import ConfigError, deep_merge, error_lines, load_config, parse_overrides, read_yaml
from coevo.config.policy import (
    BootstrapConfig,
    DistributedSettings,
    LoraSettings,
    ModelShape,
    ObjectiveConfig,
    OptimConfig,
    PolicyConfig,
    TeacherConfig,
)
from coevo.config.problems import InstructionConfig, ProblemsConfig, PromptConfig, RewardEntry
from coevo.config.rollout import (
    DynamicSamplingConfig,
    EngineConfig,
    EnvironmentConfig,
    RolloutConfig,
    SamplingConfig,
)
from coevo.config.run import EvalConfig, PipelineConfig, RayConfig, RetentionConfig, RunConfig, TrackingConfig
from coevo.config.tree import Config

__all__ = [
    "BootstrapConfig",
    "CONTEXT_KINDS",
    "CodeConfig",
    "CoevolverConfig",
    "Config",
    "ConfigError",
    "CureConfig",
    "CurriculumConfig",
    "DistributedSettings",
    "DynamicSamplingConfig",
    "EngineConfig",
    "EnvironmentConfig",
    "EvalConfig",
    "Family",
    "HarnessConfig",
    "InstructionConfig",
    "LoraSettings",
    "MemoryConfig",
    "ModelShape",
    "ObjectiveConfig",
    "OptimConfig",
    "PipelineConfig",
    "PolicyConfig",
    "ProblemsConfig",
    "PromptConfig",
    "ProposerConfig",
    "RayConfig",
    "RetentionConfig",
    "RewardEntry",
    "RolloutConfig",
    "RubricsConfig",
    "RunConfig",
    "SamplingConfig",
    "SandboxConfig",
    "SkillBankConfig",
    "Strict",
    "SynthCodeConfig",
    "TeacherConfig",
    "TrackingConfig",
    "WriterConfig",
    "deep_merge",
    "error_lines",
    "load_config",
    "parse_overrides",
    "read_yaml",
]
