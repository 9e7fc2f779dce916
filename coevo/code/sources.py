"""Prepare code problem splits train/val/test (problems.source: code-synth, humaneval, code-file) as parquet.

The splits are written as the ordinary problems table (schemas/problems.py, `answer` = JSON of entry
point, tests and reference solution) so the pipeline's stages read them unchanged, after the
decoded problems pass the code-problems schema (schemas/code.py). Sources are a registry.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from coevo.code.problems import (
    from_problems_frame,
    humaneval_problems,
    load_code_file,
    synthetic_splits,
    to_problems_frame,
)
from coevo.config import Config
from coevo.problems.arithmetic import write_splits
from coevo.problems.heldout import check_unseen
from coevo.problems.loader import split_held_out
from coevo.problems.splits import user_splits, write_report
from schemas.problems import read_problems


def _synthetic(cfg: Config) -> dict[str, pd.DataFrame]:
    s = cfg.code.synth
    return synthetic_splits(list(s.families), s.n_train, s.n_test, s.n_val, s.n_examples, s.n_hidden, cfg.seed)


def _humaneval(cfg: Config) -> dict[str, pd.DataFrame]:
    return split_held_out(humaneval_problems(), cfg.problems.test_fraction, cfg.problems.val_fraction, cfg.seed)


def _code_file(cfg: Config) -> dict[str, pd.DataFrame]:
    frame = load_code_file(cfg.problems.path)
    if cfg.problems.test_path is not None:
        return {"report": {}, **user_code_splits(frame, load_code_file(cfg.problems.test_path), cfg)}
    return split_held_out(frame, cfg.problems.test_fraction, cfg.problems.val_fraction, cfg.seed)


def user_code_splits(frame: pd.DataFrame, test: pd.DataFrame, cfg: Config) -> dict:
    """A code file with its own test file: `user_splits` (coevo/problems/splits.py), the math files' rules."""
    report: dict = {}
    return {**user_splits(frame, test, cfg, report), "report": report}


CODE_SOURCES: dict[str, Callable[[Config], dict[str, pd.DataFrame]]] = {
    "code-synth": _synthetic,
    "humaneval": _humaneval,
    "code-file": _code_file,
}


def build_code_splits(cfg: Config) -> dict[str, pd.DataFrame]:
    """Decoded code-problem splits {"train", "val", "test"} (schemas/code.py) of problems.source,
    checked unseen (coevo/problems/heldout.py); nothing is written."""
    if cfg.problems.source not in CODE_SOURCES:
        raise ValueError(f"problems.source {cfg.problems.source!r} is not a code source; known: {sorted(CODE_SOURCES)}")
    splits = CODE_SOURCES[cfg.problems.source](cfg)
    check_unseen(splits, f"problems.source={cfg.problems.source}")
    return splits


def prepare_code_problems(cfg: Config) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Write train/val/test parquet (problems table) to problems.data_dir and read train and test back, decoded and
    validated."""
    splits = build_code_splits(cfg)
    paths = write_splits(cfg.problems.data_dir, *(to_problems_frame(splits[name]) for name in ("train", "test", "val")))
    write_report(cfg, {**splits, "report": {"source": cfg.problems.source, **splits.get("report", {})}})
    return tuple(from_problems_frame(read_problems(paths[name]), paths[name]) for name in ("train", "test"))
