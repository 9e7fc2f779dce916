"""Policy checkpoints: a Hugging Face model directory plus coevo's training state.

Layout of `checkpoints/iter_NNNN/`:
  config.json, model.safetensors, tokenizer files   -- loadable by AutoModelForCausalLM / vLLM
  trainer_state.pt                                   -- optimizer state (absent for the bootstrap)
  coevo.json                                         -- iteration, weights hash, every file's sha256,
                                                        lineage record, metrics

The directory is written under a temporary name and renamed, so a crash never leaves a partial
checkpoint under its final name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from coevo.errors import InputError
from coevo.io import atomic_path, hash_file

META = "coevo.json"
TRAINER_STATE = "trainer_state.pt"
WEIGHTS = "model.safetensors"
PRUNED = "pruned.json"  # written by retention (coevo/policy/retention.py): the weight files deleted, with their sha256


class PrunedCheckpointError(FileNotFoundError):
    """A checkpoint whose weights retention pruned (run.retention): only its metadata is left."""

    def __init__(self, checkpoint: str | Path):
        self.checkpoint = Path(checkpoint)
        super().__init__(
            f"{checkpoint}: its weights were pruned by checkpoint retention (run.retention; {PRUNED} lists them); "
            "only its metadata and lineage remain. Use a kept checkpoint (the newest, every keep_every-th, the best) "
            "or raise run.retention.keep_last / set it to null to keep every checkpoint."
        )


def read_pruned(directory: str | Path) -> dict | None:
    """The retention marker of a pruned checkpoint ({"iteration", "files": {name: sha256}}), else None."""
    path = Path(directory) / PRUNED
    return json.loads(path.read_text()) if path.is_file() else None


@dataclass
class Policy:
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    path: Path | None = None  # the checkpoint it was loaded from


class CheckpointError(InputError):
    """A checkpoint directory whose tokenizer or weights cannot be loaded; names the directory."""


def _first_line(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def load_policy(path: str | Path, device: str = "auto", dtype: str = "float32") -> Policy:
    """Load any local HF causal-LM checkpoint directory (never downloads)."""
    path = Path(path)
    if (path / PRUNED).is_file():
        raise PrunedCheckpointError(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path}: not a Hugging Face checkpoint directory (no config.json)")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as exc:  # no tokenizer.json / tokenizer_config.json, or unreadable ones
        found = sorted(p.name for p in path.iterdir() if "token" in p.name) or "none"
        raise CheckpointError(f"{path}: cannot load the tokenizer (tokenizer files found: {found}): {_first_line(exc)}") from exc
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    try:
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=getattr(torch, dtype))
    except (OSError, ValueError, SafetensorError) as exc:  # missing, truncated or corrupt weights file
        raise CheckpointError(f"{path}: cannot load the weights ({WEIGHTS} missing, truncated or corrupt): {_first_line(exc)}") from exc
    model.to(resolve_device(device))
    return Policy(model=model, tokenizer=tokenizer, path=path)


def save_checkpoint(
    directory: str | Path,
    policy: Policy,
    meta: dict,
    optimizer: torch.optim.Optimizer | None = None,
) -> str:
    """Write the checkpoint atomically; returns the sha256 of its weights file (the policy version)."""
    directory = Path(directory)
    with atomic_path(directory, is_dir=True) as tmp:
        policy.model.save_pretrained(tmp, safe_serialization=True)
        policy.tokenizer.save_pretrained(tmp)
        if optimizer is not None:
            torch.save({"optimizer": optimizer.state_dict()}, tmp / TRAINER_STATE)
        # trainer_state.pt is training state, pruned from older checkpoints: not part of the model's identity
        files = {p.name: hash_file(p) for p in sorted(tmp.iterdir()) if p.is_file() and p.name != TRAINER_STATE}
        weights_hash = files[WEIGHTS]
        (tmp / META).write_text(json.dumps({**meta, "weights_sha256": weights_hash, "files": files}, indent=2, sort_keys=True, default=str))
    return weights_hash


def read_meta(directory: str | Path) -> dict:
    meta_path = Path(directory) / META
    return json.loads(meta_path.read_text()) if meta_path.is_file() else {}


def policy_version(directory: str | Path) -> str:
    """The sha256 of a checkpoint's weights (recorded in coevo.json, else computed)."""
    directory = Path(directory)
    recorded = read_meta(directory).get("weights_sha256")
    if recorded:
        return recorded
    weights = directory / WEIGHTS
    return hash_file(weights) if weights.is_file() else "unknown"


def load_optimizer_state(directory: str | Path, optimizer: torch.optim.Optimizer) -> bool:
    state_path = Path(directory) / TRAINER_STATE
    if (Path(directory) / PRUNED).is_file():
        raise PrunedCheckpointError(directory)
    if not state_path.is_file():
        return False
    optimizer.load_state_dict(torch.load(state_path, weights_only=True)["optimizer"])
    return True
