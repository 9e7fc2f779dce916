"""Typed records that cross the stages: `Artifact`, `InForce`, and what each stage returns.

All are frozen dataclasses of strings, numbers, tuples and JSON-able dicts, so a Prefect task's cache key (its
inputs, hashed as JSON) changes when any field changes and stays equal when none does, and a Ray
worker gets them pickled. A content hash has one name in every record that crosses stages:
`sha256` (a file's sha256, a checkpoint's weights sha256, a co-evolver version's content hash). The
files on disk keep their own field names (coevo.json `weights_sha256`, a co-evolver manifest's
`content_hash`), which the lineage and retention read.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from coevo.config import Config
from coevo.io import hash_file


@dataclass(frozen=True)
class Artifact:
    """A file or directory a stage wrote or reads, and the content hash it had then."""

    path: str
    sha256: str

    def intact(self) -> bool:
        """Whether the file still has this content (a task result restored from the cache may point
        at a table truncated or overwritten since)."""
        return Path(self.path).is_file() and hash_file(self.path) == self.sha256


@dataclass(frozen=True)
class InForce:
    """What iteration `iteration` samples, scores and trains under, resolved once at its start from
    the prepared splits and co-evolver version iteration-1 (coevo/stages/in_force.py `in_force`); every stage of
    the iteration reads it instead of deriving it again.

    - `params`: the run's params (JSON) with the harness in force applied (sampling settings,
      answer-format instruction, reward weights; coevo/coevolvers/harness.py): what rollout,
      verification and update run with and evaluation asks with; the params themselves without a harness;
    - `train`: the prepared training split;
    - `proposals`: the problems the curriculum's proposer accepted up to version iteration-1, written
      under the run directory (coevo/layout.py `RunLayout.proposals`), which join the training split
      (`coevo.store.tables.training_split`); None when there are none;
    - `coevolver`: the co-evolver version it was resolved from (None for iteration 0);
    - `batch`: the ids of the problems the co-evolver chose for the iteration, in order (empty in
      the record an evaluation alone reads);
    - `harness`: {"path": the version whose harness is in force, "in_force": the knob values it put
      in force} (the checkpoint's lineage records both), or None without a harness.
    """

    iteration: int
    params: str
    train: Artifact
    proposals: Artifact | None = None
    coevolver: Artifact | None = None
    batch: tuple[str, ...] = ()
    harness: dict | None = None

    @property
    def cfg(self) -> Config:
        """The params in force as a Config (validated once per process and params string)."""
        return _config(self.params)

    def to_json(self) -> dict:
        """The record as JSON-able data (`from_json` reads it back): what a file hands another process."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> InForce:
        artifact = lambda field: None if data[field] is None else Artifact(**data[field])  # noqa: E731
        return cls(
            data["iteration"],
            data["params"],
            Artifact(**data["train"]),
            artifact("proposals"),
            artifact("coevolver"),
            tuple(data["batch"]),
            data["harness"],
        )


@functools.lru_cache(maxsize=8)
def _config(params: str) -> Config:
    return Config.model_validate_json(params)


@dataclass(frozen=True)
class Splits:
    """The prepared problem splits (the prepare stage) and DVC's hash of their directory."""

    train: Artifact
    val: Artifact
    test: Artifact
    dvc_md5: str

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Splits:
        return cls(*(Artifact(**data[name]) for name in ("train", "val", "test")), data["dvc_md5"])


@dataclass(frozen=True)
class Bootstrapped:
    """Checkpoint 0 (its weights sha256), co-evolver version 0 (its content hash) and the warm start's
    report as checkpoint 0's coevo.json records it (coevo/model/bootstrap.py; {} for a copied checkpoint)."""

    checkpoint: Artifact
    coevolver: Artifact
    report: dict


@dataclass(frozen=True)
class Table(Artifact):
    """A table a stage wrote (an iteration's rollouts or rewards, or one shard of them) and its metrics."""

    metrics: dict


@dataclass(frozen=True)
class Evolved(Artifact):
    """Co-evolver version k+1 (its content hash), the path of its evolution report, and its metrics."""

    report: str
    metrics: dict


@dataclass(frozen=True)
class Trained(Artifact):
    """Checkpoint k+1 (its weights sha256) and the update's metrics."""

    metrics: dict

    @classmethod
    def from_json(cls, data: dict) -> Trained:
        return cls(**{f.name: data[f.name] for f in fields(cls)})


@dataclass(frozen=True)
class Retained:
    """What retention did after an iteration: the checkpoints kept, those whose weights (and those
    whose co-evolver versions' files) it pruned, and the best by validation accuracy (or None)."""

    kept: tuple[int, ...]
    pruned: tuple[int, ...]
    coevolver_pruned: tuple[int, ...]
    best: int | None
