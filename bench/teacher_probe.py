"""Is the self-teacher better informed than its student? Probe a checkpoint.

    .venv/bin/python bench/teacher_probe.py CHECKPOINT [CHECKPOINT ...]

Self-distillation (opsd, rlsd, sdar, PMD) only helps when the same model, given privileged context,
puts more mass on the right answer than it does without it. For each family of the built-in
problems this prints the policy's probability of the correct answer to held-out-style questions
under three prompts: the bare question (the student), the question after its own worked example
(the teacher with `sources: [answer]`, or a level-1 memory entry of the question), and after a
worked example of another question of the family (a retrieved skill). Writes
bench/results/teacher_probe.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

from coevo.policy.checkpoint import load_policy
from coevo.policy.logprobs import completion_logprobs, pack
from coevo.problems.arithmetic import FAMILIES

ROOT = Path(__file__).resolve().parents[1]
PAIRS = [(7, 8), (3, 4), (9, 6), (6, 7), (4, 9), (8, 3), (5, 5), (2, 9)]


def answer_probability(policy, prompts: list[str], answers: list[str]) -> list[float]:
    tok = policy.tokenizer
    completions = tok(answers, add_special_tokens=False)["input_ids"]
    packed = pack(tok(prompts)["input_ids"], completions, tok.pad_token_id, policy.model.device)
    with torch.no_grad():
        return completion_logprobs(policy.model, packed).sum(-1).exp().tolist()


def probe(checkpoint: str) -> dict[str, dict[str, float]]:
    policy = load_policy(checkpoint, "cpu")
    rows: dict[str, dict[str, float]] = {}
    for family, (symbol, op) in FAMILIES.items():
        questions = [f"{a}{symbol}{b}=" for a, b in PAIRS]
        answers = [str(op(a, b)) for a, b in PAIRS]
        other = [f"{q}{a}\n" for q, a in zip(questions[1:] + questions[:1], answers[1:] + answers[:1])]
        prompts = {
            "bare": questions,
            "own_example": [f"{q}{a}\n{q}" for q, a in zip(questions, answers)],
            "other_example": [o + q for o, q in zip(other, questions)],
        }
        rows[family] = {name: statistics.fmean(answer_probability(policy, p, answers)) for name, p in prompts.items()}
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoints", nargs="+")
    args = parser.parse_args()
    results = {checkpoint: probe(checkpoint) for checkpoint in args.checkpoints}
    for checkpoint, rows in results.items():
        print(f"\n{checkpoint}\n| family | p(answer) bare | after its own worked example | after another question's |\n|---|---|---|---|")
        for family, row in rows.items():
            print(f"| {family} | {row['bare']:.3f} | {row['own_example']:.3f} | {row['other_example']:.3f} |")
    out = ROOT / "bench" / "results" / "teacher_probe.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
