"""Seeds derived from (run seed, iteration, stage): every stage's randomness depends only on where it
is in the run, so re-running or resuming a stage reproduces it exactly without saved RNG state."""

from __future__ import annotations

import hashlib


def derive_seed(seed: int, *parts: object) -> int:
    text = ":".join(str(p) for p in (seed, *parts))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") & (2**63 - 1)
