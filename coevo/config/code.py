"""Settings of code problems: the sandbox, CURE rewards, the synthetic family and the code loop."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    Field,
)

from coevo.config.base import Strict


class SandboxConfig(Strict):
    mode: Literal["auto", "namespaces", "rlimits"] = Field(
        "auto",
        description=(
            "Isolation of generated code (coevo/sandbox): namespaces (unshare: no network, private root, pid "
            "namespace), rlimits (limits, scrubbed env, private cwd only), or auto (namespaces when a probe passes, "
            "else rlimits)."
        ),
    )
    wall_s: float = Field(
        10.0,
        gt=0,
        description="Wall-clock limit of one sample (program + all its tests); the process group is killed at it.",
    )
    cpu_s: int = Field(
        5,
        ge=1,
        description=(
            "RLIMIT_CPU of each sandboxed process (the program's and its supervisor's), in seconds; a program ended "
            "at it is a timeout."
        ),
    )
    per_test_s: float = Field(
        2.0,
        gt=0,
        description=(
            "CPU seconds per test snippet (and for loading the program); a program that sleeps is stopped at 5x this "
            "in wall time."
        ),
    )
    memory_mb: int = Field(512, ge=32, description="RLIMIT_AS (address space) of the sandboxed process, in MiB.")
    nproc: int = Field(64, ge=1, description="RLIMIT_NPROC (processes of the sandbox user).")
    nofile: int = Field(64, ge=8, description="RLIMIT_NOFILE (open files).")
    fsize_mb: int = Field(4, ge=1, description="RLIMIT_FSIZE (largest file written), in MiB.")
    output_bytes: int = Field(
        65536, ge=1024, description="stdout+stderr kept per sample; more ends it as crashed (output limit)."
    )
    workers: int | None = Field(None, ge=1, description="Samples run in parallel; null = one per CPU core.")


class CureConfig(Strict):
    binary_from_iter: int | None = Field(
        None,
        ge=1,
        description=(
            "From this code-loop iteration on, use CURE's binary rewards (solution: passes every ground-truth test; "
            "test: accurate); null = never."
        ),
    )
    bank_max_per_problem: int = Field(
        8, ge=1, description="Most tests the test bank keeps per problem (the oldest are dropped first)."
    )


class SynthCodeConfig(Strict):
    families: list[Literal["code-add", "code-sub", "code-mul"]] = Field(
        ["code-add", "code-sub", "code-mul"],
        min_length=1,
        description="Synthetic one-line function families: x+k, x-k, x*k.",
    )
    warm_start_families: list[Literal["code-add", "code-sub", "code-mul"]] = Field(
        ["code-add", "code-sub", "code-mul"],
        min_length=1,
        description=(
            "Families the code warm start demonstrates (the bootstrap of code sources and the code loop's; RL faces "
            "all of `families`)."
        ),
    )
    n_train: int = Field(600, ge=1, description="Synthetic training problems.")
    n_test: int = Field(60, ge=1, description="Synthetic held-out problems.")
    n_val: int = Field(
        30, ge=0, description="Synthetic validation problems (distinct examples from training and test)."
    )
    n_examples: int = Field(
        4, ge=2, le=8, description="Input/output examples shown in the prompt (f(0), f(1) and random others)."
    )
    n_hidden: int = Field(4, ge=1, le=9, description="Hidden ground-truth tests per problem (other inputs).")


class CodeConfig(Strict):
    sandbox: SandboxConfig = Field(
        default_factory=SandboxConfig,
        description="Limits and isolation of the code sandbox (verification, evaluation and the code loop).",
    )
    cure: CureConfig = Field(default_factory=CureConfig, description="CURE rewards and the test bank.")
    synth: SynthCodeConfig = Field(
        default_factory=SynthCodeConfig,
        description="The synthetic code family (problems.source=code-synth and the code loop).",
    )
    iterations: int = Field(20, ge=1, description="Iterations of the code loop (coder + tester co-evolving).")
    problems_per_iter: int = Field(
        8, ge=1, description="Problems per code-loop iteration (each gets a coder group and a tester group)."
    )
    group_size: int = Field(
        8, ge=2, description="Solutions and generated tests per problem in the code loop (n = m = G)."
    )
    train_roles: list[Literal["coder", "tester"]] = Field(
        ["coder", "tester"],
        min_length=1,
        description=(
            "Roles whose rollouts the policy update trains on (ablation: coder only, tester only); both are always "
            "sampled and rewarded."
        ),
    )
    warm_start_steps: int = Field(
        300,
        ge=0,
        description=(
            "Supervised warm-start steps of the tiny policy on both roles' demonstrations (the bootstrap of code "
            "sources and the code loop's)."
        ),
    )
    warm_start_lr: float = Field(3e-3, gt=0, description="AdamW learning rate of the code warm start.")
    warm_start_batch: int = Field(32, ge=1, description="Demonstrations per warm-start step.")
