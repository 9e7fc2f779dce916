"""Does the tool warm start make SmolLM2-135M-Instruct call the calculator, and answer more unseen
2-3 digit problems with it? (issue 42: the precondition of any RL-with-tools comparison)

bench/tool_call_probe.py measured that SmolLM2-135M-Instruct writes no tool call at all. Here the
run's own bootstrap fine-tunes it (`bootstrap.tool_calls`: the calculator's expert episodes on
training problems, coevo/model/tool_warm_start.py) and greedy episodes of *held-out* problems of the
frontier mix's 2-3 digit sub and mul cells are counted: calls made, calls that ran, answers the
verifier passes. Against the same problems asked without tools, of the model as imported.

    coevo import-model smollm2-135m-instruct --out models/smollm2-135m-instruct
    .venv/bin/python bench/tool_warm_start.py --steps 40 --out bench/results/tool-warm-start.json \
        --keep models/smollm2-tools   # the warm-started checkpoint, for RL with tools to start from
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import torch
import yaml

from coevo.config import Config, deep_merge
from coevo.environments.calculator import TOOLS as CALCULATOR_TOOL_PATHS
from coevo.evaluation import judged
from coevo.io import atomic_path, write_text
from coevo.model.bootstrap import bootstrap_policy
from coevo.model.checkpoint import load_policy, read_meta
from coevo.prepare import prepare_problems
from coevo.rollout.engines.hf import HFEngine
from coevo.rollout.episodes import sample

ROOT = Path(__file__).resolve().parents[1]
FRONTIER = {"families": ["sub", "mul"], "bootstrap_families": ["sub", "mul"], "min_digits": 2, "max_digits": 3}


def config(work: Path, tools: bool, steps: int, lr: float, batch: int) -> Config:
    raw = yaml.safe_load((ROOT / "examples" / "smollm2.yaml").read_text())
    settings = {
        "engine": {"kind": "hf"},
        "sampling": {"max_new_tokens": 48, "temperature": 0.0},
        "problems": {**FRONTIER, "n_train": 400, "n_test": 60, "n_val": 10, "data_dir": str(work / "data")},
        "run": {"out_dir": str(work / "run")},
        "policy": {"lora": {"rank": 0}},
    }
    if tools:
        settings |= {
            "tools": CALCULATOR_TOOL_PATHS,
            "environment": {"max_turns": 3, "max_tokens": 160},
            "coevolver": {"kind": "none", "update_context": "keep"},
            "bootstrap": {"tool_calls": {"steps": steps, "lr": lr, "batch_size": batch}},
        }
    return Config.model_validate(deep_merge(raw, settings))


def held_out(engine: HFEngine, cfg: Config, test) -> dict:
    rows = test.to_dict("records")
    start = time.perf_counter()
    found = [g for (g,) in sample(engine, cfg, rows, None, 1, cfg.sampling, seed=11)]
    passed = judged(test, found, cfg)
    return {
        "problems": len(rows),
        "any_call": sum(g.tool_calls > 0 for g in found),
        "call_ran": sum(g.tool_calls - g.tool_errors > 0 for g in found),
        "passed": sum(passed),
        "accuracy": round(sum(passed) / len(rows), 3),
        "by_family": {
            family: round(
                sum(p for p, r in zip(passed, rows) if r["family"] == family)
                / sum(r["family"] == family for r in rows),
                3,
            )
            for family in FRONTIER["families"]
        },
        "example": found[0].messages if cfg.episodes else found[0].text,
        "seconds": round(time.perf_counter() - start, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--keep", type=Path, help="copy the warm-started checkpoint here (replacing it)")
    parser.add_argument("--checkpoint", type=Path, help="a checkpoint --keep wrote: measure it, do not warm-start")
    args = parser.parse_args()
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        plain = config(work / "plain", False, 0, args.lr, args.batch)
        _, test = prepare_problems(plain)
        imported = held_out(HFEngine(load_policy(plain.policy.checkpoint, "cpu")), plain, test)
        tooled = config(work / "tools", True, args.steps, args.lr, args.batch)
        train, test_again = prepare_problems(tooled)
        assert test_again["id"].tolist() == test["id"].tolist()  # the same held-out problems
        if args.checkpoint is None:
            bootstrap_policy(tooled, train)
        warmed = args.checkpoint or tooled.bootstrap_dir
        report = read_meta(warmed)["tool_warm_start"]
        warm = held_out(HFEngine(load_policy(warmed, "cpu")), tooled, test)
        if args.keep and args.checkpoint is None:
            with atomic_path(args.keep, is_dir=True) as staged:
                shutil.copytree(tooled.bootstrap_dir, staged, dirs_exist_ok=True)
    found = {
        "settings": {name: str(value) if isinstance(value, Path) else value for name, value in vars(args).items()},
        "warm_start": report,
        "imported, no tools": imported,
        "warm-started, calculator": warm,
    }
    write_text(args.out, json.dumps(found, indent=1) + "\n")
    print(json.dumps({k: v for k, v in found.items() if k != "settings"}, indent=1)[:3000])


if __name__ == "__main__":
    main()
