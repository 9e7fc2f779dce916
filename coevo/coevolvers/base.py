"""The co-evolver contract, its optional capabilities, its registry, and the manifest every saved co-evolver carries.

A co-evolver says which context variants to roll out per problem (`plan`), which context the policy
sees at evaluation and the self-teacher sees in training (`context_for`, `teacher_context`), evolves
from one iteration's rollouts and rewards (`update`), and saves itself as a directory whose
`manifest.json` names its kind, its files' sha256 and a content hash over them. Four capabilities
are optional, each a Protocol a co-evolver has by defining its methods: `ChoosesProblems` (the
iteration's batch; without one, the uniform sampler `uniform_batch`), `ProposesProblems` (new
training problems), `SetsHarness` (the sampling settings, instruction and reward weights in
force) and `KeepsTests` (unit tests the verification runs); the stages find the member that has
one with `coevo.coevolvers.composite.member_with`, never by importing a co-evolver's module.
Variants are registry entries (`register_coevolver`), never `if kind == ...` chains.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol, runtime_checkable

import pandas as pd

from coevo.config import CoevolverConfig, Config
from coevo.errors import InputError
from coevo.io import atomic_path, hash_bytes
from coevo.registry import Registry
from coevo.rollout.sampler import ProblemSampler
from coevo.types import ContextVariant

MANIFEST = "manifest.json"
FORMAT = 1
# Written by retention (coevo/model/retention.py `prune_coevolver`) into a version whose checkpoint was
# pruned: the files it deleted with their sha256; the same name as a pruned checkpoint's marker.
PRUNED = "pruned.json"


class CoevolverDirError(InputError):
    """A saved co-evolver directory that cannot be used: manifest missing or unreadable, another kind,
    or a file whose sha256 differs from the manifest (tampered, corrupt or missing); names the file."""


class PrunedCoevolverError(CoevolverDirError):
    """A co-evolver version whose files retention pruned with its checkpoint: only the manifest is left."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        super().__init__(
            f"{directory}: this co-evolver version's files were pruned by retention together with its checkpoint "
            f"(run.retention; {PRUNED} lists them, {MANIFEST} and the lineage remain). Use the co-evolver version of a "
            "kept checkpoint (the newest, every keep_every-th, the best), or set run.retention.keep_last to null to "
            "keep every version."
        )


# (prompts, max_new_tokens) -> one greedy continuation per prompt by the policy that produced the
# rollouts, ending at its first line break; co-evolvers that write one line with the policy itself
# (the memory's reflector) call it.
TextGenerator = Callable[[list[str], int], list[str]]


@runtime_checkable
class CoEvolver(Protocol):
    kind: str
    frozen: bool
    roles: frozenset[
        str
    ]  # what it decides in a list of co-evolvers: "problems" (choose), "context" (plan, context_for)

    def plan(self, problems: pd.DataFrame, group_size: int) -> list[ContextVariant]:
        """Context variants per problem; their `n` sum to `group_size` for each problem."""
        ...

    def context_for(self, problem: Mapping) -> list[str]:
        """Texts prepended at evaluation "with context" (eval/acc_context; retrieval only, no probes)."""
        ...

    def teacher_context(self, problem: Mapping) -> list[str]:
        """Privileged context a self-teacher sees for `problem`."""
        ...

    def update(self, iteration: int, problems: pd.DataFrame, rollouts: pd.DataFrame, rewards: pd.DataFrame) -> dict:
        """Evolve from one iteration's rollouts and rewards; return a JSON-able evolution report."""
        ...

    def save(self, directory: Path) -> str:
        """Write the co-evolver atomically as a directory; return the manifest's content hash."""
        ...


@runtime_checkable
class ChoosesProblems(Protocol):
    """Optional (role "problems"): chooses each iteration's training problems (a curriculum)."""

    def choose(self, train: pd.DataFrame, n: int, iteration: int) -> pd.DataFrame:
        """The `n` training problems iteration `iteration` rolls out (a pure function of the saved
        co-evolver, the seed and the iteration, so a resumed run draws the same batch)."""
        ...

    def choice_metrics(self, report: Mapping) -> dict[str, float]:
        """The iteration's metrics from `update`'s report: what the choice is made from (a curriculum's
        value and draw probability per category), so its curves show in MLflow."""
        ...


@runtime_checkable
class ProposesProblems(Protocol):
    """Optional (role "problems"): writes new training problems, which join the training split."""

    def propose(
        self,
        iteration: int,
        batch: pd.DataFrame,
        rollouts: pd.DataFrame,
        rewards: pd.DataFrame,
        train: pd.DataFrame,
        test: pd.DataFrame,
    ) -> dict | None:
        """This iteration's proposals (its report, or None when it proposes nothing): `batch` the
        iteration's problems, `train` the split it drew from, `test` the held-out problems."""
        ...

    def proposed(self) -> pd.DataFrame:
        """The problems accepted so far (a problems frame; empty when it proposes none)."""
        ...

    def proposal_metrics(self, report: Mapping) -> dict[str, float]:
        """The iteration's metrics from `propose`'s report."""
        ...


@runtime_checkable
class SetsHarness(Protocol):
    """Optional (role "harness"): the sampling settings, answer-format instruction and reward weights
    the next iteration runs under, revised from this one's rollouts."""

    def apply(self, cfg: Config) -> Config:
        """`cfg` with the settings this version puts in force."""
        ...

    def knobs(self, cfg: Config) -> dict[str, float | int | str | None]:
        """The values of the settings it controls in `cfg` (what the lineage records as in force)."""
        ...

    def revise(
        self,
        iteration: int,
        rollouts: pd.DataFrame,
        rewards: pd.DataFrame,
        train: pd.DataFrame,
        cfg: Config,
        sample: Callable[[pd.DataFrame, Config], tuple[pd.DataFrame, pd.DataFrame]],
    ) -> dict:
        """Diagnose this iteration's rollouts and change the settings when a backtest by `sample`
        (batch, trial config -> rollouts, rewards) shows the change helps; returns its report."""
        ...

    def harness_metrics(self, report: Mapping) -> dict[str, float]:
        """The iteration's metrics from `revise`'s report."""
        ...


@runtime_checkable
class KeepsTests(Protocol):
    """Optional (role "reward"): unit tests of a problem that join its pass table in verification (a test bank)."""

    def tests_for(self, problem_id: str) -> list[str]:
        """The problem's tests, in a fixed order (the rewards' `bank_fail` indices refer to it)."""
        ...


COEVOLVERS = Registry("co-evolver", name_attribute="kind")
register_coevolver = (
    COEVOLVERS.register
)  # built as cls(cfg, seed, generate), loaded with cls.load(directory, cfg, seed, generate)
coevolver_kinds = COEVOLVERS.names


def uniform_batch(train: pd.DataFrame, n: int, seed: int, iteration: int) -> pd.DataFrame:
    """The batch without a `ChoosesProblems` co-evolver: iteration `iteration`'s batch of the seeded
    shuffles (coevo/rollout/sampler.py)."""
    return ProblemSampler(train, n, seed).batch(iteration)


def build_coevolver(cfg: CoevolverConfig, seed: int, generate: TextGenerator | None = None) -> CoEvolver:
    """A fresh co-evolver of kind `cfg.kind`."""
    return COEVOLVERS[cfg.kind](cfg, seed, generate)


def load_coevolver(
    directory: str | Path, cfg: CoevolverConfig, seed: int, generate: TextGenerator | None = None
) -> CoEvolver:
    """Load the co-evolver saved in `directory` by the kind its manifest names.

    Raises CoevolverDirError (a ValueError) when the manifest's kind differs from `cfg.kind` (a run
    resumed under another co-evolver) or when a file fails its hash check; PrunedCoevolverError (one
    of them) when retention pruned the version's files.
    """
    if (Path(directory) / PRUNED).is_file():
        raise PrunedCoevolverError(directory)
    kind = read_manifest(directory).get("kind")
    if kind != cfg.kind:
        raise CoevolverDirError(
            f"{Path(directory) / MANIFEST}: holds a {kind!r} co-evolver but coevolver.kind is {cfg.kind!r}"
        )
    return COEVOLVERS[kind].load(Path(directory), cfg, seed, generate)


def content_hash(file_hashes: Mapping[str, str]) -> str:
    """sha256 over the sorted (file name, file sha256) pairs."""
    return hash_bytes("".join(f"{name}\0{digest}\n" for name, digest in sorted(file_hashes.items())).encode())


def save_artifact(directory: str | Path, kind: str, files: Mapping[str, bytes], extra: Mapping | None = None) -> str:
    """Atomically write `files` plus a manifest into `directory`; return the content hash."""
    hashes = {name: hash_bytes(data) for name, data in files.items()}
    manifest = {"kind": kind, "format": FORMAT, **(extra or {}), "files": hashes, "content_hash": content_hash(hashes)}
    with atomic_path(directory, is_dir=True) as tmp:
        for name, data in files.items():
            (tmp / name).parent.mkdir(
                parents=True, exist_ok=True
            )  # a list of co-evolvers keeps each member in a subdirectory
            (tmp / name).write_bytes(data)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest["content_hash"]


def read_manifest(directory: str | Path) -> dict:
    path = Path(directory) / MANIFEST
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CoevolverDirError(f"{path}: cannot read the co-evolver manifest: {exc}") from exc


def read_artifact(directory: str | Path, kind: str) -> tuple[dict, dict[str, bytes]]:
    """The manifest and file contents of a saved co-evolver, after checking kind, format and hashes.

    Raises CoevolverDirError (a ValueError) naming the file whose sha256 does not match the manifest
    (tampered or corrupt).
    """
    directory = Path(directory)
    if (directory / PRUNED).is_file():
        raise PrunedCoevolverError(directory)
    manifest = read_manifest(directory)
    if manifest.get("kind") != kind or manifest.get("format") != FORMAT:
        found = f"{manifest.get('kind')!r} format {manifest.get('format')!r}"
        raise CoevolverDirError(f"{directory / MANIFEST}: expected kind {kind!r} format {FORMAT}, got {found}")
    files: dict[str, bytes] = {}
    for name, expected in sorted(manifest["files"].items()):
        path = directory / name
        data = path.read_bytes() if path.is_file() else None
        if data is None or hash_bytes(data) != expected:
            raise CoevolverDirError(
                f"{path}: content does not match the manifest's sha256 (tampered, corrupt or missing)"
            )
        files[name] = data
    if content_hash(manifest["files"]) != manifest.get("content_hash"):
        raise CoevolverDirError(f"{directory / MANIFEST}: content_hash does not match its file hashes")
    return manifest, files
