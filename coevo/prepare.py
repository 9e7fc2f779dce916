"""Prepare stage: produce the validated train/val/test problem splits under problems.data_dir.

Every source's held-out splits (val, test) share no problem with training, nor with each other
(coevo/problems/heldout.py says what "the same problem" means); the splits are checked for that
before anything is written, and data_dir/splits.json records their sizes, the train-only cells and
the training rows dropped because a user's `test_path` file repeats them.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from coevo.code.sources import CODE_SOURCES, prepare_code_problems
from coevo.config import Config
from coevo.problems.arithmetic import arithmetic_splits, train_only_cells, write_splits
from coevo.problems.constraints import constraint_splits
from coevo.problems.guessing import guessing_splits
from coevo.problems.heldout import check_unseen
from coevo.problems.loader import ProblemsFileError, load_problem_file
from coevo.problems.splits import user_splits, write_report
from schemas.problems import read_problems


def build_splits(cfg: Config) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Train and test of params.yaml's source (validated, nothing written); see `build_all_splits`."""
    splits = build_all_splits(cfg)
    return splits["train"], splits["test"]


def build_all_splits(cfg: Config) -> dict[str, pd.DataFrame]:
    """{"train", "val", "test"} of params.yaml's math source, checked unseen; nothing is written.

    Also `report`: what the split held out (a dict, the content of splits.json)."""
    problems = cfg.problems
    report: dict = {"source": problems.source}
    if problems.source == "arithmetic":
        splits = arithmetic_splits(
            list(problems.families),
            cfg.levels,
            problems.n_train,
            problems.n_test,
            problems.n_val,
            cfg.seed,
            problems.question_style,
            problems.val_split,
        )
        report["train_only_cells"] = [
            list(cell) for cell in train_only_cells(list(problems.families), cfg.levels, problems.n_train)
        ]
    elif problems.source == "constraints":
        splits = constraint_splits(
            list(problems.constraint_kinds), problems.n_train, problems.n_test, problems.n_val, cfg.seed
        )
    elif problems.source == "guessing":
        splits = guessing_splits(
            list(problems.guess_levels), problems.n_train, problems.n_test, problems.n_val, cfg.seed
        )
    else:
        test = load_user_problems(cfg, problems.test_path) if problems.test_path else None
        splits = user_splits(load_user_problems(cfg, problems.path), test, cfg, report)
    check_unseen(splits, f"problems.source={problems.source}")
    return {**splits, "report": report}


def load_user_problems(cfg: Config, path: str | Path) -> pd.DataFrame:
    """A user's problem file, refused when it has no `answer` column (answer '') and `rewards:` has
    the built-in `verifier`, which judges a completion against it."""
    frame = load_problem_file(path)
    if (frame["answer"] == "").any() and any(entry.function == "verifier" for entry in cfg.rewards):
        raise ProblemsFileError(
            f"{path}: field 'answer': missing column (absent from every row), which the `verifier` entry of "
            "`rewards:` judges each completion against. To judge a dataset without reference answers by your own "
            "reward functions (as TRL does: they read your reference column, e.g. `solution`, by name), list them "
            "in `rewards:` without `verifier`; a completion passes when their total reaches rewards_pass_threshold"
        )
    return frame


def prepare_problems(cfg: Config) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Build the splits, write them atomically to problems.data_dir, and read train and test back validated.

    Code sources (coevo/code/sources.py) write the same problems table and are read back decoded."""
    if cfg.problems.source in CODE_SOURCES:
        return prepare_code_problems(cfg)
    splits = build_all_splits(cfg)
    paths = write_splits(cfg.problems.data_dir, splits["train"], splits["test"], splits["val"])
    write_report(cfg, splits)
    return read_problems(paths["train"]), read_problems(paths["test"])
