"""Rollout and verification of one iteration as pipeline.shards tasks on pipeline.task_runner.

The loop (coevo/loop.py `rollout_and_verify`) asks the flow's runner for an iteration's shards;
they run here, as tasks:

- local (the default): the shard tasks run in the flow's process, one after another; Ray is neither
  imported nor started.
- ray: the shard tasks are submitted to Prefect's RayTaskRunner (prefect-ray) on pipeline.ray.address
  (null: a local cluster of num_workers worker processes started for the run and shut down after it;
  auto: the cluster this machine joined with `ray start`; ray://host:port: Ray Client). Every rollout
  shard is submitted before any is awaited, then every verification shard. Each task runs in a Ray
  worker process and loads the policy from the checkpoint path it is given (tasks pass paths and
  hashes, never tensors). A worker process that dies mid-task (SIGKILL, a lost node) has its task
  re-run by Ray up to pipeline.retries times (Ray's `max_retries`); an error raised inside a task is
  retried by Prefect with exponential backoff, as with the local runner.

With more than one shard a merge task writes the iteration's rollouts and rewards tables from the
shards (coevo/sharding.py), so the co-evolver, the update, the catalog and resume see the same one
table each as in an unsharded run. A task result restored from the cache whose table no longer has
its recorded sha256 is computed again (seeded: the same table), as `remade` says.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from prefect import Task, get_run_logger

from coevo.config import Config
from coevo.loop import Position
from coevo.model.checkpoint import read_pruned
from coevo.records import Artifact, InForce, Table


@contextmanager
def task_runner(cfg: Config) -> Iterator[object | None]:
    """The started task runner of pipeline.task_runner for the flow's iterations (None: local)."""
    if cfg.pipeline.task_runner == "local":
        yield None
        return
    from prefect_ray import RayTaskRunner  # imported only here: the local default never loads Ray
    from prefect_ray.context import RemoteOptionsContext, remote_options

    settings = cfg.pipeline.ray
    if settings.address is None:  # "local": a new cluster even where this machine belongs to one
        init = {
            "address": "local",
            "num_cpus": settings.num_workers,
            "object_store_memory": settings.object_store_mb * 2**20,
            "include_dashboard": False,
        }
    else:
        init = {"address": "auto"} if settings.address == "auto" else {}
    runner = RayTaskRunner(
        address=settings.address if settings.address not in (None, "auto") else None, init_kwargs=init
    )
    with (
        runner,
        remote_options(
            num_cpus=1,
            max_retries=cfg.pipeline.retries,
            runtime_env=same_threads(RemoteOptionsContext.get().current_remote_options),
        ),
    ):
        yield runner


def same_threads(options: dict) -> dict:
    """The Ray tasks' runtime_env (any the caller set, kept) with this process's torch thread count:
    Ray starts workers with OMP_NUM_THREADS=1, and float32 CPU kernels give other low bits with other
    thread counts, so a shard sampled there would not be the shard sampled here (policy.threads, when
    set, is applied in the task as well)."""
    import torch

    env = dict(options.get("runtime_env", {}))
    env["env_vars"] = {**env.get("env_vars", {}), "OMP_NUM_THREADS": str(torch.get_num_threads())}
    return env


def rollouts(t: dict, runner, params: str, now: InForce, at: Position, shards: int) -> list[Table]:
    """The iteration's rollout tables, one per shard, on `runner`
    (None: in this process). A cached shard of a checkpoint retention pruned since cannot be re-made."""
    calls = [
        {"params": params, "now": now, "checkpoint": at.checkpoint, "shard": j, "shards": shards} for j in range(shards)
    ]
    return gather(runner, t["rollout"], calls, possible=read_pruned(at.checkpoint.path) is None)


def rewards(t: dict, runner, params: str, now: InForce, rolled: list[Table]) -> list[Table]:
    """The rewards table of each rollout shard, on `runner`."""
    k = len(rolled)
    calls = [{"params": params, "now": now, "rollouts": r, "shard": j, "shards": k} for j, r in enumerate(rolled)]
    return gather(runner, t["verify"], calls)


def merged(t: dict, params: str, it: int, rolled: list[Table], scored: list[Table]) -> tuple[Table, Table]:
    """The iteration's rollouts and rewards tables from its shards (the merge task, re-made when a
    cached result's tables changed since)."""
    merge = {
        "params": params,
        "it": it,
        "rollouts": [Artifact(r.path, r.sha256) for r in rolled],  # the shards' content, not their metrics
        "rewards": [Artifact(r.path, r.sha256) for r in scored],
    }
    rollouts, rewards = t["merge"](**merge)
    if not (rollouts.intact() and rewards.intact()):
        rollouts, rewards = t["merge"].with_options(refresh_cache=True)(**merge)
    return rollouts, rewards


def gather(runner, stage_task: Task, calls: list[dict], possible: bool = True) -> list[Table]:
    """`stage_task`'s results for each keyword set, in order: on `runner`, all submitted first."""
    if runner is None:
        return [remade(None, stage_task, kwargs, possible) for kwargs in calls]
    futures = [runner.submit(stage_task, kwargs) for kwargs in calls]
    return [remade(runner, stage_task, kwargs, possible, future.result()) for future, kwargs in zip(futures, calls)]


def remade(runner, stage_task: Task, kwargs: dict, possible: bool, result: Table | None = None) -> Table:
    """A shard-writing task's result; one restored from the cache whose table was truncated or
    overwritten since (its sha256 differs from the recorded one) is computed again (seeded: the same
    table) when `possible` (rollouts of a checkpoint retention pruned cannot be re-made: the catalog
    ingest then names the damaged table if it still needs it)."""
    result = stage_task(**kwargs) if result is None else result
    if possible and not result.intact():
        get_run_logger().warning(
            f"{result.path}: differs from the sha256 its cached {stage_task.name} result records; re-making it"
        )
        again = stage_task.with_options(refresh_cache=True)
        result = again(**kwargs) if runner is None else runner.submit(again, kwargs).result()
    return result
