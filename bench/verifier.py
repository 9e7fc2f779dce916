"""Math verdicts per second: the integer fast path against math-verify on the same integer answers.

Workload: one default rollout batch, 32 arithmetic problems (levels 1-3) x 16 completions in the
forms models write ("46", "= 46", "The answer is 46.", "\\boxed{46}", off by one), so each reference
answer repeats 16 times, as in the verification stage. Arms, alternated within each round:
  - fast path: `check_answer` (every pair takes the exact integer path);
  - math-verify: `check_symbolic` without its verdict cache (`__wrapped__`), its reference-answer
    parse cache cleared each round (one parse per problem per batch, as a fresh process has);
  - math-verify, fractions: the same batch with answers and completions written as fractions
    (a/1 -> \\frac{2a}{2}), the case math-verify is there for.
Reports the median over rounds of verdicts/s per arm, and checks that both arms agree on every
integer pair.

    .venv/bin/python bench/verifier.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from coevo.problems.arithmetic import generate_arithmetic
from coevo.problems.math_verifier import check_answer
from coevo.problems.symbolic import check_symbolic, parse_answer

FORMS = ("{a}", "= {a}", "The answer is {a}.", "\\boxed{{{a}}}", "{w}", "so it is {w}")


def batch(problems: int = 32, group: int = 16) -> list[tuple[str, str]]:
    """(completion, answer) pairs: `group` completions per problem in the FORMS, right and off by one."""
    train, _ = generate_arithmetic(["add", "sub", "mul"], [1, 2, 3], problems, 3, seed=0)
    pairs = []
    for answer in train["answer"].head(problems):
        for k in range(group):
            pairs.append((FORMS[k % len(FORMS)].format(a=answer, w=int(answer) + 1), answer))
    return pairs


def as_fractions(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(c.replace(a, f"\\frac{{{2 * int(a)}}}{{2}}"), f"{a}/1") for c, a in pairs]


def rate(check, pairs: list[tuple[str, str]]) -> tuple[float, list[bool]]:
    parse_answer.cache_clear()
    start = time.perf_counter()
    verdicts = [check(completion, answer).passed for completion, answer in pairs]
    return len(pairs) / (time.perf_counter() - start), verdicts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    pairs = batch()
    fractions = as_fractions(pairs)
    check_symbolic.__wrapped__("1", "1")  # import math-verify and SymPy outside the clock
    arms = {
        "fast path": (check_answer, pairs),
        "math-verify": (check_symbolic.__wrapped__, pairs),
        "math-verify, fractions": (check_symbolic.__wrapped__, fractions),
    }
    rates: dict[str, list[float]] = {name: [] for name in arms}
    for _ in range(args.rounds):
        verdicts = {}
        for name, (check, work) in arms.items():
            per_second, verdicts[name] = rate(check, work)
            rates[name].append(per_second)
        assert verdicts["fast path"] == verdicts["math-verify"], (
            "the fast path and math-verify disagree on an integer pair"
        )
    print(f"{len(pairs)} pairs ({sum(verdicts['fast path'])} right), median of {args.rounds} rounds")
    for name, values in rates.items():
        print(f"{name:>24}: {statistics.median(values):>10.0f} verdicts/s")
    print(
        f"fast path / math-verify: "
        f"{statistics.median(rates['fast path']) / statistics.median(rates['math-verify']):.0f}x"
    )


if __name__ == "__main__":
    main()
