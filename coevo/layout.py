"""Where a run's outputs live under run.out_dir: every stage writes, and every reader finds, a file by
`RunLayout`'s names (coevo/loop.py lists them)."""

from __future__ import annotations

from pathlib import Path


class RunLayout:
    """Where each stage's outputs live under run.out_dir."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def checkpoint(self, it: int) -> Path:
        """Checkpoint after iteration `it`; checkpoint 0 is the bootstrap, kept apart as its own DVC stage output."""
        return self.root / "bootstrap" if it == 0 else self.root / "checkpoints" / f"iter_{it:04d}"

    def coevolver(self, it: int) -> Path:
        return self.root / "coevolver" / f"iter_{it:04d}"

    def rollouts(self, it: int) -> Path:
        return self.root / "rollouts" / f"iter_{it:04d}.parquet"

    def rewards(self, it: int) -> Path:
        return self.root / "rewards" / f"iter_{it:04d}.parquet"

    def report(self, it: int) -> Path:
        return self.root / "reports" / f"iter_{it:04d}.json"

    def in_force(self, it: int) -> Path:
        """What iteration `it` ran under, as `in_force` resolved it (with what it was resolved from)."""
        return self.root / "in_force" / f"iter_{it:04d}.json"

    def proposals(self, it: int) -> Path:
        """The proposer's problems iteration `it` draws from besides the train split (`in_force`)."""
        return self.root / "proposals" / f"iter_{it:04d}.parquet"

    def evals(self, it: int) -> Path:
        """The held-out evaluation of checkpoint `it` (retention's keep_best reads it, also on resume)."""
        return self.root / "evals" / f"iter_{it:04d}.json"
