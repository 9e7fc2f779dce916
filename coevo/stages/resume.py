"""Where a run resumes: the newest iteration it can restart from exactly, and the temporary directories
a killed writer left behind."""

from __future__ import annotations

import warnings
from pathlib import Path

from coevo.config import Config
from coevo.io import remove_orphans as remove_orphans_in
from coevo.layout import RunLayout
from coevo.model.checkpoint import META, DamagedCheckpointError, damaged_files, read_pruned, resume_problem
from coevo.sharding import shard_path


def latest_complete(cfg: Config) -> int:
    """The newest iteration a resume can restart from (0 = bootstrap): its checkpoint (with its
    metadata), co-evolver version and report all exist, and an update can resume exactly from it
    (`resume_problem`: weights not pruned, files with the sha256 coevo.json records, the optimizer
    state present and intact). Walked down from the newest, however far back, each checkpoint passed
    over named in a warning; only those candidates are hashed, so a resume hashes one checkpoint
    unless it is damaged. Falling back to the bootstrap past checkpoints that exist says so: nothing
    intact remains, and the run restarts at iteration 1."""
    layout, k = RunLayout(cfg.run.out_dir), 0
    while (
        (layout.checkpoint(k + 1) / META).is_file()
        and layout.coevolver(k + 1).is_dir()
        and layout.report(k + 1).is_file()
    ):
        k += 1
    newest, passed = k, []
    while k > 0:
        problem = resume_problem(
            layout.checkpoint(k),
            damaged_files(layout.checkpoint(k)) if read_pruned(layout.checkpoint(k)) is None else [],
        )
        if problem is None:
            break
        if read_pruned(layout.checkpoint(k)) is None:  # a pruned one is expected, not news
            warnings.warn(f"{layout.checkpoint(k)}: {problem}; not resuming from it", stacklevel=2)
        passed.append(k)
        k -= 1
    if k == 0 and newest > 0:
        warnings.warn(
            f"{layout.root}: no checkpoint after the bootstrap can resume (iterations {passed[-1]}..{newest} pruned or "
            "damaged; run.retention.keep_last bounds how far back one can); restarting from the bootstrap at "
            "iteration 1",
            stacklevel=2,
        )
    if k == 0 and (damaged := damaged_files(layout.checkpoint(0))):  # checked like every other checkpoint
        raise DamagedCheckpointError(layout.checkpoint(0), damaged, "a run cannot restart from it")
    return k


def remove_orphans(cfg: Config) -> list[Path]:
    """Delete the temporary directories a killed writer left in the run's directories and its data
    directory (`coevo.io.remove_orphans`), naming them in a warning; the caller holds the run lock."""
    layout = RunLayout(cfg.run.out_dir)
    places = {layout.root, cfg.bootstrap_dir.parent, Path(cfg.problems.data_dir), layout.checkpoint(1).parent}
    tables = (layout.rollouts, layout.rewards, layout.proposals)
    places |= {path(0).parent for path in (layout.coevolver, layout.report, layout.in_force, layout.evals, *tables)}
    places |= {shard_path(layout.rollouts(0), 0, 2).parent, shard_path(layout.rewards(0), 0, 2).parent}
    removed = [orphan for place in sorted(places) for orphan in remove_orphans_in(place)]
    if removed:
        warnings.warn(
            f"removed {len(removed)} temporary director{'y' if len(removed) == 1 else 'ies'} a killed writer left "
            f"(never published): {', '.join(str(p) for p in removed)}",
            stacklevel=2,
        )
    return removed
