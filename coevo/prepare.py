"""Prepare stage: produce the validated train/test problem splits under problems.data_dir."""

from __future__ import annotations

import pandas as pd

from coevo.code.prepare import CODE_SOURCES, prepare_code_problems
from coevo.config import Config
from coevo.problems.constraints import generate_constraints
from coevo.problems.arithmetic import generate_arithmetic, write_splits
from coevo.problems.loader import load_problem_file, split_problems
from schemas.problems import read_problems


def build_splits(cfg: Config) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The splits params.yaml describes: generated arithmetic, or a user file (validated, nothing written)."""
    problems = cfg.problems
    if problems.source == "arithmetic":
        return generate_arithmetic(list(problems.families), cfg.levels, problems.n_train, problems.n_test, cfg.seed, problems.question_style)
    if problems.source == "constraints":
        return generate_constraints(list(problems.constraint_kinds), problems.n_train, problems.n_test, cfg.seed)
    frame = load_problem_file(problems.path)
    if problems.test_path is not None:
        return frame, load_problem_file(problems.test_path)
    return split_problems(frame, problems.test_fraction, cfg.seed)


def prepare_problems(cfg: Config) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Build the splits, write them atomically to problems.data_dir, and read them back validated.

    Code sources (coevo/code/prepare.py) write the same problems table and are read back decoded."""
    if cfg.problems.source in CODE_SOURCES:
        return prepare_code_problems(cfg)
    train, test = build_splits(cfg)
    paths = write_splits(cfg.problems.data_dir, train, test)
    return read_problems(paths["train"]), read_problems(paths["test"])
