"""Does SmolLM2-135M-Instruct call the calculator before any training? (issue 42's precondition)

Before RL can teach a model to use a tool it must sometimes emit the call format. This probe samples
episodes (coevo/rollout/episodes.py, HF engine, temperature 1, 48 tokens a turn, 3 turns) of 16
*training* problems of the frontier mix's 2-3 digit sub and mul cells, 4 episodes each, under two
prompts: coevo's tool text alone (SmolLM2's chat template ignores `tools=`), and the same with one
worked call in prompt.system. It counts episodes with any `<tool_call>`, with a call that ran, and
whose last turn holds the reference answer.

    coevo import-model smollm2-135m-instruct --out models/smollm2-135m-instruct
    .venv/bin/python bench/tool_call_probe.py --out bench/results/tool-call-probe.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
import yaml

from coevo.config import Config, deep_merge
from coevo.environments.calculator import TOOLS as CALCULATOR_TOOL_PATHS
from coevo.io import write_text
from coevo.model.checkpoint import load_policy
from coevo.prepare import prepare_problems
from coevo.rollout.engines.hf import HFEngine
from coevo.rollout.episodes import sample

ROOT = Path(__file__).resolve().parents[1]
WORKED_CALL = (
    "Use the tools for arithmetic. For example, to compute 12 * 34 reply exactly "
    '<tool_call>{"name": "multiply", "arguments": {"a": 12, "b": 34}}</tool_call> '
    "and after the result comes back, answer with it in \\boxed{}."
)
PROMPTS = {"tool text only": None, "tool text and one worked call": WORKED_CALL}


def probe(engine: HFEngine, system: str | None, data_dir: Path) -> dict:
    raw = yaml.safe_load((ROOT / "examples" / "smollm2.yaml").read_text())
    frontier = {"families": ["sub", "mul"], "bootstrap_families": ["sub", "mul"], "min_digits": 2, "max_digits": 3}
    cfg = Config.model_validate(
        deep_merge(
            raw,
            {
                "engine": {"kind": "hf"},
                "tools": CALCULATOR_TOOL_PATHS,
                "prompt": {"system": system},
                "sampling": {"max_new_tokens": 48},
                "environment": {"max_turns": 3, "max_tokens": 160},
                "problems": {**frontier, "n_train": 400, "n_test": 40, "n_val": 10, "data_dir": str(data_dir)},
            },
        )
    )
    train, _ = prepare_problems(cfg)
    rows = train.sample(16, random_state=0).to_dict("records")
    start = time.perf_counter()
    episodes = [g for group in sample(engine, cfg, rows, None, 4, cfg.sampling, seed=11) for g in group]
    answers = [str(row["answer"]) for row in rows for _ in range(4)]
    return {
        "episodes": len(episodes),
        "any_call": sum(e.tool_calls > 0 for e in episodes),
        "call_ran": sum(e.tool_calls - e.tool_errors > 0 for e in episodes),
        "answer_in_last_turn": sum(answer in e.text for answer, e in zip(answers, episodes)),
        "seconds": round(time.perf_counter() - start, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(2)
    engine = HFEngine(load_policy(ROOT / "models" / "smollm2-135m-instruct", "cpu"))
    with tempfile.TemporaryDirectory() as data:
        found = {name: probe(engine, system, Path(data) / str(i)) for i, (name, system) in enumerate(PROMPTS.items())}
    write_text(args.out, json.dumps(found, indent=1) + "\n")
    print(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()
