"""What a run's final checkpoint answers where it is wrong on the 1-digit test cells: is a wrong answer
another operator's result on the same operands (a + b for "What is a - b?"), or one number given to
many questions? And the same checkpoint's accuracy on the cell's training problems beside it: a
cell whose training facts stay passed while its test facts fail is memorised, not forgotten.

A curriculum that trains mostly on 2-3 digit additions loses subtraction and multiplication facts the
uniform GRPO batches keep (docs/benchmarks/curriculum.md). This tells forgetting from interference:
forgotten facts give scattered wrong answers, interference gives the trained operator's result.

Greedy completions of the checkpoint through the HF engine (the recorded evaluation used vLLM: the
script prints both accuracies per cell, so a difference shows), on the run's own test split, asked as the run
asked them. Needs the run directories (not committed: rerun `coevo compare` to make them).

    .venv/bin/python bench/wrong_answers.py bench/results/compare-smollm2-frontier/runs/grpo-seed0 \
        bench/results/compare-smollm2-frontier/runs/curriculum-seed0   # ... -> bench/results/wrong-answers.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from coevo.config import Config  # noqa: E402
from coevo.evaluation import greedy_completions, passed  # noqa: E402
from coevo.io import write_json  # noqa: E402
from coevo.layout import RunLayout  # noqa: E402
from coevo.model.cache import live_engine  # noqa: E402
from coevo.model.checkpoint import read_meta  # noqa: E402
from coevo.problems.math_verifier import extract_final_number  # noqa: E402
from coevo.problems.proposer import parse_question  # noqa: E402
from coevo.rollout.engines import with_prompt_format  # noqa: E402
from coevo.rollout.prompting import prompt_renderer  # noqa: E402
from coevo.store.tables import problems  # noqa: E402

OPERATORS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b}
NAMES = {"add": "a+b", "sub": "a-b", "mul": "a*b"}


def kind_of_wrong(prompt: str, answer: str | None) -> str:
    """'a+b' / 'a-b' / 'a*b' when the wrong answer is another family's result on the same operands,
    'b-a' for a reversed subtraction, 'none' when no number was given, else 'other'."""
    if answer is None:
        return "none"
    _, family, (a, b) = parse_question(prompt)
    try:
        given = int(float(answer))
    except ValueError:
        return "other"
    for other, apply in OPERATORS.items():
        if other != family and given == apply(a, b):
            return NAMES[other]
    return "b-a" if family == "sub" and given == b - a else "other"


def run_report(run: Path, checkpoint: int) -> dict:
    path = RunLayout(run).checkpoint(checkpoint)
    values = read_meta(path)["lineage"]["params"]["values"]  # the params the checkpoint was trained with
    cfg = Config.model_validate({**values, "engine": {**values["engine"], "kind": "hf"}})
    engine = live_engine(cfg, path)
    renderer = prompt_renderer(cfg.prompt, with_prompt_format(engine, cfg).tokenizer)

    def level_one(split: str) -> tuple[pd.DataFrame, list[str], list[bool]]:
        frame = problems(run / "data" / f"{split}.parquet")
        ones = frame[frame["level"] == 1].reset_index(drop=True)
        completions = greedy_completions(
            engine, renderer.render_all(ones.to_dict("records")), cfg.sampling.max_new_tokens
        )
        return ones, completions, passed(ones, completions, cfg)

    ones, completions, verdicts = level_one("test")
    train, _, train_verdicts = level_one("train")
    recorded = json.loads(RunLayout(run).evals(checkpoint).read_text())["verdicts"]
    report = {}
    for family, rows in ones.groupby("family"):
        wrong = [i for i in rows.index if not verdicts[i]]
        given = {i: extract_final_number(completions[i]) for i in wrong}
        report[f"{family}/1"] = {
            "problems": len(rows),
            "acc": 1 - len(wrong) / len(rows),
            "acc_recorded": sum(recorded[pid] for pid in rows["id"]) / len(rows),
            "acc_train": float(pd.Series(train_verdicts)[train["family"] == family].mean()),
            "train_problems": int((train["family"] == family).sum()),
            "wrong": dict(Counter(kind_of_wrong(ones.at[i, "prompt"], given[i]) for i in wrong)),
            "commonest_wrong_answers": Counter(given.values()).most_common(3),
        }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+", help="run directories of a comparison")
    parser.add_argument("--checkpoint", type=int, default=40)
    parser.add_argument("--out", type=Path, default=Path("bench/results/wrong-answers.json"))
    args = parser.parse_args()
    reports = {str(run): run_report(run, args.checkpoint) for run in args.runs}
    write_json(args.out, {"checkpoint": args.checkpoint, "runs": reports})
    for run, cells in reports.items():
        print(run)
        for cell, row in cells.items():
            print(
                f"  {cell}: acc {row['acc']:.2f} (recorded {row['acc_recorded']:.2f}, on its {row['train_problems']} "
                f"training problems {row['acc_train']:.2f}) wrong {row['wrong']} "
                f"commonest {row['commonest_wrong_answers']}"
            )


if __name__ == "__main__":
    main()
