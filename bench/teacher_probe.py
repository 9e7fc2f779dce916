"""Is the self-teacher better informed than its student? Probe a checkpoint.

    .venv/bin/python bench/teacher_probe.py CHECKPOINT [CHECKPOINT ...]
    .venv/bin/python bench/teacher_probe.py --params examples/smollm2.yaml models/smollm2-135m-instruct


Self-distillation (opsd, rlsd, sdar, PMD) only helps when the same model, given privileged context,
puts more mass on the right answer than it does without it. For each family of the built-in
problems this prints the policy's probability of the correct answer to held-out-style questions
under three prompts: the bare question (the student), the question after its own worked example
(the teacher with `sources: [answer]`, or a level-1 memory entry of the question), and after a
worked example of another question of the family (a retrieved skill). Writes
bench/results/teacher_probe.json.

With --params (results in teacher_probe_chat.json) (an instruct model under `prompt.format: chat`) the prompts are
rendered as the run renders them: the chat template, the question in words ("What is 7 * 8?") and the answer-format
instruction, the worked examples as co-evolver context inside the user turn ("What is 7 * 8?
\boxed{56}", as a level-1 memory entry or a skill reads), and the answer scored is the reply the
instruction asks for, `\boxed{56}`, at the start of the assistant turn.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

from coevo.config import load_config
from coevo.model.checkpoint import load_policy
from coevo.problems.arithmetic import FAMILIES, QUESTION_STYLES
from coevo.rollout.prompting import prompt_renderer
from coevo.update.logprobs import completion_logprobs, pack

ROOT = Path(__file__).resolve().parents[1]
PAIRS = [(7, 8), (3, 4), (9, 6), (6, 7), (4, 9), (8, 3), (5, 5), (2, 9)]


def answer_probability(policy, prompts: list[str], answers: list[str], special_tokens: bool = True) -> list[float]:
    tok = policy.tokenizer
    completions = tok(answers, add_special_tokens=False)["input_ids"]
    packed = pack(
        tok(prompts, add_special_tokens=special_tokens)["input_ids"], completions, tok.pad_token_id, policy.model.device
    )
    with torch.no_grad():
        return completion_logprobs(policy.model, packed).sum(-1).exp().tolist()


def probe(checkpoint: str) -> dict[str, dict[str, float]]:
    """The tiny policy's layout: "7*8=" questions, "7*8=56" examples, the bare answer scored."""
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


def probe_chat(checkpoint: str, params: str) -> dict[str, dict[str, float]]:
    """An instruct model, prompts rendered by the run's chat renderer with the examples as context."""
    cfg = load_config(params)
    policy = load_policy(checkpoint, "cpu")
    renderer = prompt_renderer(cfg.prompt, policy.tokenizer, checkpoint)
    rows: dict[str, dict[str, float]] = {}
    for family, (symbol, op) in FAMILIES.items():
        questions = [QUESTION_STYLES["words"](a, symbol, b) for a, b in PAIRS]
        replies = [f"\\boxed{{{op(a, b)}}}" for a, b in PAIRS]
        examples = [f"{q} {r}" for q, r in zip(questions, replies)]
        contexts = {
            "bare": [[] for _ in questions],
            "own_example": [[e] for e in examples],
            "other_example": [[e] for e in examples[1:] + examples[:1]],
        }
        rows[family] = {}
        for name, context in contexts.items():
            prompts = [renderer.render({"prompt": q, "family": family}, c) for q, c in zip(questions, context)]
            rows[family][name] = statistics.fmean(
                answer_probability(policy, prompts, replies, renderer.add_special_tokens)
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoints", nargs="+")
    parser.add_argument(
        "--params", help="params file of an instruct model's run (prompt.format: chat): render as it does"
    )
    args = parser.parse_args()
    results = {
        checkpoint: probe_chat(checkpoint, args.params) if args.params else probe(checkpoint)
        for checkpoint in args.checkpoints
    }
    for checkpoint, rows in results.items():
        print(
            f"\n{checkpoint}\n| family | p(answer) bare | after its own worked example | after another "
            f"question's |\n|---|---|---|---|"
        )
        for family, row in rows.items():
            print(f"| {family} | {row['bare']:.3g} | {row['own_example']:.3g} | {row['other_example']:.3g} |")
    out = ROOT / "bench" / "results" / ("teacher_probe_chat.json" if args.params else "teacher_probe.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
