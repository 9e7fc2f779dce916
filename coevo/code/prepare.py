"""Prepare code problem splits (problems.source: code-synth, humaneval, code-file) as parquet.

The splits are written as the ordinary problems table (schemas/problems.py, `answer` = JSON of entry
point, tests and reference solution) so the pipeline's stages read them unchanged, after the
decoded problems pass the code-problems schema (schemas/code.py). Sources are a registry.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from coevo.code.problems import (
    from_problems_frame,
    generate_synthetic,
    humaneval_problems,
    load_code_file,
    to_problems_frame,
)
from coevo.config import Config
from coevo.problems.arithmetic import write_splits
from coevo.problems.loader import split_problems
from schemas.problems import read_problems


def _synthetic(cfg: Config) -> tuple[pd.DataFrame, pd.DataFrame]:
    s = cfg.code.synth
    return generate_synthetic(list(s.families), s.n_train, s.n_test, s.n_examples, s.n_hidden, cfg.seed)


def _humaneval(cfg: Config) -> tuple[pd.DataFrame, pd.DataFrame]:
    return split_problems(humaneval_problems(), cfg.problems.test_fraction, cfg.seed)


def _code_file(cfg: Config) -> tuple[pd.DataFrame, pd.DataFrame]:
    frame = load_code_file(cfg.problems.path)
    if cfg.problems.test_path is not None:
        return frame, load_code_file(cfg.problems.test_path)
    return split_problems(frame, cfg.problems.test_fraction, cfg.seed)


CODE_SOURCES: dict[str, Callable[[Config], tuple[pd.DataFrame, pd.DataFrame]]] = {
    "code-synth": _synthetic,
    "humaneval": _humaneval,
    "code-file": _code_file,
}


def build_code_splits(cfg: Config) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Decoded code-problem splits (schemas/code.py) of problems.source; nothing is written."""
    if cfg.problems.source not in CODE_SOURCES:
        raise ValueError(f"problems.source {cfg.problems.source!r} is not a code source; known: {sorted(CODE_SOURCES)}")
    return CODE_SOURCES[cfg.problems.source](cfg)


def prepare_code_problems(cfg: Config) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Write train/test parquet (problems table) to problems.data_dir and read them back, decoded and validated."""
    train, test = build_code_splits(cfg)
    paths = write_splits(cfg.problems.data_dir, to_problems_frame(train), to_problems_frame(test))
    return tuple(from_problems_frame(read_problems(paths[name]), paths[name]) for name in ("train", "test"))
