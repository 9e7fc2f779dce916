"""The plain-Python training driver: N iterations of rollout -> verify -> co-evolve -> update -> eval.

One readable loop with a timer per phase (verl's `fit`), usable without Prefect. The pipeline's
Prefect flow calls the same stage functions. Outputs under run.out_dir:
  checkpoints/iter_NNNN/   HF checkpoint + coevo.json (iteration 0 is the bootstrap)
  coevolver/iter_NNNN/     co-evolver version after iteration N (iter_0000 = the initial one)
  rollouts/iter_NNNN.parquet, rewards/iter_NNNN.parquet   the validated stage tables
  metrics.jsonl            one JSON line of metrics per iteration
  summary.json             checkpoint paths, curve, skill admissions, wall time
"""

from __future__ import annotations

import copy
import json
import time
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import torch
from rich.console import Console

from coevo.coevolvers import CoEvolver, build_coevolver
from coevo.config import Config
from coevo.engines.hf import HFEngine
from coevo.evaluate import evaluate
from coevo.io import write_json
from coevo.objectives import build_objective
from coevo.policy.bootstrap import bootstrap_policy
from coevo.policy.checkpoint import Policy, save_checkpoint
from coevo.policy.update import build_optimizer, policy_update
from coevo.prepare import prepare_problems
from coevo.rollout import run_rollouts
from coevo.sampler import ProblemSampler
from coevo.seeding import derive_seed
from coevo.verify import verify_rollouts
from schemas.rewards import write_rewards
from schemas.rollouts import validate_rollouts, write_rollouts


class Timers:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str):
        start = time.perf_counter()
        yield
        self.seconds[f"time/{name}"] = self.seconds.get(f"time/{name}", 0.0) + time.perf_counter() - start


def rollout_metrics(rollouts: pd.DataFrame, rewards: pd.DataFrame) -> dict[str, float]:
    joined = rollouts[["rollout_id", "family", "variant", "completion_ids", "finished"]].merge(rewards, on="rollout_id")
    metrics = {
        "rollout/completion_len": float(joined["completion_ids"].map(len).mean()),
        "rollout/finished_frac": float(joined["finished"].mean()),
        "verify/reward_mean": float(joined["reward"].mean()),
        "verify/pass_rate": float(joined["passed"].mean()),
    }
    metrics.update({f"verify/pass_rate/{f}": float(g["passed"].mean()) for f, g in joined.groupby("family")})
    return metrics


def coevo_metrics(report: dict) -> dict[str, float]:
    metrics = {f"coevo/{key}": float(len(report.get(key, []))) for key in ("admitted", "rejected", "promoted", "retired", "new_candidates")}
    metrics.update({f"coevo/n_{status}": float(n) for status, n in report.get("counts", {}).items()})
    return metrics


def set_threads(cfg: Config) -> None:
    if cfg.policy.threads:
        torch.set_num_threads(cfg.policy.threads)
    torch.use_deterministic_algorithms(True, warn_only=True)


class Driver:
    """Holds the run's live objects; `run()` is the loop."""

    def __init__(self, cfg: Config, console: Console | None = None):
        self.cfg, self.console = cfg, console or Console(soft_wrap=True)
        self.out = Path(cfg.run.out_dir)
        self.curve: list[dict] = []
        self.reports: list[dict] = []

    def setup(self) -> None:
        set_threads(self.cfg)
        timers = Timers()
        with timers.phase("prepare"):
            self.train, self.test = prepare_problems(self.cfg)
        with timers.phase("bootstrap"):
            self.policy, self.bootstrap_meta = bootstrap_policy(self.cfg, self.train)
        self.setup_seconds = timers.seconds
        self.engine = HFEngine(self.policy, self.cfg.engine.batch_size)
        self.coevolver: CoEvolver = build_coevolver(self.cfg.coevolver, self.cfg.seed)
        self.objective = build_objective(self.cfg.objective)
        self.optimizer = build_optimizer(self.policy.model, self.cfg)
        self.reference = copy.deepcopy(self.policy.model).eval() if self.objective.needs_reference else None
        self.sampler = ProblemSampler(self.train, self.cfg.rollout.problems_per_iter, self.cfg.seed)
        self.version = self.bootstrap_meta["weights_sha256"]
        self.coevolver_hash = self.coevolver.save(self.out / "coevolver" / "iter_0000")

    def evaluate(self, iteration: int) -> dict[str, float]:
        cfg = self.cfg
        context_for = self.coevolver.context_for if cfg.eval.with_skills and cfg.coevolver.kind != "none" else None
        metrics = evaluate(self.engine, self.test, cfg.sampling, cfg.eval.pass_k, derive_seed(cfg.seed, iteration, "eval"), context_for)
        self.curve.append({"iteration": iteration, **metrics})
        return metrics

    def iteration(self, it: int) -> dict[str, float]:
        cfg, timers = self.cfg, Timers()
        with timers.phase("rollout"):
            batch = self.sampler.batch(it)
            variants = self.coevolver.plan(batch, cfg.rollout.group_size)
            rollouts = run_rollouts(self.engine, variants, batch, cfg, it, self.version)
            write_rollouts(self.out / "rollouts" / f"iter_{it:04d}.parquet", rollouts)
        with timers.phase("verify"):
            rewards = verify_rollouts(rollouts, batch)
            write_rewards(self.out / "rewards" / f"iter_{it:04d}.parquet", rewards)
        with timers.phase("coevolve"):
            report = self.coevolver.update(it, batch, rollouts, rewards)
            self.coevolver_hash = self.coevolver.save(self.out / "coevolver" / f"iter_{it:04d}")
            self.reports.append(report)
        with timers.phase("update"):
            stats = policy_update(
                self.policy, self.optimizer, self.objective, rollouts, rewards, cfg, derive_seed(cfg.seed, it, "update"), self.reference
            )
        metrics = {"iteration": float(it), **rollout_metrics(rollouts, rewards), **coevo_metrics(report), **stats}
        last = it == cfg.run.iterations
        if it % cfg.eval.every == 0 or last:
            with timers.phase("eval"):
                metrics.update(self.evaluate(it))
        if it % cfg.run.checkpoint_every == 0 or last:
            with timers.phase("checkpoint"):
                self.save(it, metrics)
        return {**metrics, **timers.seconds}

    def save(self, it: int, metrics: dict[str, float]) -> None:
        meta = {
            "iteration": it,
            "parent_weights_sha256": self.version,
            "coevolver_hash": self.coevolver_hash,
            "metrics": {k: v for k, v in metrics.items() if k.startswith("eval/")},
        }
        self.version = save_checkpoint(self.out / "checkpoints" / f"iter_{it:04d}", self.policy, meta, self.optimizer)

    def run(self) -> dict:
        start = time.perf_counter()
        self.setup()
        initial = self.evaluate(0)
        self.console.print(f"[bold]bootstrap[/]: {self.bootstrap_meta.get('bootstrap', {})} | eval/acc={initial['eval/acc']:.3f}")
        metrics_path = self.out / "metrics.jsonl"
        metrics_path.unlink(missing_ok=True)
        completed = 0
        for it in range(1, self.cfg.run.iterations + 1):
            metrics = self.iteration(it)
            completed = it
            with metrics_path.open("a") as fh:
                fh.write(json.dumps(metrics, sort_keys=True) + "\n")
            self.console.print(format_progress(metrics))
            budget = self.cfg.run.time_budget_s
            if budget is not None and time.perf_counter() - start > budget and it < self.cfg.run.iterations:
                self.console.print(f"time budget {budget}s reached after iteration {it}")
                if "eval/acc" not in metrics:
                    metrics.update(self.evaluate(it))
                self.save(it, metrics)
                break
        return self.summarise(completed, time.perf_counter() - start)

    def summarise(self, completed: int, wall: float) -> dict:
        checkpoints = sorted(str(p) for p in (self.out / "checkpoints").glob("iter_*"))
        summary = {
            "iterations": completed,
            "wall_time_s": wall,
            "setup_time_s": self.setup_seconds,
            "bootstrap": self.bootstrap_meta,
            "checkpoints": checkpoints,
            "final_checkpoint": checkpoints[-1],
            "final_coevolver": str(self.out / "coevolver" / f"iter_{completed:04d}"),
            "curve": self.curve,
            "initial_eval": self.curve[0],
            "final_eval": self.curve[-1],
            "skills": skill_summary(self.reports),
        }
        write_json(self.out / "summary.json", summary)
        return summary


def skill_summary(reports: list[dict]) -> dict:
    admitted = [entry for r in reports for entry in r.get("admitted", [])]
    rejected = [entry for r in reports for entry in r.get("rejected", [])]
    retired = [entry for r in reports for entry in r.get("retired", [])]
    return {"admitted": admitted, "rejected": rejected, "retired": retired, "n_admitted": len(admitted), "n_rejected": len(rejected)}


def format_progress(m: dict[str, float]) -> str:
    parts = [f"it {int(m['iteration']):3d}", f"pass {m['verify/pass_rate']:.3f}", f"kept {int(m.get('policy/groups_kept', 0))}"]
    if "eval/acc" in m:
        parts.append(f"[bold]eval/acc {m['eval/acc']:.3f}[/]")
        if "eval/acc_skills" in m:
            parts.append(f"acc_skills {m['eval/acc_skills']:.3f}")
    parts.append(f"skills +{int(m.get('coevo/admitted', 0))}/-{int(m.get('coevo/rejected', 0))} active {int(m.get('coevo/n_active', 0) + m.get('coevo/n_stable', 0))}")
    parts.append(" ".join(f"{k[5:]} {v:.2f}s" for k, v in m.items() if k.startswith("time/")))
    return " | ".join(parts)


def train(cfg: Config, console: Console | None = None) -> dict:
    return Driver(cfg, console).run()
