"""Number-guessing games: the problems of the built-in stateful environment
(coevo/environments/guessing.py), `problems.source: guessing`.

A game is a range of whole numbers and a secret in it. The prompt names the range; the answer is the
secret, which only the environment's feedback reveals (each `guess` is told "too low", "too high" or
"correct"), and the verifier reads the final answer as a number. The family is `guess`; the level L
(`problems.guess_levels`) is the range's size: 2^(L-1) + 1 to 2^L numbers, so halving the range
finds the secret in at most L + 1 guesses. Ranges lie within 1..999.

Held out by construction: no two games of any split have the same range, so no held-out prompt is a
training prompt (the text key of coevo/problems/heldout.py), and no validation or test game hides a
number a training game hides (nor validation one a test game hides): a policy cannot pass a held-out game by
recalling a trained answer.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

FAMILY = "guess"
PROMPT = "I am thinking of a whole number from {low} to {high}. Find it."
HIGHEST = 999  # ranges lie within 1..HIGHEST
COLUMNS = ["id", "family", "level", "prompt", "answer"]
# (split, id prefix), in the order drawn: a held-out game's secret avoids the secrets of the splits before it
SPLIT_ORDER = (("train", ""), ("test", "t-"), ("val", "v-"))


def range_size(level: int, rng: np.random.Generator) -> int:
    """A range size of `level`: 2^(level-1) + 1 to 2^level numbers."""
    return int(rng.integers(2 ** (level - 1) + 1, 2**level + 1))


def guessing_splits(levels: list[int], n_train: int, n_test: int, n_val: int, seed: int) -> dict[str, pd.DataFrame]:
    """{"train", "test", "val"} frames (problems-table columns), cycling over `levels` within each
    split; every game has its own range, and a held-out game's secret is no earlier split's."""
    if not levels or any(not 1 <= level <= 9 for level in levels) or len(set(levels)) != len(levels):
        raise ValueError(
            f"problems.guess_levels must be distinct levels from 1 to 9 (ranges within 1..{HIGHEST}); got {levels}"
        )
    ranges: set[tuple[int, int]] = set()
    hidden: set[int] = set()  # the secrets of the splits drawn so far
    counts = {"train": n_train, "test": n_test, "val": n_val}
    splits = {}
    for index, (split, prefix) in enumerate(SPLIT_ORDER):
        rng = np.random.default_rng([seed & (2**64 - 1), 23, index])
        rows, own = [], set()
        for i in range(counts[split]):
            level = levels[i % len(levels)]
            low, high, secret = _game(level, rng, ranges, hidden if split != "train" else set(), split)
            ranges.add((low, high))
            own.add(secret)
            rows.append({
                "id": f"{prefix}{FAMILY}-{level}-{i // len(levels):06d}",
                "family": FAMILY,
                "level": level,
                "prompt": PROMPT.format(low=low, high=high),
                "answer": str(secret),
            })  # fmt: skip
        hidden |= own
        frame = pd.DataFrame(rows, columns=COLUMNS)
        splits[split] = frame.astype({"id": str, "family": str, "level": np.int64, "prompt": str, "answer": str})
    return splits


def _game(
    level: int, rng: np.random.Generator, taken: set[tuple[int, int]], avoid: set[int], split: str
) -> tuple[int, int, int]:
    """(low, high, secret): a range of `level` no game has yet, and a secret in it not in `avoid`."""
    for _ in range(10_000):
        size = range_size(level, rng)
        low = int(rng.integers(1, HIGHEST - size + 2))
        high = low + size - 1
        if (low, high) in taken:
            continue
        free = [n for n in range(low, high + 1) if n not in avoid]
        if free:
            return low, high, int(free[int(rng.integers(len(free)))])
    raise ValueError(
        f"problems.source=guessing: no new level-{level} game left for the {split} split (every range of that size "
        f"is taken, or every number in the ranges left is an earlier split's secret); ask for fewer problems or more "
        f"levels"
    )
