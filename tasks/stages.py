"""Prefect tasks: one thin adapter per stage over coevo/stages/ (no math here).

Every task takes the validated params as one JSON string, what its iteration runs under as the
loop's `InForce` record and its inputs as the stages' records (coevo/records.py: an `Artifact`, a
`Table`, `Splits`...), and returns its outputs the same way, so tasks pass paths and content hashes,
never tensors or models; the records are frozen dataclasses of strings, numbers and JSON-able dicts
(the params in force among them, as JSON), which Prefect hashes as JSON for the cache keys. The
params travel as a string, not a nested dict, because Prefect walks every nested collection of a
task's arguments twice per task run (its inputs graph and parameter resolution); for the whole
config tree that walk was a quarter of each task run's overhead. Cache keys
are the task's inputs plus its source code (INPUTS + TASK_SOURCE, deliberately without the flow-run
id): a re-run of a failed flow restores every completed stage from its persisted result and resumes
at the stage that failed. Rollout and verification are retried with exponential backoff on error
(`pipeline.retries`); the policy update is never retried blindly: a re-run starts it again from the
checkpoint it read, whose weights and optimizer state are on disk, and reproduces it exactly.
"""

from __future__ import annotations

import functools
from pathlib import Path

from prefect import task
from prefect.cache_policies import INPUTS, TASK_SOURCE
from prefect.tasks import exponential_backoff

from coevo.config import Config
from coevo.loop import set_threads
from coevo.records import Artifact, Bootstrapped, Evolved, InForce, Retained, Splits, Table, Trained
from coevo.stages.coevolve import coevolve_stage
from coevo.stages.evaluate import evaluate_stage
from coevo.stages.merge import merge_stage
from coevo.stages.prepare import bootstrap_stage, prepare_stage
from coevo.stages.retain import retain_stage
from coevo.stages.rollout import rollout_stage
from coevo.stages.update import update_stage
from coevo.stages.verify import verify_stage
from coevo.store.catalog import Catalog, IterationFiles

RESUMABLE = INPUTS + TASK_SOURCE


@functools.lru_cache(maxsize=4)
def _cfg(params: str) -> Config:
    """The Config of a params JSON string, validated once per process (no stage mutates it)."""
    return Config.model_validate_json(params)


@task(name="prepare", cache_policy=RESUMABLE, persist_result=True)
def prepare(params: str) -> Splits:
    return prepare_stage(_cfg(params))


@task(name="bootstrap", cache_policy=RESUMABLE, persist_result=True)
def bootstrap(params: str, data: Splits) -> Bootstrapped:
    return bootstrap_stage(_cfg(params), data)


@task(name="rollout", cache_policy=RESUMABLE, persist_result=True)
def rollout(params: str, now: InForce, checkpoint: Artifact, shard: int = 0, shards: int = 1) -> Table:
    set_threads(_cfg(params))  # a Ray worker process: the run's torch threads and deterministic kernels
    return rollout_stage(_cfg(params), now, checkpoint.path, shard, shards)


@task(name="verify", cache_policy=RESUMABLE, persist_result=True)
def verify(params: str, now: InForce, rollouts: Table, shard: int = 0, shards: int = 1) -> Table:
    return verify_stage(_cfg(params), now, rollouts.path, shard, shards)


@task(name="merge", cache_policy=RESUMABLE, persist_result=True)
def merge(params: str, it: int, rollouts: list[Artifact], rewards: list[Artifact]) -> tuple[Table, Table]:
    """The iteration's tables from its shards (pipeline.shards > 1); the shards' sha256 are in the key."""
    return merge_stage(_cfg(params), it, [r.path for r in rollouts], [r.path for r in rewards])


@task(name="coevolve", cache_policy=RESUMABLE, persist_result=True)
def coevolve(params: str, now: InForce, rollouts: Table, rewards: Table, data: Splits) -> Evolved:
    return coevolve_stage(_cfg(params), now, rollouts.path, rewards.path, data.test.path)


@task(name="policy-update", cache_policy=RESUMABLE, persist_result=True, retries=0)
def update(
    params: str, now: InForce, checkpoint: Artifact, rollouts: Table, rewards: Table, coevolver: Evolved, data: Splits
) -> Trained:
    return update_stage(_cfg(params), now, checkpoint.path, rollouts.path, rewards.path, coevolver.path, data)


@task(name="evaluate", cache_policy=RESUMABLE, persist_result=True)
def evaluate(params: str, now: InForce, checkpoint: Artifact, coevolver: Artifact, data: Splits) -> dict[str, float]:
    return evaluate_stage(_cfg(params), now, checkpoint.path, coevolver.path, data.test.path)


@task(name="retain", cache_policy=RESUMABLE, persist_result=True)
def retain(params: str, it: int, checkpoint: Artifact) -> Retained:
    """Checkpoint retention after iteration `it` (idempotent; cached like the others, so a resumed flow
    replays it without touching the disk). `checkpoint`, the newest, is in the key so that a re-run
    that re-trained iteration `it` retains again."""
    return retain_stage(_cfg(params), it)


@task(name="ingest", cache_policy=RESUMABLE, persist_result=True)
def ingest(params: str, shards: list[dict]) -> dict:
    """The catalog's single writer, for a batch of finished iterations ({"iteration", "rollouts",
    "rewards", "report"} records, each shard as {"path", "sha256"}), in one transaction; idempotent
    per iteration, so a re-run never duplicates rows. The sha256 recorded by the stage that validated
    and wrote a shard lets the catalog skip validating it again when the file still has that content."""
    batch = [
        IterationFiles(
            shard["iteration"],
            shard["rollouts"]["path"],
            shard["rewards"]["path"],
            shard["report"],
            validated={shard[kind]["path"]: shard[kind]["sha256"] for kind in ("rollouts", "rewards")},
        )
        for shard in shards
    ]
    with Catalog(_cfg(params).catalog_path) as catalog:
        return catalog.ingest(batch)


def results_dir(cfg: Config) -> Path:
    """Where the run's task results and cache records are persisted (resuming a run reads them)."""
    return Path(cfg.run.out_dir).resolve() / ".prefect-results"


def configured(cfg: Config) -> dict:
    """The stage tasks by name, with this run's result storage and retry policy."""
    storage = {"result_storage": results_dir(cfg)}
    retrying = {"retries": cfg.pipeline.retries, "retry_delay_seconds": exponential_backoff(cfg.pipeline.retry_delay_s)}
    plain = {
        t.name: t.with_options(**storage)
        for t in (prepare, bootstrap, coevolve, update, evaluate, retain, ingest, merge)
    }
    plain.update({t.name: t.with_options(**storage, **retrying) for t in (rollout, verify)})
    return plain
