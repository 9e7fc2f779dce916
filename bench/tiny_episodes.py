"""The starting checkpoints of the episode toy comparisons: the tiny policy of examples/tiny.yaml
(seed 0, its shape but a longer context: room for two skills beside a calculator episode, or for a
whole guessing game) with a chat template for its character tokenizer that lists the tools
(`TOOL_CHAT_TEMPLATE`), taught the call format by the tool warm start (`bootstrap.tool_calls`:
episodes a built-in environment's expert plays on the comparison's training problems):

- `--environment calculator` (bench/specs/tiny_episodes.yaml): the calculator's tools on the 1-digit
  add/sub/mul mix;
- `--environment guessing --steps 0` (bench/specs/tiny_guessing.yaml): the number-guessing game,
  levels 2-3 (ranges of 3-8 numbers), the checkpoint *before* the warm start: that spec warm-starts
  in each run (`bootstrap.tool_calls`, the expert halving the range by the feedback), on the run's
  own training games.

The calculator comparison's arms and seeds all start from one checkpoint warm-started on seed 0's
training split; the splits depend on the seed, so seeds 1-4 hold out problems it trained on (runs
now refuse that start: bench/unseen_readout.py reads that comparison on the unseen problems). A
spec that starts from `--steps 0` and warm-starts in each run has no such overlap.

    .venv/bin/python bench/tiny_episodes.py --out models/tiny-tools   # ~7 min on one core
    coevo compare bench/specs/tiny_episodes.yaml --out bench/results/compare-tiny-episodes
    .venv/bin/python bench/tiny_episodes.py --environment guessing --steps 0 --out models/tiny-guess-start
    coevo compare bench/specs/tiny_guessing.yaml --out bench/results/compare-tiny-guessing
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import torch

from coevo.config import deep_merge, load_config
from coevo.environments.calculator import TOOLS as CALCULATOR_TOOL_PATHS
from coevo.model.bootstrap import bootstrap_policy, build_tiny_policy
from coevo.model.checkpoint import read_meta
from coevo.model.tokenizer import TOOL_CHAT_TEMPLATE
from coevo.prepare import prepare_problems

ROOT = Path(__file__).resolve().parents[1]
# what each comparison's spec sets: its problems, its tools or environment, its context length
ENVIRONMENTS = {
    "calculator": {
        "problems": {"max_digits": 1, "n_train": 200, "n_test": 90, "n_val": 10},
        "tools": CALCULATOR_TOOL_PATHS,
        "policy": {"shape": {"max_position": 512}},
    },
    "guessing": {
        "problems": {"source": "guessing", "guess_levels": [2, 3], "n_train": 300, "n_test": 200, "n_val": 20},
        "environment": {"factory": "coevo.environments.guessing:GuessingGame", "max_turns": 6},
        "policy": {"shape": {"max_position": 768}},
    },
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--environment", choices=sorted(ENVIRONMENTS), default="calculator")
    parser.add_argument("--out", type=Path, default=ROOT / "models" / "tiny-tools")
    parser.add_argument("--steps", type=int, default=1000, help="tool warm start steps (0: the checkpoint before it)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as work:
        untrained = Path(work) / "untrained"
        overrides = deep_merge(
            ENVIRONMENTS[args.environment],
            {
                "policy": {"threads": 1},
                "prompt": {"format": "chat", "instruction": {"math": None}},
                "sampling": {"max_new_tokens": 80},
                "coevolver": {"update_context": "keep"},
                "run": {"out_dir": str(Path(work) / "run")},
                "problems": {"data_dir": str(Path(work) / "data")},
            },
        )
        policy = build_tiny_policy(load_config(ROOT / "examples" / "tiny.yaml", overrides))
        policy.tokenizer.chat_template = TOOL_CHAT_TEMPLATE
        policy.model.save_pretrained(untrained)
        policy.tokenizer.save_pretrained(untrained)
        warm = {
            "policy": {"checkpoint": str(untrained)},
            "bootstrap": {"tool_calls": {"steps": args.steps, "lr": 3e-3, "batch_size": 16}},
        }
        cfg = load_config(ROOT / "examples" / "tiny.yaml", deep_merge(overrides, warm))
        train, _ = prepare_problems(cfg)
        bootstrap_policy(cfg, train)
        if args.out.exists():
            shutil.rmtree(args.out)
        shutil.copytree(cfg.bootstrap_dir, args.out)
    report = read_meta(args.out).get("tool_warm_start")
    print(f"{args.out}: the tiny policy for the {args.environment}'s episodes (tool warm start: {report})")


if __name__ == "__main__":
    main()
