"""The starting checkpoint of the episode toy comparison (bench/specs/tiny_episodes.yaml): the tiny
policy of examples/tiny.yaml (seed 0, its shape but a 512-character context, room for two skills
beside an episode) with a chat template for its character tokenizer that lists the tools
(`TOOL_CHAT_TEMPLATE`), taught the calculator's call format by the tool warm start
(`bootstrap.tool_calls`: episodes the calculator's expert plays on the training problems of the
comparison's 1-digit mix). Every arm and seed of the comparison starts from this one checkpoint; the
seeds differ in the RL that follows.

    .venv/bin/python bench/tiny_episodes.py --out models/tiny-tools   # ~7 min on one core
    coevo compare bench/specs/tiny_episodes.yaml --out bench/results/compare-tiny-episodes
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
PROBLEMS = {"max_digits": 1, "n_train": 200, "n_test": 90, "n_val": 10}  # as the comparison's spec sets them


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "models" / "tiny-tools")
    parser.add_argument("--steps", type=int, default=1000, help="tool warm start steps")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as work:
        untrained = Path(work) / "untrained"
        overrides = {
            "policy": {"shape": {"max_position": 512}, "threads": 1},
            "prompt": {"format": "chat", "instruction": {"math": None}},
            "tools": CALCULATOR_TOOL_PATHS,
            "sampling": {"max_new_tokens": 80},
            "coevolver": {"update_context": "keep"},
            "run": {"out_dir": str(Path(work) / "run")},
            "problems": {**PROBLEMS, "data_dir": str(Path(work) / "data")},
        }
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
    report = read_meta(args.out)["tool_warm_start"]
    print(f"{args.out}: the tiny policy, taught the calculator's call format ({report})")


if __name__ == "__main__":
    main()
