"""The policies this process has loaded, by weights hash, and the engine serving them.

A driver or flow that runs every stage in one process loads each checkpoint once: the rollout,
co-evolve and evaluation stages read the cached policy (`cached_policy`); the update stage takes it
out (`take_policy`: it mutates the weights) and puts the trained one back under its new hash
(`keep_policy`). One policy is kept at a time: a sequential loop needs no more. `live_engine` is the
generation engine serving a checkpoint, built on the cached policy (here rather than beside `LIVE`, so
that importing the engine registry does not load transformers' models).
"""

from __future__ import annotations

from pathlib import Path

from coevo.config import Config
from coevo.model.checkpoint import Policy, PrunedCheckpointError, load_policy, policy_version, read_pruned
from coevo.rollout.engines import LIVE
from coevo.rollout.engines.base import Engine

_POLICIES: dict[str, Policy] = {}


def cached_policy(checkpoint: str | Path, cfg: Config) -> Policy:
    if read_pruned(checkpoint) is not None:
        raise PrunedCheckpointError(checkpoint)
    version = policy_version(checkpoint)
    if version not in _POLICIES:
        _POLICIES.clear()  # one live policy per process is enough for a sequential loop
        _POLICIES[version] = load_policy(checkpoint, cfg.policy.device, cfg.policy.dtype)
    return _POLICIES[version]


def take_policy(checkpoint: str | Path, cfg: Config) -> Policy:
    """The policy of `checkpoint` taken out of the cache (the caller trains it), or loaded."""
    return _POLICIES.pop(policy_version(checkpoint), None) or load_policy(
        checkpoint, cfg.policy.device, cfg.policy.dtype
    )


def keep_policy(version: str, policy: Policy) -> None:
    """`policy`, whose weights hash is `version`, becomes the cached one."""
    _POLICIES.clear()
    _POLICIES[version] = policy


def forget_policies() -> None:
    """Empty the cache: the next use loads from disk, as a fresh process would."""
    _POLICIES.clear()


def live_engine(cfg: Config, checkpoint: str | Path) -> Engine:
    """The engine (`engine.kind`, from the registry) serving `checkpoint`: the HF engine wraps the
    cached policy; a persistent engine (vLLM) stays alive across iterations and is synced in place."""
    if read_pruned(checkpoint) is not None:
        raise PrunedCheckpointError(checkpoint)
    return LIVE.get(cfg, checkpoint, policy_version(checkpoint), lambda: cached_policy(checkpoint, cfg))
