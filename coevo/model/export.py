"""`coevo export-merged`: a checkpoint as a plain Hugging Face directory for serving.

A LoRA checkpoint's adapters are merged into its base (peft's `merge_and_unload`: W + scale * B @ A);
a full checkpoint is re-saved as is. The directory holds config.json, model.safetensors, the
tokenizer, and export.json: where it came from (the checkpoint, its weights sha256 and coevo.json
lineage's base) and the sha256 of every file written. Written under a temporary name and renamed.
"""

from __future__ import annotations

import json
from pathlib import Path

from coevo.io import atomic_path, hash_file
from coevo.model.checkpoint import WEIGHTS, load_policy, policy_version, read_meta
from coevo.model.lora import base_link, is_adapter_dir, merged_copy

EXPORT_RECORD = "export.json"


def export_merged(checkpoint: str | Path, out: str | Path) -> dict:
    """Merge and write `checkpoint` to `out` (replaced if present); returns the export record."""
    checkpoint, out = Path(checkpoint), Path(out)
    policy = load_policy(checkpoint, device="cpu", dtype=_saved_dtype(checkpoint))
    merged = merged_copy(policy.model)
    meta = read_meta(checkpoint)
    with atomic_path(out, is_dir=True) as tmp:
        merged.save_pretrained(tmp, safe_serialization=True)
        policy.tokenizer.save_pretrained(tmp)
        files = {p.name: hash_file(p) for p in sorted(tmp.iterdir()) if p.is_file()}
        record = {
            "source_checkpoint": str(checkpoint.resolve()),
            "source_weights_sha256": policy_version(checkpoint),
            "iteration": meta.get("iteration"),
            "lora": policy.base is not None,
            "base": None
            if policy.base is None
            else {"path": str(Path(policy.base).resolve()), "weights_sha256": policy_version(policy.base)},
            "weights_sha256": files[WEIGHTS],
            "files": files,
        }
        (tmp / EXPORT_RECORD).write_text(json.dumps(record, indent=2, sort_keys=True))
    return record


def _saved_dtype(checkpoint: Path) -> str:
    """The dtype the (base) weights were saved in, so the export neither widens nor narrows them."""
    model_dir = base_link(checkpoint)["path"] if is_adapter_dir(checkpoint) else checkpoint
    config = json.loads((model_dir / "config.json").read_text())
    dtype = config.get("dtype") or config.get("torch_dtype")
    return dtype if dtype in ("float32", "bfloat16", "float16") else "float32"
