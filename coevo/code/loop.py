"""The code loop: a coder and a unit tester (two role prompts of one policy) co-evolve with CURE.

One iteration, timed per phase (verl's `fit`):
1. rollout: for each problem, G solutions (`prompt` -> expression) and G tests
   (`spec + "assert f("` -> `x)==y`) sampled by coevo's HF engine through `run_rollouts`;
2. verify: the pass table solutions x (ground-truth + generated + bank tests) runs in the sandbox;
   CURE rewards for both roles (coevo/code/cure.py) land in a rewards table with verdict details;
3. co-evolve: the test bank admits accurate, discriminating tests and retires bank tests that
   reject a correct solution; it is saved as a new version (directory + manifest);
4. policy update: both roles (`code.train_roles`) in one GRPO-family update (`policy_update` with
   the configured objective); each problem-role pair is one group, so the group advantage is CURE's
   per-problem z-normalisation.
Evaluation (before and after): greedy coder pass rate on the held-out synthetic problems, greedy
tester accuracy there (generated test passes the reference solution), and the test bank's
accuracy (share of bank tests the reference solution of their problem passes).

Departures: the tiny policy writes one test per sample (CURE samples several per response); the
loop's problems are always the synthetic family (`code.synth`), whose spec comment gives the tester
its prompt; rollout/reward shards are validated and written, but the loop has no Prefect flow or
catalog ingest.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from coevo.code.execution import execute_tables, inaccurate_bank_tests, rewards_frame
from coevo.code.problems import (
    TESTER_CUE,
    generate_synthetic,
    program_of,
    tester_prompt,
)
from coevo.code.unit_test_bank import TESTER_SUFFIX, TestBank
from coevo.code.verifier import sandbox_limits
from coevo.code.warm_start import code_warm_start
from coevo.config import CoevolverConfig, Config, ConfigError, SamplingConfig
from coevo.io import write_json
from coevo.model.bootstrap import build_tiny_policy
from coevo.model.checkpoint import load_policy, save_checkpoint
from coevo.rollout.engines.hf import HFEngine
from coevo.rollout.sampler import ProblemSampler
from coevo.rollout.stage import run_rollouts
from coevo.sandbox import Job, isolation_for, run_jobs
from coevo.seeding import derive_seed
from coevo.types import ContextVariant
from coevo.update.objectives import build_objective
from coevo.update.stage import build_optimizer, policy_update
from schemas.rewards import write_rewards
from schemas.rollouts import write_rollouts

GREEDY = SamplingConfig(temperature=0.0, top_p=1.0, max_new_tokens=8)


def loop_config(cfg: Config) -> Config:
    """Derived: the Config the GRPO machinery sees here (rollout shape from code.*)."""
    rollout = cfg.rollout.model_copy(
        update={"problems_per_iter": cfg.code.problems_per_iter, "group_size": cfg.code.group_size}
    )
    return cfg.model_copy(update={"rollout": rollout})


def role_frame(batch: pd.DataFrame) -> pd.DataFrame:
    """Both roles of each problem as rows run_rollouts can sample: coder (id) and tester (id + suffix)."""
    tester = pd.DataFrame(
        {
            "id": batch["id"] + TESTER_SUFFIX,
            "family": batch["family"],
            "prompt": [tester_prompt(p) for p in batch["prompt"]],
        }
    )
    return pd.concat([batch[["id", "family", "prompt"]], tester], ignore_index=True)


def evaluate_code(engine: HFEngine, test: pd.DataFrame, cfg: Config, seed: int) -> dict[str, float]:
    """Greedy coder pass rate and greedy tester accuracy (its test passes the reference solution) on `test`."""
    limits, mode = sandbox_limits(cfg.code.sandbox), cfg.code.sandbox.mode
    roles = role_frame(test)
    sampling = GREEDY.model_copy(update={"max_new_tokens": cfg.sampling.max_new_tokens})
    texts = [g[0].text for g in engine.generate(list(roles["prompt"]), 1, sampling, seed)]
    solutions, tests = texts[: len(test)], texts[len(test) :]
    reference = [program_of(p, s) for p, s in zip(test["prompt"], test["solution"])]
    jobs = [Job(program_of(p, s), tuple(t)) for p, s, t in zip(test["prompt"], solutions, test["tests"])]
    jobs += [Job(ref, (TESTER_CUE + t,)) for ref, t in zip(reference, tests)]
    verdicts = run_jobs(jobs, limits, mode, cfg.code.sandbox.workers)
    metrics = {
        "eval/coder_pass_rate": float(np.mean([v.passed for v in verdicts[: len(test)]])),
        "eval/tester_accuracy": float(np.mean([v.passed for v in verdicts[len(test) :]])),
    }
    return metrics


def bank_accuracy(bank: TestBank, problems: pd.DataFrame, cfg: Config) -> float | None:
    """Share of bank tests that the reference solution of their problem passes (None for an empty bank)."""
    by_id = problems.set_index("id")
    pairs = [(pid, t) for pid in sorted(bank.tests) for t in bank.tests_for(pid) if pid in by_id.index]
    if not pairs:
        return None
    jobs = [Job(program_of(by_id.at[pid, "prompt"], by_id.at[pid, "solution"]), (t,)) for pid, t in pairs]
    return float(
        np.mean(
            [
                v.passed
                for v in run_jobs(
                    jobs, sandbox_limits(cfg.code.sandbox), cfg.code.sandbox.mode, cfg.code.sandbox.workers
                )
            ]
        )
    )


def code_iteration(state: dict, it: int) -> dict:
    """One rollout -> verify -> co-evolve -> update iteration; returns its metrics and phase times."""
    cfg, policy, bank, out = state["cfg"], state["policy"], state["bank"], state["out"]
    times, start = {}, time.perf_counter()
    batch = state["sampler"].batch(it)
    roles = role_frame(batch)
    variants = [ContextVariant(problem_id=pid, variant="solo", n=cfg.rollout.group_size) for pid in roles["id"]]
    rollouts = run_rollouts(HFEngine(policy, cfg.engine.batch_size), variants, roles, cfg, it, state["version"])
    write_rollouts(out / "rollouts" / f"iter_{it:04d}.parquet", rollouts)
    times["time/rollout"], start = time.perf_counter() - start, time.perf_counter()
    tables = execute_tables(
        batch,
        rollouts,
        {pid: bank.tests_for(pid) for pid in batch["id"]},
        sandbox_limits(cfg.code.sandbox),
        cfg.code.sandbox.mode,
    )
    binary = cfg.code.cure.binary_from_iter is not None and it >= cfg.code.cure.binary_from_iter
    rewards, verify_stats = rewards_frame(rollouts, tables, binary)
    write_rewards(out / "rewards" / f"iter_{it:04d}.parquet", rewards)
    times["time/verify"], start = time.perf_counter() - start, time.perf_counter()
    report = bank.update(it, batch, rollouts, rewards)
    report["retired"] = [
        t
        for table in tables
        for t in inaccurate_bank_tests(table)
        if bank.retire(it, table.problem_id, t, "rejected a correct solution")
    ]
    bank.save(out / "test_bank" / f"iter_{it:04d}")
    times["time/coevolve"], start = time.perf_counter() - start, time.perf_counter()
    trained = (
        rollouts["problem_id"]
        .str.endswith(TESTER_SUFFIX)
        .map({False: "coder", True: "tester"})
        .isin(cfg.code.train_roles)
    )
    seed = derive_seed(
        cfg.seed, it, "code-update"
    )  # the HF engine sampled with this very model: its logprobs are pi_old
    stats = policy_update(
        policy,
        state["optimizer"],
        state["objective"],
        rollouts[trained],
        rewards[trained.to_numpy()],
        cfg,
        seed,
        engine_is_trainer=True,
    )
    times["time/update"] = time.perf_counter() - start
    return {
        "iteration": it,
        **verify_stats,
        **{k: v for k, v in stats.items() if isinstance(v, float)},
        **times,
        "coevo/bank_size": float(bank.size()),
        "coevo/admitted": float(len(report["admitted"])),
        "coevo/retired": float(len(report["retired"])),
    }


def the_coevolver(cfg: Config) -> CoevolverConfig:
    """The one `coevolver` mapping whose settings (frozen, frozen_after) the code loop's test bank takes."""
    if len(cfg.coevolver_list) > 1:
        kinds = [entry.kind for entry in cfg.coevolver_list]
        raise ConfigError(f"coevolver: the code loop's test bank takes one co-evolver mapping, not a list ({kinds})")
    return cfg.coevolver_list[0]


def run_code_loop(cfg: Config, log=print) -> dict:
    """Warm start, evaluate, `code.iterations` of co-evolution, evaluate; writes under run.out_dir/code."""
    cfg = loop_config(cfg)
    coevolver = the_coevolver(cfg)  # before the warm start: a list stops here
    if cfg.policy.threads:
        torch.set_num_threads(cfg.policy.threads)
    out, wall = Path(cfg.run.out_dir) / "code", time.perf_counter()
    s = cfg.code.synth
    train, test = generate_synthetic(list(s.families), s.n_train, s.n_test, s.n_examples, s.n_hidden, cfg.seed)
    policy = (
        load_policy(cfg.policy.checkpoint, cfg.policy.device, cfg.policy.dtype)
        if cfg.policy.checkpoint
        else build_tiny_policy(cfg)
    )
    warm = asdict(code_warm_start(policy, train, cfg)) if cfg.policy.checkpoint is None else {"steps": 0}
    version = save_checkpoint(
        out / "checkpoints" / "iter_0000", policy, {"iteration": 0, "source": "code-warm-start", "warm_start": warm}
    )
    bank = TestBank(coevolver, cfg.seed, cfg.code.cure)
    bank.save(out / "test_bank" / "iter_0000")
    state = {
        "cfg": cfg,
        "policy": policy,
        "bank": bank,
        "out": out,
        "version": version,
        "sampler": ProblemSampler(train, cfg.rollout.problems_per_iter, cfg.seed),
        "optimizer": build_optimizer(policy.model, cfg),
        "objective": build_objective(cfg.objective),
    }
    before = evaluate_code(HFEngine(policy), test, cfg, derive_seed(cfg.seed, 0, "code-eval"))
    log(f"warm start {warm}; before: {before}")
    history = []
    for it in range(1, cfg.code.iterations + 1):
        history.append(code_iteration(state, it))
        state["version"] = f"code-iter-{it}"
        log(
            f"iter {it}: "
            + " ".join(f"{k}={v:.3f}" for k, v in history[-1].items() if k.startswith(("verify/", "coevo/")))
        )
    after = evaluate_code(HFEngine(policy), test, cfg, derive_seed(cfg.seed, cfg.code.iterations, "code-eval"))
    final = save_checkpoint(
        out / "checkpoints" / f"iter_{cfg.code.iterations:04d}",
        policy,
        {"iteration": cfg.code.iterations, "parent": version},
    )
    summary = {
        "before": before,
        "after": after,
        "bank_size": bank.size(),
        "bank_accuracy": bank_accuracy(bank, train, cfg),
        "history": history,
        "warm_start": warm,
        "final_checkpoint": str(out / "checkpoints" / f"iter_{cfg.code.iterations:04d}"),
        "final_weights_sha256": final,
        "wall_time_s": time.perf_counter() - wall,
        "sandbox_mode": state_mode(cfg),
    }
    write_json(out / "summary.json", summary)
    return summary


def state_mode(cfg: Config) -> str:
    return isolation_for(cfg.code.sandbox.mode).name
