"""Step time at equal work: coevo's plain driver, coevo's Prefect flow and TRL's GRPOTrainer, on CPU.

One step = one generation batch: problems_per_iter prompts x group_size completions sampled, scored
by the same verifier, and optim.epochs x (rollouts / minibatch_size) optimizer steps over them. All
arms start from the same bootstrap checkpoint with the same settings (bench/trl_peer.py lists what is
matched); coevo keeps zero-variance groups here (objective.drop_zero_variance=false) because TRL trains
on every completion. Arms alternate in one process, several repetitions; per run the mean over steps
2 .. n-1 (no warm-up, no final evaluation) of:

  step          wall seconds between the starts of consecutive generation batches
  generation    sampling (coevo: HFEngine.generate; TRL: GRPOTrainer._generate)
  reward        verification (coevo: the verify stage; TRL: _calculate_rewards)
  logprob/loss  pi_old logprobs, advantages, forward + backward of the loss (coevo: policy_update
                minus optimizer steps; TRL: training_step, which holds _generate_and_score_completions,
                minus generation and reward)
  optimizer     torch optimizer steps (global step hooks, both)
  co-evolver    the co-evolution stage (coevo only)
  other         the rest: orchestration, tracking, catalog, I/O and validation of stage tables (coevo),
                Trainer/accelerate bookkeeping and data loading (TRL)

    .venv/bin/python bench/trl_step.py [--iterations 8] [--repetitions 3] [--arms driver-grpo,driver,flow,trl]

Real-model mode (`--model DIR`, a local HF checkpoint, e.g. SmolLM2-135M-Instruct): both arms load
that checkpoint (coevo: policy.checkpoint, copied once into the bootstrap cache) with the same LoRA
adapters (coevo: policy.lora; TRL: peft_config) and the chat format (coevo: prompt.format chat; TRL:
conversational prompts built by coevo's chat renderer), on 1-digit add/mul asked in words; HF
generation in both (coevo engine.kind hf, TRL without vLLM). Default arms: driver-grpo,trl.

    .venv/bin/python bench/trl_step.py --model models/smollm2-135m-instruct [--lora-rank 16]
        [--lora-alpha 32] [--lora-targets all-linear] [--lora-lr 2e-4] [--iterations 4] [--repetitions 2]
"""

from __future__ import annotations

import argparse
import gc
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    PHASES,
    RESULTS,
    PhaseClock,
    add_output_args,
    alternate,
    coevo_step,
    fmt,
    prepared_config,
    publish,
    spread,
    table,
)
from bench.trl_peer import build_trainer, trl_version

EQUAL_WORK = {"objective": {"drop_zero_variance": False}}
ARMS = {
    "driver-grpo": {"coevolver": {"kind": "none"}},
    "driver": {},
    "flow": {},
    "trl": {"coevolver": {"kind": "none"}},
}


def real_model(args: argparse.Namespace) -> dict:
    """Overrides of --model mode: examples/smollm2.yaml's model, LoRA, prompt and problem settings;
    8 prompts x 8 completions of up to 16 tokens, 2 optimizer steps of 32 per generation batch."""
    targets = args.lora_targets if args.lora_targets == "all-linear" else args.lora_targets.split(",")
    lora = {"rank": args.lora_rank, "target_modules": targets, "lr": args.lora_lr}
    if args.lora_rank:  # rank 0 = full fine-tuning: the (unused) alpha keeps its default
        lora["alpha"] = args.lora_alpha or 2.0 * args.lora_rank
    return {
        "policy": {"checkpoint": args.model, "lora": lora},
        "prompt": {"format": "chat", "instruction": {"math": "Put the final answer in \\boxed{}."}},
        "problems": {
            "families": ["add", "mul"],
            "bootstrap_families": ["add", "mul"],
            "max_digits": 1,
            "n_train": 160,
            "n_test": 16,  # the driver's evaluations (iteration 0 and the last) fall outside the measured steps
            "question_style": "words",
            "data_dir": str(RESULTS / "cache" / f"data-{Path(args.model).name}"),  # not the tiny policy's shared split
        },
        "sampling": {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 16},
        "engine": {"kind": "hf"},
        "rollout": {"problems_per_iter": 8, "group_size": 8},
        "optim": {"minibatch_size": 32},
        "eval": {"pass_k": 1, "with_context": False},
    }


def trl_arm(run_dir: Path, iterations: int, extra: dict, seed: int) -> dict[str, float]:
    cfg, _ = prepared_config(run_dir, iterations, extra)
    trainer = build_trainer(cfg, cfg.bootstrap_dir, run_dir / "trl", iterations, seed)
    clock = PhaseClock()
    with (
        clock.timing(trainer, "_generate_and_score_completions", "generate_and_score", mark=True),
        clock.timing(trainer, "_generate", "generation"),
        clock.timing(trainer, "_calculate_rewards", "reward"),
        clock.timing(trainer, "training_step", "training_step"),
        clock.optimizer_steps(),
    ):
        trainer.train()
    lengths = [
        entry["completions/mean_length"] for entry in trainer.state.log_history if "completions/mean_length" in entry
    ]
    del trainer
    gc.collect()
    step = clock.per_step("generate_and_score")
    phases = {
        "generation": step.get("generation", 0.0),
        "reward": step.get("reward", 0.0),
        # training_step holds _prepare_inputs, which holds generate-and-score every steps_per_generation steps
        "logprob/loss": step.get("training_step", 0.0) - step.get("generation", 0.0) - step.get("reward", 0.0),
        "optimizer": step.get("optimizer", 0.0),
        "co-evolver": 0.0,
    }
    return {
        "step": step["step"],
        **phases,
        "other": step["step"] - sum(phases.values()),
        "completion_len": sum(lengths) / max(len(lengths), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--iterations", type=int, default=8, help="Generation batches per run (steps 2 .. n-1 are measured)."
    )
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument(
        "--arms",
        default=None,
        help=f"Comma-separated, of {', '.join(ARMS)} (default: all; with --model: driver-grpo,trl).",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        help="section.key=value override for every arm (e.g. rollout.group_size=8).",
    )
    parser.add_argument(
        "--model",
        default=None,
        help=(
            "A local HF checkpoint for both arms (real-model mode, chat format, LoRA); default: the bootstrapped "
            "tiny policy."
        ),
    )
    parser.add_argument(
        "--lora-rank", type=int, default=16, help="--model mode: LoRA rank for both arms (0 = full fine-tuning)."
    )
    parser.add_argument("--lora-alpha", type=float, default=None, help="--model mode: LoRA alpha (default 2 x rank).")
    parser.add_argument(
        "--lora-targets", default="all-linear", help="--model mode: 'all-linear' or comma-separated module names."
    )
    parser.add_argument(
        "--lora-lr", type=float, default=2e-4, help="--model mode: AdamW learning rate of the adapters, both arms."
    )
    add_output_args(parser, "trl_step")
    args = parser.parse_args()
    if args.model is not None and not Path(args.model, "config.json").is_file():
        parser.error(f"--model {args.model}: not a local Hugging Face checkpoint directory (no config.json)")
    import torch

    from coevo.cli_support import parse_overrides, quiet_libraries

    quiet_libraries()
    torch.use_deterministic_algorithms(True, warn_only=True)  # as coevo's driver and flow set it, for every arm
    common = deep(deep(EQUAL_WORK, real_model(args) if args.model else {}), parse_overrides(args.set))
    arms = (args.arms or ("driver-grpo,trl" if args.model else ",".join(ARMS))).split(",")

    def run(arm: str, rep: int) -> dict:
        run_dir = RESULTS / "tmp" / f"trl_step-{arm}-{rep}"  # one MLflow store per run: MLflow keeps engines per URI
        extra = deep(common, ARMS[arm])
        return (
            trl_arm(run_dir, args.iterations, extra, seed=0)
            if arm == "trl"
            else coevo_step("driver" if arm.startswith("driver") else "flow", run_dir, args.iterations, extra)
        )

    runs = alternate(arms, args.repetitions, run)
    summary = {
        arm: {key: spread([r[key] for r in arm_runs]) for key in ("step", *PHASES, "completion_len")}
        for arm, arm_runs in runs.items()
    }
    ratios = {}
    if "trl" in runs:
        trl = summary["trl"]["step"]["median"]
        ratios = {arm: summary[arm]["step"]["median"] / trl for arm in arms if arm != "trl"}
    rows = [
        [
            arm,
            fmt(summary[arm]["step"]),
            *(f"{summary[arm][p]['median']:.3f}" for p in PHASES),
            f"{summary[arm]['completion_len']['median']:.1f}",
            f"{ratios.get(arm, 1.0):.2f}",
        ]
        for arm in arms
    ]
    model = f"{Path(args.model).name}, LoRA r={args.lora_rank}, " if args.model else ""
    title = (
        f"{model}seconds per step (median ±half-range of {args.repetitions} runs x steps 2..{args.iterations - 1}); "
        f"trl {trl_version()}"
    )
    report = {
        "model": args.model,
        "iterations": args.iterations,
        "repetitions": args.repetitions,
        "overrides": common,
        "trl_version": trl_version(),
        "runs": runs,
        "summary": summary,
        "ratio_to_trl": ratios,
    }
    publish(
        "trl_step",
        args.out,
        report,
        table(title, ["arm", "step", *PHASES, "completion len", "x TRL"], rows),
        lambda png: plot(png, arms, summary),
        args.mlflow,
    )


def deep(base: dict, extra: dict) -> dict:
    from coevo.config import deep_merge

    return deep_merge(base, extra)


def plot(png: Path, arms: list[str], summary: dict) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for index, arm in enumerate(arms):
        bottom = 0.0
        for color, phase in enumerate(PHASES):
            height = max(summary[arm][phase]["median"], 0.0)
            ax.bar(index, height, bottom=bottom, color=f"C{color}", label=phase if index == 0 else None)
            bottom += height
        step = summary[arm]["step"]
        ax.errorbar(
            index,
            step["median"],
            yerr=[[step["median"] - step["min"]], [step["max"] - step["median"]]],
            color="k",
            capsize=4,
        )
    ax.set_xticks(range(len(arms)), arms)
    ax.set_ylabel("s per step")
    ax.set_title("step time at equal work, by phase")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=120)


if __name__ == "__main__":
    main()
