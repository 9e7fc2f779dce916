"""`Config`: the whole settings tree, one field per top-level section of params.yaml, with the values
derived from several fields (its properties labelled "derived")."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import (
    Field,
    field_serializer,
    field_validator,
    model_validator,
)

from coevo.config.base import Strict
from coevo.config.code import CodeConfig
from coevo.config.coevolvers import _COEVOLVER_LIST, CONTEXT_KINDS, CoevolverConfig
from coevo.config.policy import BootstrapConfig, ObjectiveConfig, OptimConfig, PolicyConfig
from coevo.config.problems import _BUILTIN_NAME, _METRIC_NAME, _PLUGIN_PATH, ProblemsConfig, PromptConfig, RewardEntry
from coevo.config.rollout import EngineConfig, EnvironmentConfig, RolloutConfig, SamplingConfig
from coevo.config.run import EvalConfig, PipelineConfig, RunConfig, TrackingConfig

ROLE_AWARE_KINDS = frozenset({"none", "unit_tests"})  # co-evolvers that read the rollouts' `role`


class Config(Strict):
    seed: int = Field(0, description="Seeds problem generation, model init, sampling and data order.")
    run: RunConfig = Field(default_factory=RunConfig, description="Where outputs go and how long to train.")
    problems: ProblemsConfig = Field(default_factory=ProblemsConfig, description="Problem source and splits.")
    policy: PolicyConfig = Field(default_factory=PolicyConfig, description="Policy model.")
    bootstrap: BootstrapConfig = Field(
        default_factory=BootstrapConfig,
        description=(
            "Supervised warm start of the tiny default policy on math sources (code sources use code.warm_start_*)."
        ),
    )
    sampling: SamplingConfig = Field(default_factory=SamplingConfig, description="Rollout sampling parameters.")
    engine: EngineConfig = Field(default_factory=EngineConfig, description="Generation engine.")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="Rollout batch shape.")
    objective: ObjectiveConfig = Field(default_factory=ObjectiveConfig, description="Policy-update objective.")
    optim: OptimConfig = Field(default_factory=OptimConfig, description="Optimizer of the policy update.")
    coevolver: CoevolverConfig | list[CoevolverConfig] = Field(
        default_factory=CoevolverConfig,
        validate_default=True,
        description=(
            "The co-evolving artifact: one mapping ({kind: curriculum, ...}), or a list of them for several "
            "co-evolvers in one run (e.g. [{kind: curriculum}, {kind: skill_bank}]), each with its own artifact and "
            "version, evolving in the list's order in the co-evolution stage. Held as a list (`coevolver_list`)."
        ),
    )
    eval: EvalConfig = Field(default_factory=EvalConfig, description="Held-out evaluation.")
    tracking: TrackingConfig = Field(default_factory=TrackingConfig, description="MLflow tracking and model registry.")
    pipeline: PipelineConfig = Field(
        default_factory=PipelineConfig, description="Prefect orchestration: retries and the nightly schedule."
    )
    code: CodeConfig = Field(
        default_factory=CodeConfig,
        description="Code problems: sandbox, CURE rewards, the synthetic family and the warm start.",
    )
    prompt: PromptConfig = Field(
        default_factory=PromptConfig,
        description="Prompt rendering: plain text or the tokenizer's chat template (coevo/rollout/prompting.py).",
    )
    rewards: list[RewardEntry] = Field(
        default_factory=lambda: [RewardEntry(function="verifier")],
        min_length=1,
        description=(
            "Reward functions of the verification stage, each with a weight; a completion's reward is their weighted "
            "sum and each value is kept in the rewards table (coevo/verification/rewards.py). The default is the "
            "family verifier alone."
        ),
    )
    tools: list[str] = Field(
        default_factory=list,
        description=(
            "Stateless tool functions the model may call, 'module:function' each (TRL's tools=[...]): type hints "
            "and a Google-style docstring; with them (or environment.factory) every rollout and evaluation sample "
            "is a multi-turn episode (coevo/rollout/episodes.py)."
        ),
    )
    environment: EnvironmentConfig = Field(
        default_factory=EnvironmentConfig,
        description="Multi-turn episodes: the environment class, turn and token budgets, the tools' timeout.",
    )
    rewards_pass_threshold: float = Field(
        1.0,
        allow_inf_nan=False,
        description=(
            "Without a 'verifier' entry in `rewards`, a completion passes when its total reward is at least this; "
            "with one, `passed` is the verifier's verdict whatever its weight."
        ),
    )

    @field_validator("rewards")
    @classmethod
    def _check_rewards(cls, rewards: list[RewardEntry]) -> list[RewardEntry]:
        seen: dict[str, int] = {}
        for i, entry in enumerate(rewards):
            if not (_BUILTIN_NAME.fullmatch(entry.function) or _PLUGIN_PATH.fullmatch(entry.function)):
                raise ValueError(
                    f"rewards[{i}].function: {entry.function!r} is neither a built-in reward name nor "
                    f"'module:function' (e.g. 'my_rewards:length_penalty')"
                )
            if not _METRIC_NAME.fullmatch(entry.label):
                raise ValueError(
                    f"rewards[{i}].name: {entry.label!r} may hold only letters, digits, '_', '.' and '-' (it "
                    f"names a metric)"
                )
            if entry.label in seen:
                raise ValueError(
                    f"rewards[{i}].name: {entry.label!r} is already the name of rewards[{seen[entry.label]}]; "
                    f"give one of them a distinct `name`"
                )
            seen[entry.label] = i
        return rewards

    @model_validator(mode="before")
    @classmethod
    def _no_old_keys(cls, data):
        if isinstance(data, dict) and "coevolvers" in data:
            raise ValueError(
                "coevolvers: no longer a setting; write the list under `coevolver` instead (coevolver: [{kind: "
                "curriculum}, {kind: skill_bank}]; one co-evolver stays a mapping)"
            )
        return data

    @field_validator("coevolver", mode="before")
    @classmethod
    def _one_or_several(cls, value):
        """One mapping or a list of them, held as a list. Each entry is validated here, so an error
        names the path as written (`coevolver.kind` for a mapping, `coevolver.1.kind` in a list)
        rather than once per shape the union allows."""
        if isinstance(value, list):
            if not value:
                raise ValueError("an empty list: give one co-evolver (a mapping) or a list of them")
            return _COEVOLVER_LIST.validate_python(value)
        return [CoevolverConfig.model_validate(value)]

    @field_serializer("coevolver", mode="wrap")
    def _dump_coevolver(self, entries: list[CoevolverConfig], handler):
        """One co-evolver dumps as its mapping (the params as written and as they always were), several
        as the list."""
        dumped = handler(entries)
        return dumped[0] if len(dumped) == 1 else dumped

    @model_validator(mode="after")
    def _check_dynamic_sampling(self) -> Config:
        if self.rollout.dynamic_sampling.enabled and self.pipeline.shards > 1:
            raise ValueError(
                "rollout.dynamic_sampling.enabled needs pipeline.shards: 1 (its rounds depend on every group of the "
                "batch, which one shard does not see)"
            )
        return self

    @model_validator(mode="after")
    def _check_episodes(self) -> Config:
        if self.problems.source == "guessing" and self.environment.factory is None:
            raise ValueError(
                "problems.source guessing needs environment.factory (coevo.environments.guessing:GuessingGame, or a "
                "class of your own): without an environment to guess against, a game's secret cannot be found"
            )
        if not self.episodes:
            if self.bootstrap.tool_calls.steps:
                raise ValueError(
                    "bootstrap.tool_calls.steps demonstrates tool calls: it needs tools or environment.factory"
                )
            return self
        for i, path in enumerate(self.tools):
            if not _PLUGIN_PATH.fullmatch(path):
                raise ValueError(f"tools[{i}]: {path!r} must name a function as 'module:function'")
        if self.environment.factory is not None and not _PLUGIN_PATH.fullmatch(self.environment.factory):
            raise ValueError(f"environment.factory: {self.environment.factory!r} must name a class as 'module:Class'")
        if self.prompt.format != "chat":
            raise ValueError(
                "tools and environment.factory need prompt.format: chat (an episode's tool turns are chat turns)"
            )
        if self.update_context == "strip":
            raise ValueError(
                "tools and environment.factory need coevolver.update_context: keep (the update trains on the "
                "episode's tokens as sampled; a stripped prompt would not lead to its tool turns)"
            )
        if self.environment.max_tokens < self.sampling.max_new_tokens:
            raise ValueError(
                f"environment.max_tokens ({self.environment.max_tokens}) is below sampling.max_new_tokens "
                f"({self.sampling.max_new_tokens}): an episode could not fit its first turn"
            )
        return self

    @model_validator(mode="after")
    def _check_roles(self) -> Config:
        kinds = [entry.kind for entry in self.coevolver_list]
        if "unit_tests" in kinds and "tester" not in self.rollout.roles:
            raise ValueError(
                "coevolver kind unit_tests keeps the tester role's tests: set rollout.roles: [solver, tester]"
            )
        if self.rollout.roles == ["solver"]:
            return self
        others = sorted(set(kinds) - ROLE_AWARE_KINDS)
        if others:
            raise ValueError(
                f"rollout.roles {self.rollout.roles}: co-evolver kinds {others} read every rollout as the solver's; "
                f"with several roles use {sorted(ROLE_AWARE_KINDS)}"
            )
        if self.rollout.dynamic_sampling.enabled or self.episodes:
            raise ValueError(
                f"rollout.roles {self.rollout.roles} samples one turn per role: it cannot be combined with "
                "rollout.dynamic_sampling, tools or environment.factory"
            )
        if [entry.function for entry in self.rewards] != ["verifier"]:
            raise ValueError(
                f"rollout.roles {self.rollout.roles}: each role's reward is CURE's (code.cure); `rewards:` must be "
                "the default (the verifier alone)"
            )
        return self

    @model_validator(mode="after")
    def _check_coevolvers(self) -> Config:
        entries = self.coevolver_list
        for i, entry in enumerate(entries):
            # another kind reads none of its curriculum section (so `--set coevolver.kind=none` on params
            # that propose is plain GRPO); a curriculum's proposer writes arithmetic problems only
            if (
                entry.kind == "curriculum"
                and entry.curriculum.proposer.enabled
                and self.problems.source != "arithmetic"
            ):
                where = f"coevolver[{i}]" if len(entries) > 1 else "coevolver"
                raise ValueError(
                    f"{where}.curriculum.proposer.enabled needs problems.source: arithmetic (got source "
                    f"{self.problems.source!r}); set {where}.curriculum.proposer.enabled=false"
                )
        if len(entries) == 1:
            return self
        kinds = [entry.kind for entry in entries]
        for i, kind in enumerate(kinds):
            if kind == "none":
                raise ValueError(f"coevolver[{i}].kind: 'none' cannot be combined with other co-evolvers; leave it out")
            if kind in kinds[:i]:
                raise ValueError(
                    f"coevolver[{i}].kind: {kind!r} is already coevolver[{kinds.index(kind)}]; each kind at most once"
                )
        return self

    # ---- derived (the only place values are computed from several fields) ----
    @property
    def coevolver_list(self) -> list[CoevolverConfig]:
        """The run's co-evolvers in update order: `coevolver` as a list (one entry when it is a mapping)."""
        return self.coevolver

    @property
    def gives_context(self) -> bool:
        """Whether a listed co-evolver puts context into the rollout prompts (a skill bank or a memory)."""
        return any(entry.kind in CONTEXT_KINDS for entry in self.coevolver_list)

    @property
    def update_context(self) -> Literal["strip", "keep"]:
        """coevolver.update_context, or "keep" when any listed co-evolver keeps its context in the
        update; always "keep" when no co-evolver gives context: the rollouts' prompts are already the
        bare problems (a conversation's own system and earlier turns included), nothing to strip."""
        if not self.gives_context:
            return "keep"
        return "keep" if any(entry.update_context == "keep" for entry in self.coevolver_list) else "strip"

    @property
    def episodes(self) -> bool:
        """Whether a sample is a multi-turn episode: tools or an environment class are configured."""
        return bool(self.tools) or self.environment.factory is not None

    @property
    def trained_roles(self) -> list[str]:
        """The roles the policy update trains: rollout.train_roles, or every role sampled."""
        return list(self.rollout.roles if self.rollout.train_roles is None else self.rollout.train_roles)

    @property
    def rollouts_per_iter(self) -> int:
        """Samples per iteration: problems_per_iter x group_size x the roles sampled."""
        return self.rollout.problems_per_iter * self.rollout.group_size * len(self.rollout.roles)

    @property
    def levels(self) -> list[int]:
        """Difficulty levels in the mix: operand digit counts."""
        return list(range(self.problems.min_digits, self.problems.max_digits + 1))

    @property
    def catalog_path(self) -> Path:
        """The run's DuckDB catalog of rollouts, rewards and skill events."""
        return self.run.out_dir / "catalog.duckdb"

    @property
    def bootstrap_dir(self) -> Path:
        """Where the bootstrapped (or copied-in) initial policy, checkpoint 0, lives (its own DVC output)."""
        return self.run.out_dir / "bootstrap"
