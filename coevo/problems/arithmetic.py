"""Built-in arithmetic problems: add, sub and mul of two d-digit operands, and the combination addmul
(a+b*c, three d-digit operands), with train/test splits.

A cell is one (family, level); level d means both operands have exactly d digits (level 1: 0..9).
Each cell draws from its own generator seeded by (seed, family, level), so a cell's problems do not
depend on which other cells are in the mix (only on its quotas).

Held-out problems are unseen (issue 27): an open cell (pair space larger than its training quota)
holds out distinct commutation classes (a+b and b+a are one problem; sub: the pair itself), at most
half of its pairs, and training samples with replacement from the pairs of the other classes. A
cell's held-out problems are shared between test and validation (`held_out_quotas`) so that
validation covers every cell test covers: a tuning choice read on validation sees every level. A
closed cell (level 1: 100 facts against a larger training quota) is a table the training demand
covers anyway: it is train-only, so no held-out figure counts a fact the policy was trained on; a
mix of closed cells only cannot be held out and is refused.

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
VAL_SPLITS = ("proportional", "after_test")  # problems.val_split: how a cell's held-out problems are shared
# How a problem is asked: the tiny policy's equation ("22*61=", its tokens are characters) or a question
# an instruct model reads as one ("What is 22 * 61?"); the operands and answers are the same.
QUESTION_STYLES = {
    "equation": lambda a, symbol, b: f"{a}{symbol}{b}=",
    "words": lambda a, symbol, b: f"What is {a} {symbol} {b}?",
}


def generate_arithmetic(
    families: list[str], levels: list[int], n_train: int, n_test: int, seed: int, style: str = "equation"
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Train and test problem frames (no validation split); see `arithmetic_splits`."""
    splits = arithmetic_splits(families, levels, n_train, n_test, 0, seed, style)
    return splits["train"], splits["test"]


def arithmetic_splits(
    families: list[str],
    levels: list[int],
    n_train: int,
    n_test: int,
    n_val: int,
    seed: int,
    style: str = "equation",
    val_split: str = "proportional",
) -> dict[str, pd.DataFrame]:
    """{"train", "val", "test"} problem frames, spread evenly over the family x level cells.

    A cell whose pair space its training quota covers (a fact table) is train-only. The held-out
    problems of an open cell are distinct up to commutation, at most half of its pair space, shared
    between test and validation as `held_out_quotas` says; if the open cells cannot hold them, the
    splits are smaller than asked and a warning says so. With no open cell and n_test + n_val > 0 the
    splits cannot be held out: an error names the cells.
    """
    _check_args(families, levels, n_train, n_test + n_val)
    if style not in QUESTION_STYLES:
        raise ValueError(f"arithmetic question style must be one of {sorted(QUESTION_STYLES)}; got {style!r}")
    cells = [(family, level) for family in families for level in levels]
    train_quota = _fill_evenly(n_train, [n_train] * len(cells))
    caps = held_out_caps(families, levels, n_train)
    if n_test + n_val > 0 and not any(caps):
        raise ValueError(
            f"arithmetic: no cell of {cells} can be held out: each one's operand pairs are covered by its training "
            f"quota "
            f"({train_quota}), so test problems would be training problems; add a larger level (problems.max_digits) "
            f"or lower problems.n_train"
        )
    test_quota, val_quota = held_out_quotas(caps, n_test, n_val, val_split)
    for name, quota, asked in (("test", test_quota, n_test), ("val", val_quota, n_val)):
        if sum(quota) < asked:
            warnings.warn(
                (
                    f"arithmetic: only {sum(quota)} of n_{name}={asked} distinct {name} problems fit in the held-out "
                    f"cells of {cells}"
                ),
                stacklevel=2,
            )
    parts: dict[str, list[pd.DataFrame]] = {"train": [], "val": [], "test": []}
    for (family, level), k_test, k_val, k_train in zip(cells, test_quota, val_quota, train_quota):
        rng = np.random.default_rng([seed & (2**64 - 1), _FAMILY_CODE[family], level])
        held, keys = _held_out(rng, family, level, k_test + k_val)
        train_idx = _sample_excluding(rng, family, level, k_train, keys)
        parts["test"].append(_frame(family, level, held[:k_test], "t-", style))
        parts["val"].append(_frame(family, level, held[k_test:], "v-", style))
        parts["train"].append(_frame(family, level, train_idx, "", style))
    return {name: _concat(frames) for name, frames in parts.items()}


def held_out_caps(families: list[str], levels: list[int], n_train: int) -> list[int]:
    """Per family x level cell: the most problems it can hold out (0 for a train-only cell)."""
    cells = [(family, level) for family in families for level in levels]
    train_quota = _fill_evenly(n_train, [n_train] * len(cells))
    return [0 if _space(f, lv) <= k else held_cap(f, lv) for (f, lv), k in zip(cells, train_quota)]


def held_out_quotas(caps: list[int], n_test: int, n_val: int, val_split: str) -> tuple[list[int], list[int]]:
    """Per cell, how many of its held-out problems (at most `caps`) go to test and to validation.

    'after_test': test takes its even share of every cell first and validation what is left, so a
    small cell (level 1 beside a large training quota) can give validation none (how splits were
    made before `problems.val_split` existed). 'proportional': validation takes its even share first,
    but of each cell at most its part of the cell in the ratio n_val : n_test (rounded up), and test
    the rest, so every cell that holds test problems gives validation some. Where no cell is too
    small for both even shares, the two agree."""
    if val_split == "after_test":
        test_quota = _fill_evenly(n_test, caps)
        return test_quota, _fill_evenly(n_val, [cap - k for cap, k in zip(caps, test_quota)])
    if val_split not in VAL_SPLITS:
        raise ValueError(f"problems.val_split must be one of {VAL_SPLITS}; got {val_split!r}")
    held = n_test + n_val
    val_caps = [-(-cap * n_val // held) if held else 0 for cap in caps]  # ceil(cap * n_val / held)
    val_quota = _fill_evenly(n_val, val_caps)
    return _fill_evenly(n_test, [cap - k for cap, k in zip(caps, val_quota)]), val_quota


def train_only_cells(families: list[str], levels: list[int], n_train: int) -> list[tuple[str, int]]:
    """The (family, level) cells too small to hold out: their training quota covers their pair space."""
    cells = [(family, level) for family in families for level in levels]
    return [cell for cell, cap in zip(cells, held_out_caps(families, levels, n_train)) if cap == 0]


def write_splits(
    data_dir: str | Path, train: pd.DataFrame, test: pd.DataFrame, val: pd.DataFrame | None = None
) -> dict[str, str]:
    """Validate and atomically write train.parquet, test.parquet (and val.parquet) under `data_dir`."""
    names = {"train": train, "test": test} | ({"val": val} if val is not None else {})
    paths = {name: str(Path(data_dir) / f"{name}.parquet") for name in names}
    for name, frame in names.items():
        write_problems(paths[name], frame)
    return paths


def max_level(family: str) -> int:
    """Highest level of a family (binary families: MAX_LEVEL; a combination: its own top level)."""
    return COMBINATIONS[family][2] if family in COMBINATIONS else MAX_LEVEL


def arity(family: str) -> int:
    """Operands of one problem of `family`."""
    return len(COMBINATIONS[family][0]) + 1 if family in COMBINATIONS else 2


def sample_cell(
    family: str, level: int, size: int, rng: np.random.Generator, prefix: str, style: str = "equation"
) -> pd.DataFrame:
    """`size` problems of one cell drawn uniformly with replacement (ids `{prefix}{family}-{level}-NNNNNN`)."""
    _check_args([family], [level], size, 0)
    return _concat([_frame(family, level, rng.integers(0, _space(family, level), size=size), prefix, style)])


def _check_args(families: list[str], levels: list[int], n_train: int, n_test: int) -> None:
    known = sorted(FAMILIES) + sorted(COMBINATIONS)
    unknown = [f for f in families if f not in known]
    if not families or unknown:
        raise ValueError(
            f"arithmetic families must be a non-empty subset of {sorted(FAMILIES)}; got {families} (combinations "
            f"also allowed: {sorted(COMBINATIONS)})"
        )
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


def held_cap(family: str, level: int) -> int:
    """Most held-out problems of a cell: half its pair space, counted up to commutation (a commutative
    family's held-out key removes two ordered pairs from training)."""
    return _space(family, level) // (4 if _commutes(family) else 2)


def _commutes(family: str) -> bool:
    return family in ("add", "mul", "addmul")  # addmul = a+b*c: b*c commutes


def canonical(family: str, level: int, idx: np.ndarray) -> np.ndarray:
    """The index of each operand tuple's commutation class representative (operands of a commutative
    product or sum sorted; sub: the index itself)."""
    if not _commutes(family):
        return idx
    count = _operand_range(level)[1]
    digits = [(idx // count ** (arity(family) - 1 - k)) % count for k in range(arity(family))]  # arity x [n]
    first = 0 if family != "addmul" else 1  # addmul: a stays, b*c commutes
    lo, hi = np.minimum(digits[first], digits[first + 1]), np.maximum(digits[first], digits[first + 1])
    head = digits[0] * count**2 if family == "addmul" else 0
    return head + lo * count + hi


def _held_out(rng: np.random.Generator, family: str, level: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """`k` operand-tuple indices of distinct commutation classes (random order) and their classes."""
    space = _space(family, level)
    if k == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    size = space if space <= 1_000_000 else min(space, 4 * k + 64)  # huge spaces: classes rarely collide
    while True:
        candidates = rng.choice(space, size=size, replace=False)
        classes = canonical(family, level, candidates)
        _, first = np.unique(classes, return_index=True)
        order = np.sort(first)[:k]  # first occurrence of each class, in draw order
        if len(order) == k:
            return candidates[order], classes[order]
        size = min(space, 2 * size)


def _sample_excluding(rng: np.random.Generator, family: str, level: int, size: int, excluded: np.ndarray) -> np.ndarray:
    """`size` tuple indices drawn uniformly with replacement from the cell's tuples whose commutation
    class is not in `excluded`."""
    space = _space(family, level)
    out = rng.integers(0, space, size=size)
    bad = np.isin(canonical(family, level, out), excluded)
    while bad.any():  # excluded covers at most half the space, so this ends quickly
        out[bad] = rng.integers(0, space, size=int(bad.sum()))
        bad = np.isin(canonical(family, level, out), excluded)
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
