"""The splits every problem source is prepared into, and what both prepare paths share.

`SPLITS` names them (train, val, test); `user_splits` holds out a user file's validation and test
problems (or takes the user's own test file whole, dropping the training rows it repeats), the same
rules for math files (coevo/prepare.py) and code files (coevo/code/sources.py); `write_report`
writes data_dir/splits.json, each split's size and what building them held out or dropped.
"""

from __future__ import annotations

import warnings

import pandas as pd

from coevo.config import Config
from coevo.io import write_json
from coevo.problems.loader import drop_seen, split_held_out

SPLITS = ("train", "val", "test")


def user_splits(frame: pd.DataFrame, test: pd.DataFrame | None, cfg: Config, report: dict) -> dict[str, pd.DataFrame]:
    """A user file's splits: test_fraction and val_fraction of its distinct problems held out, or,
    with a test file, that file whole as test (the training rows that repeat one of its problems
    dropped and counted in `report`) and val_fraction of the rest held out for validation."""
    problems = cfg.problems
    if test is None:
        return split_held_out(frame, problems.test_fraction, problems.val_fraction, cfg.seed)
    train, dropped = drop_seen(frame, test, str(problems.path))
    report["train_dropped_as_in_test_path"] = dropped
    if dropped:
        warnings.warn(
            f"{problems.path}: {dropped} training rows repeat a problem of {problems.test_path}; dropped from training",
            stacklevel=2,
        )
    if problems.val_fraction == 0 or len(train) < 2:
        return {"train": train, "val": train.iloc[:0], "test": test}
    held = split_held_out(train, problems.val_fraction, 0.0, cfg.seed)
    return {"train": held["train"], "val": held["test"], "test": test}


def write_report(cfg: Config, splits: dict) -> None:
    """data_dir/splits.json: the size of each split and what building them held out or dropped."""
    sizes = {name: int(len(splits[name])) for name in SPLITS}
    write_json(cfg.problems.data_dir / "splits.json", {**splits.get("report", {}), "sizes": sizes})
