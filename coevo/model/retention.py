"""Checkpoint retention: which checkpoints keep their weights, and pruning the others to metadata.

Every iteration writes a full checkpoint (weights, tokenizer, optimizer state); at 135M parameters
that is ~0.7 GB an iteration. After each iteration (the retain stage, coevo/stages/retain.py) the weights
and optimizer files of every checkpoint no rule keeps are deleted (`run.retention`):
  keep_last   the newest N iterations, each with its optimizer state (a resume falls back to the
              newest intact one of them; one kept only by the rules below keeps its weights only);
  keep_every  every N-th iteration (with the defaults, the ones MLflow registers: run.checkpoint_every);
  keep_best   the iteration with the best validation accuracy so far (`val/acc` in evals/iter_NNNN.json,
              never the test split's `eval/acc`: choosing a checkpoint by test accuracy would make
              the test figure optimistic; ties go to the earliest, so a later checkpoint has to beat
              it; a run with no validation split keeps no checkpoint by this rule).
The bootstrap (checkpoint 0, runs/<x>/bootstrap, also the import of a user checkpoint) is never pruned.

Decision on MLflow: a registered checkpoint is not protected by a rule of its own. The tracker copies
every file of a checkpoint it registers into MLflow's artifact store (tracking/mlflow_tracker.py), so
the registered model stays servable after the local copy is pruned; with the defaults
(keep_every = checkpoint_every = 50) the registered ones are kept locally as well.

A pruned checkpoint keeps coevo.json (its lineage record, every file's sha256) and the small files
(configs, tokenizer config, chat template), and gains `pruned.json`: the deleted files with their sha256.
`coevo lineage` walks through it and reports its weights as pruned; `--verify` accepts a listed file that is absent
when pruned.json names it with the hash coevo.json recorded (anything else is still a mismatch).
Pruning is idempotent and crash-safe: the marker is written (atomically) before any file is deleted,
so a kill in between leaves a marker whose files a re-run deletes.

Co-evolver versions follow their checkpoints (`prune_coevolver`): version k (run.out_dir/coevolver/
iter_k, a full copy of the co-evolver, growing with what it has learned) loses its files when
checkpoint k is pruned, keeping manifest.json (every file's sha256, the content hash the lineage
records) and gaining the same `pruned.json` marker. Nothing can need such a version: a resume
restarts at the newest kept checkpoint k and reads co-evolver k; a kept checkpoint's lineage names
co-evolver k, kept with it; a flow re-running an update past a pruned checkpoint re-runs its
co-evolution too (flows/train.py). Version 0 is never pruned. The catalog and MLflow (every
run.checkpoint_every) hold their own copies of what was pruned.

The keep rules are a pure function of iteration numbers and accuracies; they are monotone: a
checkpoint pruned when iteration j is retained would also be pruned at any later iteration, so
re-running the retain stage of an earlier iteration (a resumed flow) never prunes what a later one kept.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from coevo.coevolvers.base import MANIFEST, read_manifest
from coevo.io import write_json
from coevo.model.checkpoint import META, PRUNED, PrunedCheckpointError, read_meta, read_pruned

PRUNABLE_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")  # weights (also sharded or adapters) and optimizer state
# The tokenizer's vocabulary: 3.5 MB for SmolLM2 (7-11 MB for Qwen/Llama), which would otherwise be
# most of what a LoRA run's pruned checkpoint keeps per iteration; nothing reads it from a pruned one.
PRUNABLE_NAMES = ("tokenizer.json",)

__all__ = [
    "PRUNED",
    "PrunedCheckpointError",
    "disk_bound_checkpoints",
    "keep_set",
    "prune_checkpoint",
    "prune_coevolver",
    "read_pruned",
]


def keep_set(
    iterations: list[int], accs: dict[int, float], keep_last: int | None, keep_every: int, keep_best: bool
) -> set[int]:
    """The iterations among `iterations` (checkpoints 0 .. newest that exist) whose weights are kept.

    `accs`: held-out accuracy of the evaluated iterations. keep_last None keeps every checkpoint.
    """
    if keep_last is not None and keep_last < 1:
        raise ValueError(
            f"run.retention.keep_last must be >= 1 (the newest checkpoint is the one a resume needs), got {keep_last}"
        )
    if keep_every < 1:
        raise ValueError(f"run.retention.keep_every must be >= 1, got {keep_every}")
    if keep_last is None:
        return set(iterations)
    ordered = sorted(iterations)
    kept = {0} & set(ordered)
    kept |= set(ordered[-keep_last:])
    kept |= {it for it in ordered if it % keep_every == 0}
    if keep_best:
        scored = [(acc, -it) for it, acc in accs.items() if it in set(ordered) and not math.isnan(acc)]
        if scored:
            kept.add(-max(scored)[1])  # the best accuracy, earliest iteration among ties
    return kept


def disk_bound_checkpoints(iterations: int, keep_last: int, keep_every: int, keep_best: bool) -> int:
    """Upper bound on checkpoints holding weights after `iterations` iterations (the bootstrap counted)."""
    return keep_last + math.ceil(iterations / keep_every) + int(keep_best) + 1


def prunable_files(checkpoint: Path) -> list[Path]:
    """The weight, optimizer and vocabulary files in a checkpoint directory (recursively: adapters may sit in
    subdirs)."""
    return sorted(
        p
        for p in Path(checkpoint).rglob("*")
        if p.is_file() and (p.name.endswith(PRUNABLE_SUFFIXES) or p.name in PRUNABLE_NAMES)
    )


def prune_checkpoint(checkpoint: Path, iteration: int) -> list[str]:
    """Delete the weight/optimizer files of `checkpoint`, keeping its metadata; returns what was deleted
    (relative paths). The marker (`pruned.json`) lists each with the sha256 coevo.json recorded for it;
    optimizer state, which coevo.json does not list (training state, not the model's identity), is
    listed with null rather than hashed only to be deleted (~2x the weights: seconds at 135M)."""
    checkpoint = Path(checkpoint)
    if iteration == 0:
        raise ValueError(f"{checkpoint}: the bootstrap checkpoint (iteration 0) is never pruned")
    if not (checkpoint / META).is_file():
        raise ValueError(f"{checkpoint}: no {META}; not a coevo checkpoint, refusing to prune it")
    files = prunable_files(checkpoint)
    marker = read_pruned(checkpoint) or {"iteration": iteration, "files": {}}
    recorded = read_meta(checkpoint).get("files", {})
    new = {p.relative_to(checkpoint).as_posix(): p for p in files}
    if new:
        hashes = {name: recorded.get(name) for name in new}
        write_json(checkpoint / PRUNED, {**marker, "files": {**marker["files"], **hashes}})
    for path in files:
        path.unlink(missing_ok=True)
    return sorted(new)


def prune_coevolver(directory: Path, iteration: int) -> list[str]:
    """Delete every file the manifest of co-evolver version `directory` lists (at any depth: a list of
    co-evolvers saves each member in a subdirectory), then the subdirectories that leaves empty; keeps
    manifest.json. The marker (`pruned.json`, written before anything is deleted) lists each deleted
    file with the manifest's sha256. Returns what was deleted now (relative paths); [] when already pruned."""
    directory = Path(directory)
    if iteration == 0:
        raise ValueError(f"{directory}: the initial co-evolver version (iteration 0) is never pruned")
    listed = read_manifest(directory).get("files", {})  # CoevolverDirError naming manifest.json when unreadable
    root = directory.resolve()
    for name in listed:
        if name == MANIFEST or name == PRUNED or not (root / name).resolve().is_relative_to(root):
            raise ValueError(
                f"{directory / MANIFEST}: lists {name!r}, not a file inside the version; refusing to prune it"
            )
    present = sorted(name for name in listed if (directory / name).is_file())
    if present:
        marker = read_pruned(directory) or {"iteration": iteration, "files": {}}
        write_json(
            directory / PRUNED, {**marker, "files": {**marker["files"], **{name: listed[name] for name in present}}}
        )
    for name in present:
        (directory / name).unlink(missing_ok=True)
    for sub in sorted(
        {p for name in listed for p in Path(name).parents if p != Path(".")}, key=lambda p: -len(p.parts)
    ):
        if (directory / sub).is_dir() and not any((directory / sub).iterdir()):
            (directory / sub).rmdir()  # deepest first, so a parent emptied by its children goes too
    return present


SELECT_BY = "val/acc"  # the metric keep_best (and the registry's `best` alias) choose by: validation, never test


def read_evals(evals_dir: Path, iterations: list[int], weights: dict[int, str]) -> dict[int, float]:
    """`val/acc` (SELECT_BY) of each iteration evaluated on its current weights (evals/iter_NNNN.json
    whose weights_sha256 matches the checkpoint's: a stale file from an earlier run is ignored)."""
    accs: dict[int, float] = {}
    for it in iterations:
        path = Path(evals_dir) / f"iter_{it:04d}.json"
        if not path.is_file():
            continue
        try:
            record = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not valid JSON ({exc}); delete it to re-evaluate") from exc
        acc = record.get("metrics", {}).get(SELECT_BY)
        if acc is not None and record.get("weights_sha256") == weights.get(it):
            accs[it] = float(acc)
    return accs
