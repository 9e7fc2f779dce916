"""Settings of a run as a whole: outputs and retention, the held-out evaluation, MLflow tracking,
Prefect orchestration and Ray."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from coevo.config.base import Strict


class RetentionConfig(Strict):
    keep_last: int | None = Field(
        2,
        ge=1,
        description=(
            "Keep the weights of the newest this many checkpoints with their optimizer state: a resume falls back to "
            "the newest intact one among them; null = keep every checkpoint (no pruning)."
        ),
    )
    keep_every: int = Field(
        50,
        ge=1,
        description=(
            "Also keep every this-many-th iteration's checkpoint (with the default run.checkpoint_every, the ones "
            "MLflow registers)."
        ),
    )
    keep_best: bool = Field(
        True,
        description=(
            "Also keep the checkpoint with the best validation accuracy (val/acc, from "
            "runs/<x>/evals/iter_NNNN.json; never the test split's eval/acc; ties: the earliest; no validation "
            "split: none kept by this rule)."
        ),
    )


class RunConfig(Strict):
    out_dir: Path = Field(
        Path("runs/default"),
        description="Directory for checkpoints, co-evolver versions, rollouts and the run summary.",
    )
    iterations: int = Field(300, ge=1, description="Training iterations (rollout -> verify -> co-evolve -> update).")
    time_budget_s: float | None = Field(
        None,
        gt=0,
        description=(
            "Stop training after this many seconds of wall time (checked between iterations); null = no limit. "
            "Load-dependent: the summary records stopped_by and iterations; rerun with run.iterations=<iterations> "
            "to reproduce."
        ),
    )
    checkpoint_every: int = Field(
        50,
        ge=1,
        description=(
            "Log and register a checkpoint in MLflow every this many iterations (and the last); every iteration is "
            "checkpointed on disk for resume and lineage."
        ),
    )
    retention: RetentionConfig = Field(
        default_factory=RetentionConfig,
        description=(
            "Which checkpoints keep their weights after each iteration; the others are pruned to their metadata "
            "(coevo.json lineage + pruned.json). The bootstrap is never pruned."
        ),
    )


class EvalConfig(Strict):
    every: int = Field(
        25, ge=1, description="Evaluate on the held-out split every this many iterations (and always after the last)."
    )
    pass_k: int = Field(
        4, ge=1, description="k of the sampled pass@k (k samples per problem at the rollout temperature)."
    )
    with_context: bool = Field(
        True,
        description=(
            "Also report held-out accuracy with the co-evolvers' context (skill bank or memory entries) in the prompt "
            "(eval/acc_context); no effect when no listed co-evolver gives context."
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _no_old_keys(cls, data):
        if isinstance(data, dict) and "with_skills" in data:
            raise ValueError("with_skills: renamed; write `with_context` instead (same meaning)")
        return data


class TrackingConfig(Strict):
    mlflow_uri: str = Field(
        "sqlite:///mlflow.db",
        description="MLflow tracking URI; the default is a SQLite store in the project directory.",
    )
    experiment: str = Field("coevo", description="MLflow experiment the runs are logged to.")
    model_name: str = Field(
        "coevo-policy",
        description=(
            "Registered model name; 'best' is set by validation accuracy (val/acc, never the test split's eval/acc), "
            "'@latest' resolves to the newest version."
        ),
    )


class RayConfig(Strict):
    address: str | None = Field(
        None,
        description=(
            "The Ray cluster: null = start a local one for the run (num_workers), auto = the cluster this machine "
            "belongs to (`ray start`), or ray://host:port (Ray Client)."
        ),
    )
    num_workers: int = Field(
        2, ge=1, description="Worker processes (CPUs) of the local cluster started when address is null."
    )
    object_store_mb: int = Field(
        100,
        ge=75,
        description="Object store of the local cluster, in MiB (tasks pass paths and hashes, so it stays small).",
    )

    @field_validator("address")
    @classmethod
    def _known_address(cls, value: str | None) -> str | None:
        if value is None or value == "auto" or value.startswith("ray://") or re.fullmatch(r"[\w.-]+:\d+", value):
            return value
        raise ValueError(
            f"pipeline.ray.address {value!r}: expected null (a local cluster), auto, ray://host:port or host:port"
        )


class PipelineConfig(Strict):
    retries: int = Field(
        2,
        ge=0,
        description=(
            "Retries of the rollout and verification tasks on transient errors (the policy update resumes from its "
            "saved state instead)."
        ),
    )
    retry_delay_s: float = Field(
        2.0, ge=0, description="First retry delay in seconds; doubles with each retry (exponential backoff)."
    )
    ingest_every: int = Field(
        10,
        ge=1,
        description=(
            "Ingest the finished iterations' shards into the DuckDB catalog every this many iterations (and after "
            "the last)."
        ),
    )
    schedule_cron: str = Field(
        "0 2 * * *", description="Cron schedule of the nightly deployment served by `coevo serve`."
    )
    deployment_name: str = Field("nightly", description="Name of the Prefect deployment served by `coevo serve`.")
    task_runner: Literal["local", "ray"] = Field(
        "local",
        description=(
            "Where the rollout and verification shards run: local (in the flow's process, one after another; Ray is "
            "neither imported nor started) or ray (Prefect's RayTaskRunner, pipeline.ray)."
        ),
    )
    shards: int = Field(
        1,
        ge=1,
        description=(
            "Rollout and verification shards per iteration (split by problem; shard j is seeded from (seed, "
            "iteration, j)); 1 = one shard, exactly the unsharded run."
        ),
    )
    ray: RayConfig = Field(default_factory=RayConfig, description="The Ray cluster of task_runner: ray.")
