"""The run's validated tables, read once per content hash: the problem splits, the training split an
iteration draws from (with the proposer's problems) and its batch."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from coevo.io import hash_file
from coevo.records import InForce
from schemas.problems import read_problems


@functools.lru_cache(maxsize=8)
def _validated(reader: Callable[[str], pd.DataFrame], path: str, sha256: str) -> pd.DataFrame:
    return reader(path)


def table(reader: Callable[[str], pd.DataFrame], path: str | Path) -> pd.DataFrame:
    """A stage table read and pandera-validated once per content hash: the verify, co-evolve and
    update stages of one iteration share one read of its shards. Each caller gets a shallow copy:
    under pandas copy-on-write, nothing it does reaches the cached frame."""
    return _validated(reader, str(path), hash_file(path)).copy(deep=False)


def problems(path: str | Path) -> pd.DataFrame:
    """The validated problem split at `path`."""
    return table(read_problems, path)


def val_path(test: str | Path) -> Path | None:
    """The validation split written beside the test split `test` (val.parquet), or None when there is
    none or it is empty (a source with no validation problems)."""
    path = Path(test).with_name("val.parquet")
    return path if path.is_file() and len(problems(path)) else None


def held_out(test: str | Path) -> pd.DataFrame:
    """Test and validation problems together: what a proposer must not duplicate."""
    val = val_path(test)
    return problems(test) if val is None else pd.concat([problems(test), problems(val)], ignore_index=True)


def training_split(now: InForce) -> pd.DataFrame:
    """The problems iteration `now.iteration` draws from, verifies and trains on: the train split,
    plus the problems the curriculum's proposer accepted up to co-evolver version it-1 (when it is on)."""
    split = problems(now.train.path)
    return split if now.proposals is None else pd.concat([split, problems(now.proposals.path)], ignore_index=True)


def batch_of(now: InForce) -> pd.DataFrame:
    """The iteration's batch: the rows of the training split the co-evolver chose, in its order."""
    split = training_split(now)
    return split.iloc[pd.Index(split["id"]).get_indexer(list(now.batch))].reset_index(drop=True)
