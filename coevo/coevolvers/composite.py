"""Several co-evolvers in one run (`coevolver:` a list in params): one artifact per member, one version each.

A list behaves as one co-evolver towards the stages. Each member plays the roles its class declares
(`roles`): "problems" (chooses the iteration's batch and proposes problems: a curriculum), "context"
(plans the rollout's context variants and gives the evaluation and the self-teacher their context: a skill bank or a
memory), "reward" (the artifact the reward judges by: rubrics, a test bank), "harness" (the sampling
settings, answer-format instruction and reward weights in force: a harness); a role has at most one player, so no two
members compete for the same decision; the stages reach a role's optional capabilities through the member that
has them (`member_with`, `choose_batch`). Members without a role in play fall back to the uniform sampler and the
plain group. `update` runs the members in list order, each on the same rollouts and rewards, and the report keeps each
member's report under its name (`member_reports` reads them back).

Saved layout: iter_NNNN/<i>-<kind>/ is member i's own directory (its manifest and files, exactly as it
saves alone), and iter_NNNN/manifest.json (kind "list") lists every member file by its relative path,
so the list's content hash covers all members, and names each member's kind and content hash for the
lineage.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

import pandas as pd

from coevo.coevolvers.base import (
    COEVOLVERS,
    MANIFEST,
    ChoosesProblems,
    CoEvolver,
    CoevolverDirError,
    TextGenerator,
    build_coevolver,
    load_coevolver,
    read_artifact,
    read_manifest,
    save_artifact,
    uniform_batch,
)
from coevo.config import CoevolverConfig, Config
from coevo.errors import InputError
from coevo.types import ContextVariant

KIND = "list"
T = TypeVar("T")
ROLES = ("problems", "context", "reward", "harness")


class CoevolverRoleError(InputError):
    """Two listed co-evolvers claim the same role (both choose problems, or both shape the context)."""


def member_name(index: int, kind: str) -> str:
    return f"{index}-{kind}"


class CoEvolverList:
    kind = KIND
    roles: frozenset[str]

    def __init__(self, members: list[CoEvolver], seed: int):
        self.members = members
        self.seed = seed
        self.roles = frozenset().union(*(member.roles for member in members))
        self.names = [member_name(i, member.kind) for i, member in enumerate(members)]
        self.player = {role: _player(members, role) for role in ROLES}

    @property
    def frozen(self) -> bool:
        return all(member.frozen for member in self.members)

    def plan(self, problems: pd.DataFrame, group_size: int) -> list[ContextVariant]:
        planner = self.player["context"]
        if planner is None:
            return [ContextVariant(problem_id=str(pid), variant="solo", n=group_size) for pid in problems["id"]]
        return planner.plan(problems, group_size)

    def context_for(self, problem: Mapping) -> list[str]:
        return [text for member in self.members for text in member.context_for(problem)]

    def teacher_context(self, problem: Mapping) -> list[str]:
        return [text for member in self.members for text in member.teacher_context(problem)]

    def update(self, iteration: int, problems: pd.DataFrame, rollouts: pd.DataFrame, rewards: pd.DataFrame) -> dict:
        """Each member evolves in list order from the same rollouts and rewards."""
        reports = {
            name: member.update(iteration, problems, rollouts, rewards)
            for name, member in zip(self.names, self.members)
        }
        return {"iteration": iteration, "frozen": self.frozen, "members": reports}

    def save(self, directory: Path) -> str:
        """Each member saved as it saves alone, then all of it written atomically under one manifest."""
        files, listed = {}, []
        with tempfile.TemporaryDirectory(prefix="coevo-coevolvers-") as tmp:
            for name, member in zip(self.names, self.members):
                saved = Path(tmp) / name
                listed.append({"name": name, "kind": member.kind, "content_hash": member.save(saved)})
                files.update(
                    {
                        f"{name}/{path.relative_to(saved).as_posix()}": path.read_bytes()
                        for path in sorted(saved.rglob("*"))
                        if path.is_file()
                    }
                )
        return save_artifact(directory, KIND, files, extra={"members": listed})

    @classmethod
    def load(
        cls, directory: Path, configs: list[CoevolverConfig], seed: int, generate: TextGenerator | None = None
    ) -> CoEvolverList:
        """The list saved in `directory`, after checking every file against the list's manifest and the
        members against `configs` (same kinds, same order)."""
        manifest, _ = read_artifact(directory, KIND)
        saved = [entry["kind"] for entry in manifest.get("members", [])]
        if saved != [entry.kind for entry in configs]:
            raise CoevolverDirError(
                f"{Path(directory) / MANIFEST}: holds co-evolvers {saved} but params list "
                f"{[entry.kind for entry in configs]}"
            )
        members = [
            load_coevolver(Path(directory) / entry["name"], member_cfg, seed, generate)
            for entry, member_cfg in zip(manifest["members"], configs)
        ]
        return cls(members, seed)


def _player(members: list, role: str):
    """The one member (co-evolver or co-evolver class) playing `role`, or None; two raise CoevolverRoleError."""
    players = [(i, member) for i, member in enumerate(members) if role in member.roles]
    if len(players) > 1:
        named = " and ".join(f"coevolver[{i}] ({member.kind})" for i, member in players)
        raise CoevolverRoleError(
            f"{named} both play the {role!r} role; list at most one co-evolver that {_ROLE_TEXT[role]}"
        )
    return players[0][1] if players else None


_ROLE_TEXT = {
    "problems": "chooses the problems (a curriculum)",
    "context": "shapes the rollout context (a skill bank or a memory)",
    "reward": "the reward judges by (rubrics, a test bank)",
    "harness": "sets the sampling settings, the instruction and the reward weights (a harness)",
}


def member_dir(cfg: Config, version: str | Path, kind: str) -> Path:
    """The directory of the run's (first) `kind` co-evolver inside co-evolver version `version`."""
    index = next((i for i, entry in enumerate(cfg.coevolver_list) if entry.kind == kind), None)
    if index is None:
        raise ValueError(f"no {kind!r} co-evolver in this run (coevolver.kind or an entry of the coevolver list)")
    return Path(version) / member_name(index, kind) if len(cfg.coevolver_list) > 1 else Path(version)


def plays(cfg: Config, role: str) -> bool:
    """Whether a co-evolver the run lists plays `role` (its class says; nothing is loaded)."""
    return any(role in COEVOLVERS[entry.kind].roles for entry in cfg.coevolver_list)


def check_coevolvers(cfg: Config) -> None:
    """Stop a run whose `coevolver` list has two players of one role, before anything is written."""
    kinds = [COEVOLVERS[entry.kind] for entry in cfg.coevolver_list]
    for role in ROLES:
        _player(kinds, role)


def build_coevolvers(cfg: Config, generate: TextGenerator | None = None) -> CoEvolver:
    """The run's fresh co-evolver: the one `coevolver`, or the list of several."""
    configs = cfg.coevolver_list
    if len(configs) == 1:
        return build_coevolver(configs[0], cfg.seed, generate)
    return CoEvolverList([build_coevolver(entry, cfg.seed, generate) for entry in configs], cfg.seed)


def load_coevolvers(directory: str | Path, cfg: Config, generate: TextGenerator | None = None) -> CoEvolver:
    """The run's co-evolver saved in `directory` (single or list, as params say)."""
    configs = cfg.coevolver_list
    if len(configs) == 1:
        return load_coevolver(directory, configs[0], cfg.seed, generate)
    if read_manifest(directory).get("kind") != KIND:
        raise CoevolverDirError(
            f"{Path(directory) / MANIFEST}: holds a single {read_manifest(directory).get('kind')!r} co-evolver "
            f"but params list co-evolvers {[c.kind for c in configs]}"
        )
    return CoEvolverList.load(Path(directory), configs, cfg.seed, generate)


def members_of(coevolver: CoEvolver) -> list[CoEvolver]:
    """The members of a list, or the co-evolver itself."""
    return coevolver.members if isinstance(coevolver, CoEvolverList) else [coevolver]


def member_with(coevolver: CoEvolver, capability: type[T]) -> T | None:
    """The member of `coevolver` (a list's members, or the co-evolver itself) that has the optional
    `capability` (a Protocol of coevo/coevolvers/base.py: ChoosesProblems, ProposesProblems,
    SetsHarness, KeepsTests), or None. A capability belongs to a role, which at most one member plays
    (`check_coevolvers`)."""
    return next((member for member in members_of(coevolver) if isinstance(member, capability)), None)


def choose_batch(coevolver: CoEvolver, train: pd.DataFrame, n: int, iteration: int, seed: int) -> pd.DataFrame:
    """Iteration `iteration`'s `n` problems: the choice of the member that chooses problems (a
    curriculum), else the uniform sampler's."""
    chooser = member_with(coevolver, ChoosesProblems)
    return chooser.choose(train, n, iteration) if chooser else uniform_batch(train, n, seed, iteration)


def member_reports(report: Mapping) -> list[Mapping]:
    """Each member's evolution report from a list's report, or the report itself."""
    if "members" not in report:
        return [report]
    if not isinstance(report["members"], Mapping) or not all(
        isinstance(member, Mapping) for member in report["members"].values()
    ):
        raise InputError("field 'members': expected an object of member reports (JSON objects)")
    return list(report["members"].values())


def coevolver_at(cfg: Config, it: int, directory: str | Path, generate: TextGenerator | None = None) -> CoEvolver:
    """The co-evolver (or list) saved in `directory`, as iteration `it` sees it (each one frozen once
    its frozen_after has passed)."""
    coevolver = load_coevolvers(directory, cfg, generate)
    for member, member_cfg in zip(members_of(coevolver), cfg.coevolver_list):
        member.frozen = member_cfg.frozen_at(it)
    return coevolver
