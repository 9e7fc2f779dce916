"""The stages of one iteration as path-in, path-out functions (DESIGN.md, the loop table).

Each stage reads its inputs from disk, computes, writes its outputs atomically and returns a small
JSON-able record of output paths, content hashes and metrics. The plain driver and the Prefect tasks
call exactly these functions, so a stage re-run from its inputs (a resumed flow) reproduces its
outputs: every stage's randomness is derived from (seed, iteration, stage).

Loaded policies are cached in-process by weights hash, so a driver or flow that runs every stage in
one process loads each checkpoint once; the update stage takes the policy out of the cache (it
mutates it) and puts the trained one back under its new hash.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from coevo.coevolvers import build_coevolver, load_coevolver
from coevo.config import Config
from coevo.engines.hf import HFEngine
from coevo.evaluate import evaluate
from coevo.faults import pause_point
from coevo.io import hash_bytes, hash_file, write_json
from coevo.objectives import build_objective
from coevo.policy.bootstrap import bootstrap_policy
from coevo.policy.checkpoint import (
    TRAINER_STATE,
    WEIGHTS,
    Policy,
    load_optimizer_state,
    load_policy,
    policy_version,
    read_meta,
    save_checkpoint,
)
from coevo.policy.update import build_optimizer, policy_update
from coevo.prepare import prepare_problems
from coevo.rollout import run_rollouts
from coevo.sampler import ProblemSampler
from coevo.seeding import derive_seed
from coevo.store.lineage import lineage_record
from coevo.tracking.dvc import dvc_dir_md5
from coevo.verify import verify_rollouts
from schemas.problems import read_problems
from schemas.rewards import read_rewards, write_rewards
from schemas.rollouts import read_rollouts, write_rollouts


class RunLayout:
    """Where each stage's outputs live under run.out_dir."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def checkpoint(self, it: int) -> Path:
        """Checkpoint after iteration `it`; checkpoint 0 is the bootstrap, kept apart as its own DVC stage output."""
        return self.root / "bootstrap" if it == 0 else self.root / "checkpoints" / f"iter_{it:04d}"

    def coevolver(self, it: int) -> Path:
        return self.root / "coevolver" / f"iter_{it:04d}"

    def rollouts(self, it: int) -> Path:
        return self.root / "rollouts" / f"iter_{it:04d}.parquet"

    def rewards(self, it: int) -> Path:
        return self.root / "rewards" / f"iter_{it:04d}.parquet"

    def report(self, it: int) -> Path:
        return self.root / "reports" / f"iter_{it:04d}.json"


def latest_complete(cfg: Config) -> int:
    """The newest iteration whose checkpoint, co-evolver version and report all exist (0 = bootstrap)."""
    layout, k = RunLayout(cfg.run.out_dir), 0
    while layout.checkpoint(k + 1).is_dir() and layout.coevolver(k + 1).is_dir() and layout.report(k + 1).is_file():
        k += 1
    return k


_POLICIES: dict[str, Policy] = {}


def cached_policy(checkpoint: str | Path, cfg: Config) -> Policy:
    version = policy_version(checkpoint)
    if version not in _POLICIES:
        _POLICIES.clear()  # one live policy per process is enough for a sequential loop
        _POLICIES[version] = load_policy(checkpoint, cfg.policy.device, cfg.policy.dtype)
    return _POLICIES[version]


@functools.lru_cache(maxsize=8)
def _validated(reader: Callable[[str], pd.DataFrame], path: str, sha256: str) -> pd.DataFrame:
    return reader(path)


def table(reader: Callable[[str], pd.DataFrame], path: str | Path) -> pd.DataFrame:
    """A stage table read and pandera-validated once per content hash: the verify, co-evolve and
    update stages of one iteration share one read of its shards. Each caller gets a shallow copy:
    under pandas copy-on-write, nothing it does reaches the cached frame."""
    return _validated(reader, str(path), hash_file(path)).copy(deep=False)


def problems(path: str | Path) -> pd.DataFrame:
    """The validated problem split at `path`."""
    return table(read_problems, path)


def prepare_stage(cfg: Config) -> dict:
    """The problem splits as {"train"|"test": {"path", "sha256"}, "dvc_md5": DVC's hash of the data dir}."""
    prepare_problems(cfg)
    data = {name: cfg.problems.data_dir / f"{name}.parquet" for name in ("train", "test")}
    return {
        **{name: {"path": str(path), "sha256": hash_file(path)} for name, path in data.items()},
        "dvc_md5": dvc_dir_md5(cfg.problems.data_dir),
    }


def bootstrap_key(cfg: Config, data: dict) -> str:
    """What the bootstrap checkpoint depends on: seed, policy, warm start, problems and their content."""
    inputs = cfg.model_dump(mode="json", include={"seed", "policy", "bootstrap", "problems"})
    return hash_bytes(json.dumps([inputs, data["dvc_md5"]], sort_keys=True).encode())


def bootstrap_stage(cfg: Config, data: dict) -> dict:
    """Checkpoint 0 (with its lineage) and the initial co-evolver version iter_0000.

    An existing bootstrap with the same key and intact weights is kept (e.g. one DVC restored).
    """
    layout, key = RunLayout(cfg.run.out_dir), bootstrap_key(cfg, data)
    coevolver_dir = layout.coevolver(0)
    content_hash = build_coevolver(cfg.coevolver, cfg.seed).save(coevolver_dir)
    meta = read_meta(cfg.bootstrap_dir)
    weights = cfg.bootstrap_dir / WEIGHTS
    if meta.get("bootstrap_key") != key or not weights.is_file() or hash_file(weights) != meta.get("weights_sha256"):
        lineage = stage_lineage(cfg, 0, None, None, None, coevolver_dir, data)
        policy, meta = bootstrap_policy(cfg, problems(data["train"]["path"]), extra_meta={"lineage": lineage, "bootstrap_key": key})
        _POLICIES.clear()
        _POLICIES[meta["weights_sha256"]] = policy
    return {
        "checkpoint": str(layout.checkpoint(0)),
        "weights_sha256": meta["weights_sha256"],
        "coevolver": str(coevolver_dir),
        "coevolver_hash": content_hash,
        "bootstrap": meta.get("bootstrap", {}),
    }


def rollout_stage(cfg: Config, it: int, checkpoint: str, coevolver: str, train: str) -> dict:
    policy = cached_policy(checkpoint, cfg)
    batch = ProblemSampler(problems(train), cfg.rollout.problems_per_iter, cfg.seed).batch(it)
    variants = load_coevolver(coevolver, cfg.coevolver, cfg.seed).plan(batch, cfg.rollout.group_size)
    frame = run_rollouts(HFEngine(policy, cfg.engine.batch_size), variants, batch, cfg, it, policy_version(checkpoint))
    path = RunLayout(cfg.run.out_dir).rollouts(it)
    write_rollouts(path, frame)
    return {"path": str(path), "sha256": hash_file(path), "metrics": rollout_metrics(frame)}


def verify_stage(cfg: Config, it: int, rollouts: str, train: str) -> dict:
    frame = table(read_rollouts, rollouts)
    rewards = verify_rollouts(frame, problems(train))
    path = RunLayout(cfg.run.out_dir).rewards(it)
    write_rewards(path, rewards)
    return {"path": str(path), "sha256": hash_file(path), "metrics": reward_metrics(frame, rewards)}


def coevolve_stage(cfg: Config, it: int, coevolver: str, rollouts: str, rewards: str, train: str) -> dict:
    """Co-evolver k -> k+1 from this iteration's rollouts and rewards (a frozen one is saved unchanged)."""
    layout = RunLayout(cfg.run.out_dir)
    bank = load_coevolver(coevolver, cfg.coevolver, cfg.seed)
    frame = table(read_rollouts, rollouts)
    batch = problems(train).set_index("id").loc[frame["problem_id"].unique()].reset_index()
    report = bank.update(it, batch, frame, table(read_rewards, rewards))
    write_json(layout.report(it), report)
    pause_point("coevolve", it)  # between the report and the new version: a crash here must not matter
    content_hash = bank.save(layout.coevolver(it))
    return {"path": str(layout.coevolver(it)), "content_hash": content_hash, "report": str(layout.report(it)), "metrics": coevo_metrics(report)}


def update_stage(cfg: Config, it: int, checkpoint: str, rollouts: str, rewards: str, coevolver: str, data: dict) -> dict:
    """Checkpoint k -> k+1. Resumable: reads weights and optimizer state from checkpoint k only."""
    layout = RunLayout(cfg.run.out_dir)
    if it >= 2:  # checkpoint k-1's optimizer state is no longer needed once k exists (k's is kept for re-runs)
        (layout.checkpoint(it - 2) / TRAINER_STATE).unlink(missing_ok=True)
    policy = _POLICIES.pop(policy_version(checkpoint), None) or load_policy(checkpoint, cfg.policy.device, cfg.policy.dtype)
    optimizer = build_optimizer(policy.model, cfg)
    if not load_optimizer_state(checkpoint, optimizer) and it > 1:
        raise FileNotFoundError(f"{checkpoint}: no {TRAINER_STATE}; the update cannot resume exactly from this checkpoint")
    objective = build_objective(cfg.objective)
    reference = load_policy(layout.checkpoint(0), cfg.policy.device, cfg.policy.dtype).model if objective.needs_reference else None
    stats = policy_update(
        policy, optimizer, objective, table(read_rollouts, rollouts), table(read_rewards, rewards), cfg, derive_seed(cfg.seed, it, "update"), reference
    )
    pause_point("update", it)  # trained in memory, nothing saved yet
    lineage = stage_lineage(cfg, it, Path(checkpoint), Path(rollouts), Path(rewards), Path(coevolver), data)
    out = layout.checkpoint(it)
    version = save_checkpoint(out, policy, {"iteration": it, "lineage": lineage}, optimizer)
    _POLICIES.clear()
    _POLICIES[version] = policy
    return {"checkpoint": str(out), "weights_sha256": version, "metrics": stats}


def evaluate_stage(cfg: Config, it: int, checkpoint: str, coevolver: str, test: str) -> dict:
    with_skills = cfg.eval.with_skills and cfg.coevolver.kind != "none"
    context_for = load_coevolver(coevolver, cfg.coevolver, cfg.seed).context_for if with_skills else None
    engine = HFEngine(cached_policy(checkpoint, cfg), cfg.engine.batch_size)
    metrics = evaluate(engine, problems(test), cfg.sampling, cfg.eval.pass_k, derive_seed(cfg.seed, it, "eval"), context_for)
    return {"metrics": metrics}


def stage_lineage(cfg: Config, it: int, parent, rollouts, rewards, coevolver, data: dict) -> dict:
    return lineage_record(
        run_dir=cfg.run.out_dir,
        iteration=it,
        parent=parent,
        rollouts=rollouts,
        rewards=rewards,
        coevolver=coevolver,
        data={name: Path(data[name]["path"]) for name in ("train", "test")},
        dvc_md5=data["dvc_md5"],
        params=cfg.model_dump(mode="json"),
        checkpoint_dir=RunLayout(cfg.run.out_dir).checkpoint(it),
    )


def rollout_metrics(rollouts: pd.DataFrame) -> dict[str, float]:
    return {
        "rollout/completion_len": float(rollouts["completion_ids"].map(len).mean()),
        "rollout/finished_frac": float(rollouts["finished"].mean()),
    }


def reward_metrics(rollouts: pd.DataFrame, rewards: pd.DataFrame) -> dict[str, float]:
    joined = rollouts[["rollout_id", "family"]].merge(rewards, on="rollout_id")
    metrics = {"verify/reward_mean": float(joined["reward"].mean()), "verify/pass_rate": float(joined["passed"].mean())}
    metrics.update({f"verify/pass_rate/{f}": float(g["passed"].mean()) for f, g in joined.groupby("family")})
    return metrics


def coevo_metrics(report: dict) -> dict[str, float]:
    metrics = {f"coevo/{key}": float(len(report.get(key, []))) for key in ("admitted", "rejected", "promoted", "retired", "new_candidates")}
    metrics.update({f"coevo/n_{status}": float(n) for status, n in report.get("counts", {}).items()})
    return metrics
