"""Built-in arithmetic problems: add, sub and mul of two d-digit operands, and the combination addmul
(a+b*c, three d-digit operands), with train/test splits.

A cell is one (family, level); level d means both operands have exactly d digits (level 1: 0..9).
Each cell draws from its own generator seeded by (seed, family, level), so a cell's problems do not
depend on which other cells are in the mix (only on its quotas). The test split takes distinct
operand pairs, at most half of a cell's pair space.

Open cells (pair space larger than the cell's training quota) keep train content-disjoint from test:
train samples with replacement from the pairs test did not take. A closed cell (level 1: 100 pairs
against a larger training quota) is a table of facts the training demand covers anyway, so train
samples from the whole space there and test differs from train by id only: held-out accuracy on a
closed cell measures whether the policy knows the facts, on an open cell whether it generalises.

Combinations (COMBINATIONS, e.g. addmul = a+b*c) index operand tuples the same way with more digits
in base `count`, so a binary family's index-to-operands map, seeds and frames are exactly what they
were before combinations existed; each combination has its own fixed seed code and a top level that
keeps its index space and answers inside int64 (addmul: 6).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from schemas.problems import write_problems

FAMILIES = {"add": ("+", np.add), "sub": ("-", np.subtract), "mul": ("*", np.multiply)}
# Combinations of the binary operators: (symbols between the operands, exact integer answer of an
# [n, arity] int64 operand array, top level). Python precedence applies: a+b*c is a + (b*c).
COMBINATIONS = {"addmul": (("+", "*"), lambda x: x[:, 0] + x[:, 1] * x[:, 2], 6)}
_FAMILY_CODE = {"add": 0, "sub": 1, "mul": 2, "addmul": 3}  # fixed, so seeds do not depend on list order
MAX_LEVEL = 9  # a 9-digit product still fits in int64
COLUMNS = ["id", "family", "level", "prompt", "answer"]
# How a problem is asked: the tiny policy's equation ("22*61=", its tokens are characters) or a question
# an instruct model reads as one ("What is 22 * 61?"); the operands and answers are the same.
QUESTION_STYLES = {
    "equation": lambda a, symbol, b: f"{a}{symbol}{b}=",
    "words": lambda a, symbol, b: f"What is {a} {symbol} {b}?",
}


def generate_arithmetic(
    families: list[str], levels: list[int], n_train: int, n_test: int, seed: int, style: str = "equation"
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Train and test problem frames, spread evenly over the family x level cells.

    If the cells cannot hold `n_test` distinct pairs (each gives at most half its pair space), the
    test split is smaller than asked and a warning says so.
    """
    _check_args(families, levels, n_train, n_test)
    if style not in QUESTION_STYLES:
        raise ValueError(f"arithmetic question style must be one of {sorted(QUESTION_STYLES)}; got {style!r}")
    cells = [(family, level) for family in families for level in levels]
    test_quota = _fill_evenly(n_test, [_space(family, level) // 2 for family, level in cells])
    if sum(test_quota) < n_test:
        warnings.warn(f"arithmetic: only {sum(test_quota)} of n_test={n_test} distinct test problems fit in {cells}", stacklevel=2)
    train_quota = _fill_evenly(n_train, [n_train] * len(cells))
    train_parts, test_parts = [], []
    for (family, level), k_test, k_train in zip(cells, test_quota, train_quota):
        rng = np.random.default_rng([seed & (2**64 - 1), _FAMILY_CODE[family], level])
        space = _space(family, level)
        test_idx = rng.choice(space, size=k_test, replace=False)
        closed = space <= k_train
        train_idx = _sample_excluding(rng, space, k_train, test_idx[:0] if closed else test_idx)
        test_parts.append(_frame(family, level, test_idx, "t-", style))
        train_parts.append(_frame(family, level, train_idx, "", style))
    return _concat(train_parts), _concat(test_parts)


def write_splits(data_dir: str | Path, train: pd.DataFrame, test: pd.DataFrame) -> dict[str, str]:
    """Validate and atomically write train.parquet and test.parquet under `data_dir`."""
    paths = {"train": str(Path(data_dir) / "train.parquet"), "test": str(Path(data_dir) / "test.parquet")}
    write_problems(paths["train"], train)
    write_problems(paths["test"], test)
    return paths


def max_level(family: str) -> int:
    """Highest level of a family (binary families: MAX_LEVEL; a combination: its own top level)."""
    return COMBINATIONS[family][2] if family in COMBINATIONS else MAX_LEVEL


def arity(family: str) -> int:
    """Operands of one problem of `family`."""
    return len(COMBINATIONS[family][0]) + 1 if family in COMBINATIONS else 2


def sample_cell(family: str, level: int, size: int, rng: np.random.Generator, prefix: str, style: str = "equation") -> pd.DataFrame:
    """`size` problems of one cell drawn uniformly with replacement (ids `{prefix}{family}-{level}-NNNNNN`)."""
    _check_args([family], [level], size, 0)
    return _concat([_frame(family, level, rng.integers(0, _space(family, level), size=size), prefix, style)])


def _check_args(families: list[str], levels: list[int], n_train: int, n_test: int) -> None:
    known = sorted(FAMILIES) + sorted(COMBINATIONS)
    unknown = [f for f in families if f not in known]
    if not families or unknown:
        raise ValueError(f"arithmetic families must be a non-empty subset of {sorted(FAMILIES)}; got {families} (combinations also allowed: {sorted(COMBINATIONS)})")
    if not levels or any(not 1 <= int(level) <= MAX_LEVEL for level in levels):
        raise ValueError(f"arithmetic levels must be non-empty and within 1..{MAX_LEVEL}; got {levels}")
    too_high = [(f, int(level)) for f in families for level in levels if int(level) > max_level(f)]
    if too_high:
        raise ValueError(f"arithmetic levels above a family's top level (addmul: {max_level('addmul')}): {too_high}")
    if len(set(families)) != len(families) or len(set(levels)) != len(levels):
        raise ValueError(f"arithmetic families and levels must not repeat; got {families}, {levels}")
    if n_train < 0 or n_test < 0:
        raise ValueError(f"n_train and n_test must be >= 0; got {n_train}, {n_test}")


def _operand_range(level: int) -> tuple[int, int]:
    """Smallest operand and count of operands with exactly `level` digits (level 1 includes 0)."""
    low = 0 if level == 1 else 10 ** (level - 1)
    return low, 10**level - low


def _space(family: str, level: int) -> int:
    """Operand tuples of a cell: count**2 pairs for a binary family, count**arity for a combination."""
    return _operand_range(level)[1] ** arity(family)


def _fill_evenly(total: int, caps: list[int]) -> list[int]:
    """Split `total` as evenly as possible over slots with capacities `caps` (earlier slots get the remainder)."""
    quota = [0] * len(caps)
    left = total
    while left > 0:
        open_slots = [i for i, cap in enumerate(caps) if quota[i] < cap]
        if not open_slots:
            break
        share, extra = divmod(left, len(open_slots))
        for rank, i in enumerate(open_slots):
            give = min(caps[i] - quota[i], share + (1 if rank < extra else 0))
            quota[i] += give
            left -= give
    return quota


def _sample_excluding(rng: np.random.Generator, space: int, size: int, excluded: np.ndarray) -> np.ndarray:
    """`size` pair indices drawn uniformly with replacement from range(space) minus `excluded`."""
    out = rng.integers(0, space, size=size)
    bad = np.isin(out, excluded)
    while bad.any():  # excluded is at most half the space, so this ends quickly
        out[bad] = rng.integers(0, space, size=int(bad.sum()))
        bad = np.isin(out, excluded)
    return out


def _frame(family: str, level: int, pair_idx: np.ndarray, prefix: str, style: str) -> pd.DataFrame:
    if family in COMBINATIONS:
        return _combination_frame(family, level, pair_idx, prefix, style)
    low, count = _operand_range(level)
    a = low + pair_idx // count
    b = low + pair_idx % count
    symbol, op = FAMILIES[family]
    result = op(a, b)
    return pd.DataFrame(
        {
            "id": [f"{prefix}{family}-{level}-{i:06d}" for i in range(len(pair_idx))],
            "family": family,
            "level": np.full(len(pair_idx), level, dtype=np.int64),
            "prompt": [QUESTION_STYLES[style](x, symbol, y) for x, y in zip(a.tolist(), b.tolist())],
            "answer": [str(r) for r in result.tolist()],
        },
        columns=COLUMNS,
    )


def _combination_frame(family: str, level: int, idx: np.ndarray, prefix: str, style: str) -> pd.DataFrame:
    """A combination's problems: tuple index -> operands (base-`count` digits, most significant first)."""
    low, count = _operand_range(level)
    symbols, op, _ = COMBINATIONS[family]
    n_ops = len(symbols) + 1
    operands = np.stack([low + (idx // count ** (n_ops - 1 - k)) % count for k in range(n_ops)], axis=1)  # [n, arity]
    return pd.DataFrame(
        {
            "id": [f"{prefix}{family}-{level}-{i:06d}" for i in range(len(idx))],
            "family": family,
            "level": np.full(len(idx), level, dtype=np.int64),
            "prompt": [format_question(style, row, symbols) for row in operands.tolist()],
            "answer": [str(r) for r in op(operands).tolist()],
        },
        columns=COLUMNS,
    )


def format_question(style: str, operands: list[int], symbols: tuple[str, ...]) -> str:
    """The question of any family in `style`: operands joined by symbols (binary families: QUESTION_STYLES)."""
    if style == "equation":
        return "".join(f"{x}{s}" for x, s in zip(operands, (*symbols, "=")))
    return "What is " + " ".join(f"{x} {s}" for x, s in zip(operands, symbols)) + f" {operands[-1]}?"


def _concat(parts: list[pd.DataFrame]) -> pd.DataFrame:
    frame = pd.concat(parts, ignore_index=True)
    return frame.astype({"id": str, "family": str, "prompt": str, "answer": str, "level": np.int64})
