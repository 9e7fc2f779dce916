"""Learning at equal wall-clock: TRL's GRPOTrainer, coevo GRPO-only and coevo with its default
co-evolver (the skill bank), from the same bootstrap checkpoint with the same training budget.

Every arm trains for `--budget` seconds of wall time (evaluation time not counted) and is evaluated
at 0 s and every `--every` seconds: greedy accuracy on the held-out test split, with the same
evaluator for all (greedy completions on coevo's HF engine over the arm's current model, scored by
coevo.evaluation.passed, the pipeline's own verifier).
Seeds vary the RL randomness (problem order, sampling); the bootstrap and the problem splits are
those of params.yaml's seed for every arm. Arms alternate within each seed. coevo runs its stage
functions (coevo.stages) in the plain driver's order; TRL is bench/trl_peer.py's trainer.

    .venv/bin/python bench/trl_learning.py [--budget 120] [--every 30] [--seeds 0,1,2]

Real-model mode (`--model DIR`, e.g. SmolLM2-135M-Instruct): bench/trl_step.py's real-model settings
(the same LoRA adapters, chat format, 1-digit add/mul in words, HF generation in both arms, 8 prompts
x 8 completions) with examples/smollm2.yaml's unseen split (40 test problems no training problem
shares operands or commuted operands with) and its adapter learning rate. Default arms: trl,coevo-grpo.

    .venv/bin/python bench/trl_learning.py --model models/smollm2-135m-instruct --budget 300 --every 100 --seeds 0,1
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    RESULTS,
    add_output_args,
    alternate,
    prepared_config,
    publish,
    table,
)
from bench.trl_peer import build_trainer, trl_version
from bench.trl_step import real_model
from coevo.config import deep_merge

ARMS = {"trl": {"coevolver": {"kind": "none"}}, "coevo-grpo": {"coevolver": {"kind": "none"}}, "coevo-default": {}}


class Budget:
    """Training seconds (evaluation excluded) and the evaluation schedule."""

    def __init__(self, budget: float, every: float, evaluate):
        self.budget, self.every, self.evaluate = budget, every, evaluate
        self.start, self.paused, self.curve = time.perf_counter(), 0.0, []
        self.check(force=True)

    def trained(self) -> float:
        return time.perf_counter() - self.start - self.paused

    def check(self, force: bool = False) -> bool:
        """Evaluate when due; True once the budget is spent (after its final evaluation)."""
        t = min(self.trained(), self.budget)
        due = force or t >= len(self.curve) * self.every or t >= self.budget
        if due:
            started = time.perf_counter()
            self.curve.append({"train_s": t, "acc": self.evaluate()})
            self.paused += time.perf_counter() - started
        return t >= self.budget


def greedy_acc(policy, test, cfg) -> float:
    from coevo.evaluation import greedy_completions, passed
    from coevo.rollout.engines.hf import HFEngine
    from coevo.rollout.prompting import prompt_renderer

    policy.model.eval()
    prompts = prompt_renderer(cfg.prompt, policy.tokenizer).render_all(
        test.to_dict("records")
    )  # prompt.format, as coevo's evaluation
    verdicts = passed(test, greedy_completions(HFEngine(policy, 512), prompts, cfg.sampling.max_new_tokens), cfg)
    return sum(verdicts) / len(verdicts)


def coevo_run(run_dir: Path, extra: dict, seed: int, budget: float, every: float) -> dict:
    from coevo.coevolvers import build_coevolver
    from coevo.layout import RunLayout
    from coevo.model.cache import cached_policy
    from coevo.stages.coevolve import coevolve_stage
    from coevo.stages.in_force import in_force
    from coevo.stages.prepare import prepare_stage
    from coevo.stages.rollout import rollout_stage
    from coevo.stages.update import update_stage
    from coevo.stages.verify import verify_stage
    from coevo.store.tables import problems

    cfg0, _ = prepared_config(run_dir, 10**6, extra)
    data = prepare_stage(cfg0)  # params.yaml's seed: the bootstrap's problems
    cfg = cfg0.model_copy(update={"seed": seed})
    layout, test = RunLayout(cfg.run.out_dir), problems(data.test.path)
    build_coevolver(cfg.coevolver_list[0], cfg.seed).save(layout.coevolver(0))
    state = {"checkpoint": str(layout.checkpoint(0)), "coevolver": str(layout.coevolver(0))}
    clock = Budget(budget, every, lambda: greedy_acc(cached_policy(state["checkpoint"], cfg), test, cfg))
    it = 0
    while not clock.check():
        it += 1
        now = in_force(cfg, it, data)  # reads co-evolver version it-1, which `state` holds
        rollouts = rollout_stage(cfg, now, state["checkpoint"])
        rewards = verify_stage(cfg, now, rollouts.path)
        evolved = coevolve_stage(cfg, now, rollouts.path, rewards.path, data.test.path)
        updated = update_stage(cfg, now, state["checkpoint"], rollouts.path, rewards.path, evolved.path, data)
        state = {"checkpoint": updated.path, "coevolver": evolved.path}
    return {"curve": clock.curve, "steps": it}


def trl_run(run_dir: Path, extra: dict, seed: int, budget: float, every: float) -> dict:
    from transformers import TrainerCallback

    from coevo.model.checkpoint import Policy
    from schemas.problems import read_problems

    cfg, _ = prepared_config(run_dir, 10**6, extra)
    trainer = build_trainer(cfg, cfg.bootstrap_dir, run_dir / "trl", 10**6, seed)
    test = read_problems(Path(cfg.problems.data_dir) / "test.parquet")
    policy = Policy(trainer.model, trainer.processing_class)

    def evaluate() -> float:
        training = trainer.model.training
        acc = greedy_acc(policy, test, cfg)
        trainer.model.train(training)
        return acc

    holder: dict = {}

    class EqualWallClock(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            holder["clock"] = Budget(budget, every, evaluate)

        def on_step_end(self, args, state, control, **kwargs):
            control.should_training_stop = holder["clock"].check()

    trainer.add_callback(EqualWallClock())
    trainer.train()
    steps = trainer.state.global_step // trainer.args.steps_per_generation
    return {"curve": holder["clock"].curve, "steps": steps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=float, default=120.0, help="Training seconds per run (evaluation excluded).")
    parser.add_argument("--every", type=float, default=30.0, help="Evaluate every this many training seconds.")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument(
        "--arms",
        default=None,
        help=f"Comma-separated, of {', '.join(ARMS)} (default: all; with --model: trl,coevo-grpo).",
    )
    parser.add_argument(
        "--model",
        default=None,
        help="A local HF checkpoint for every arm (real-model mode); default: the bootstrapped tiny policy.",
    )
    add_output_args(parser, "trl_learning")
    args = parser.parse_args()
    common = model_overrides(args.model) if args.model else {}
    import torch

    from coevo.cli_support import quiet_libraries

    quiet_libraries()
    torch.use_deterministic_algorithms(True, warn_only=True)
    seeds = [int(s) for s in args.seeds.split(",")]
    arms = (args.arms or ("trl,coevo-grpo" if args.model else ",".join(ARMS))).split(",")
    by_seed = {}
    for seed in seeds:

        def run(arm, rep, seed=seed):
            return (trl_run if arm == "trl" else coevo_run)(
                RESULTS / "tmp" / f"learning-{arm}", deep_merge(common, ARMS[arm]), seed, args.budget, args.every
            )

        by_seed[seed] = alternate(arms[seed % len(arms) :] + arms[: seed % len(arms)], 1, run)
    runs = {arm: [by_seed[seed][arm][0] for seed in seeds] for arm in arms}
    points = len(runs[arms[0]][0]["curve"])
    mean_curve = {
        arm: [statistics.fmean(r["curve"][k]["acc"] for r in arm_runs if k < len(r["curve"])) for k in range(points)]
        for arm, arm_runs in runs.items()
    }
    times = [round(min(k * args.every, args.budget)) for k in range(points)]
    rows = [
        [
            arm,
            *(f"{a:.3f}" for a in mean_curve[arm]),
            " ".join(f"{r['curve'][-1]['acc']:.3f}" for r in runs[arm]),
            f"{statistics.fmean(r['steps'] for r in runs[arm]):.0f}",
        ]
        for arm in arms
    ]
    model = f"{Path(args.model).name}, LoRA, " if args.model else ""
    title = (
        f"{model}held-out greedy accuracy at equal training wall-clock (mean of seeds {args.seeds}); trl "
        f"{trl_version()}"
    )
    report = {
        "model": args.model,
        "overrides": common,
        "budget_s": args.budget,
        "every_s": args.every,
        "seeds": seeds,
        "trl_version": trl_version(),
        "runs": runs,
        "mean_curve": mean_curve,
        "times": times,
    }
    columns = ["arm", *(f"{t} s" for t in times), "final per seed", "steps"]
    publish("trl_learning", args.out, report, table(title, columns, rows), lambda png: plot(png, runs), args.mlflow)


def model_overrides(model: str) -> dict:
    """--model mode: trl_step's real-model settings with examples/smollm2.yaml's split and adapter rate."""
    settings = argparse.Namespace(model=model, lora_rank=16, lora_alpha=32.0, lora_targets="all-linear", lora_lr=5e-4)
    split = {
        "problems": {
            "n_test": 40,
            "n_val": 10,
            "data_dir": str(RESULTS / "cache" / f"data-{Path(model).name}-learning"),
        }
    }
    return deep_merge(real_model(settings), split)


def plot(png: Path, runs: dict) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    for color, (arm, arm_runs) in enumerate(runs.items()):
        for index, run in enumerate(arm_runs):
            ax.plot(
                [p["train_s"] for p in run["curve"]],
                [p["acc"] for p in run["curve"]],
                marker="o",
                color=f"C{color}",
                alpha=0.7,
                label=arm if index == 0 else None,
            )
    ax.set_xlabel("training seconds (evaluation excluded)")
    ax.set_ylabel("held-out greedy accuracy")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=120)


if __name__ == "__main__":
    main()
