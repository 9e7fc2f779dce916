"""What an iteration runs under (coevo/records.py `InForce`), resolved once at its start."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from coevo.coevolvers.base import ProposesProblems, SetsHarness, read_manifest
from coevo.coevolvers.composite import choose_batch, coevolver_at, member_with, plays
from coevo.config import Config
from coevo.io import hash_bytes, hash_file, write_json
from coevo.layout import RunLayout
from coevo.model.checkpoint import read_pruned
from coevo.records import Artifact, InForce, Splits
from coevo.rollout.dynamic import candidate_count, shuffled
from coevo.store.tables import training_split
from schemas.problems import write_problems


def in_force(cfg: Config, it: int, data: Splits, choose: bool = True) -> InForce:
    """What iteration `it` runs under (coevo/records.py `InForce`), resolved from the prepared splits
    `data` and co-evolver version it-1: the params with that version's harness applied, the proposer's
    problems of that version (written to RunLayout.proposals(it)), and the batch its chooser (or the
    uniform sampler) picks from the training split (under rollout.dynamic_sampling, every round's
    problems: coevo/rollout/dynamic.py). The loop resolves it once at the iteration's
    start and every stage of the iteration reads it. With `choose=False` only the params in force are
    resolved (what the evaluation of checkpoint `it` reads; version it-1 is read only when a
    co-evolver plays the harness role).

    The record is saved (RunLayout.in_force(it)) with what it was resolved from; where retention has
    pruned version it-1 since (a re-run flow passing over cached iterations), the saved record
    stands in for it when it was resolved from the same params, version and train split."""
    train = data.train
    if it < 1 or not (choose or plays(cfg, "harness")):
        return InForce(it, cfg.model_dump_json(), train)
    layout = RunLayout(cfg.run.out_dir)
    version = layout.coevolver(it - 1)
    coevolver = Artifact(str(version), read_manifest(version)["content_hash"])
    source = hash_bytes(json.dumps([cfg.model_dump_json(), coevolver.sha256, train.sha256]).encode())
    if read_pruned(version) is not None and (saved := saved_in_force(layout.in_force(it), source)) is not None:
        return saved if choose else InForce(it, saved.params, train, harness=saved.harness)
    evolver = coevolver_at(cfg, it, version)
    harness = member_with(evolver, SetsHarness)
    params = cfg if harness is None else harness.apply(cfg)
    harnessed = None if harness is None else {"path": str(version), "in_force": harness.knobs(params)}
    if not choose:
        return InForce(it, params.model_dump_json(), train, harness=harnessed)
    proposals = None
    proposer = member_with(evolver, ProposesProblems)
    if proposer is not None and not (proposed := proposer.proposed()).empty:
        write_problems(layout.proposals(it), proposed)
        proposals = Artifact(str(layout.proposals(it)), hash_file(layout.proposals(it)))
    resolved = InForce(it, params.model_dump_json(), train, proposals, coevolver, harness=harnessed)
    split = training_split(resolved)
    split.attrs["path"] = train.path  # a curriculum's missing category column names the file
    batch = choose_batch(evolver, split, candidate_count(cfg.rollout, len(split)), it, cfg.seed)
    if cfg.rollout.dynamic_sampling.enabled:  # the rounds' problems, in the order they are sampled
        batch = shuffled(batch, cfg.seed, it)
    resolved = replace(resolved, batch=tuple(batch["id"]))
    write_json(layout.in_force(it), {"source": source, "in_force": resolved.to_json()})
    return resolved


def saved_in_force(path: Path, source: str) -> InForce | None:
    """The record `in_force` saved at `path` when it was resolved from `source` (and its proposals
    file is intact), else None."""
    if not path.is_file():
        return None
    saved = json.loads(path.read_text())
    record = InForce.from_json(saved["in_force"])
    if saved.get("source") != source or (record.proposals is not None and not record.proposals.intact()):
        return None
    return record
