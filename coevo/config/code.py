"""Settings of code problems: the sandbox, CURE rewards, the synthetic family and the warm start."""

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
    truth: Literal["hidden", "generated"] = Field(
        "hidden",
        description=(
            "What judges a solution in training when the tester role is sampled: hidden (CURE: the problem's "
            "ground-truth tests) or generated (no ground-truth test: the consensus of the generated and bank tests, "
            "coevo/code/cure.py). Held-out evaluation always runs the hidden tests."
        ),
    )
    binary_from_iter: int | None = Field(
        None,
        ge=1,
        description=(
            "From this iteration on, use CURE's binary rewards (solution: judged correct; test: accurate); "
            "null = never."
        ),
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
            "Families the code warm start demonstrates (the bootstrap of code sources; RL faces all of `families`)."
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
        description="Limits and isolation of the code sandbox (verification and evaluation).",
    )
    cure: CureConfig = Field(
        default_factory=CureConfig, description="CURE's rewards, when rollout.roles samples the tester."
    )
    synth: SynthCodeConfig = Field(
        default_factory=SynthCodeConfig,
        description="The synthetic code family (problems.source=code-synth).",
    )
    warm_start_steps: int = Field(
        300,
        ge=0,
        description=(
            "Supervised warm-start steps of the tiny policy on the solver's and the tester's demonstrations (the "
            "bootstrap of code sources)."
        ),
    )
    warm_start_lr: float = Field(3e-3, gt=0, description="AdamW learning rate of the code warm start.")
    warm_start_batch: int = Field(32, ge=1, description="Demonstrations per warm-start step.")
