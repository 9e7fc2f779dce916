"""The retention stage: which checkpoints and co-evolver versions keep their files (run.retention)."""

from __future__ import annotations

from coevo.coevolvers.base import MANIFEST
from coevo.config import Config
from coevo.layout import RunLayout
from coevo.model.checkpoint import META, TRAINER_STATE, read_meta
from coevo.model.retention import keep_set, prune_checkpoint, prune_coevolver, read_evals
from coevo.records import Retained


def retain_stage(cfg: Config, it: int) -> Retained:
    """Checkpoint retention after iteration `it` (run.retention, coevo/model/retention.py): the weights
    and optimizer files of checkpoints 1..it that no rule keeps are deleted, their metadata stays; so
    are the files of the co-evolver versions of those iterations (their manifests stay). The newest
    keep_last keep their optimizer state (a resume can fall back to any of them: `latest_complete`);
    one kept by another rule keeps its weights only.
    Idempotent; re-running it for an earlier iteration never prunes what a later one kept."""
    rules, layout = cfg.run.retention, RunLayout(cfg.run.out_dir)
    present = [k for k in range(it + 1) if (layout.checkpoint(k) / META).is_file()]
    weights = {k: read_meta(layout.checkpoint(k)).get("weights_sha256") for k in present if layout.evals(k).is_file()}
    accs = read_evals(layout.root / "evals", present, weights) if rules.keep_best else {}
    kept = keep_set(present, accs, rules.keep_last, rules.keep_every, rules.keep_best)
    pruned = {k: prune_checkpoint(layout.checkpoint(k), k) for k in present if k not in kept and k > 0}
    resumable = set(present[-rules.keep_last :]) if rules.keep_last is not None else set(present)
    for k in (
        kept - resumable
    ):  # kept for its weights only (keep_every, keep_best): a resume starts from the newest keep_last
        (layout.checkpoint(k) / TRAINER_STATE).unlink(missing_ok=True)
    # co-evolver version k goes with checkpoint k: a resume from a kept checkpoint k reads version k only
    versions = {
        k: prune_coevolver(layout.coevolver(k), k) for k in pruned if (layout.coevolver(k) / MANIFEST).is_file()
    }
    best = max(accs, key=lambda k: (accs[k], -k)) if accs else None
    return Retained(
        tuple(sorted(kept)),
        tuple(sorted(k for k, files in pruned.items() if files)),
        tuple(sorted(k for k, files in versions.items() if files)),
        best,
    )
