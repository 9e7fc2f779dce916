"""`coevo export-merged`: a checkpoint as a plain Hugging Face directory for serving.

A LoRA checkpoint's adapters are merged into its base (peft's `merge_and_unload`: W + scale * B @ A);
a full checkpoint is re-saved as is. The directory holds config.json, model.safetensors, the
tokenizer, and export.json: where it came from (the checkpoint, its weights sha256 and coevo.json
lineage's base) and the sha256 of every file written. Written under a temporary name and renamed.

`--out` replaces only an empty directory or an earlier export (one holding export.json); anything
else is refused before the checkpoint is read (`check_out`, ExportError naming the directory and why:
a checkpoint, a run directory, the checkpoint or its base themselves, or a user's other directory),
so a mistyped `--out` never replaces a checkpoint's coevo.json and optimizer state.
"""

from __future__ import annotations

import json
from pathlib import Path

from coevo.errors import InputError
from coevo.io import atomic_path, hash_file
from coevo.model.checkpoint import WEIGHTS, load_policy, policy_version, protected_output, read_meta
from coevo.model.lora import base_link, is_adapter_dir, merged_copy

EXPORT_RECORD = "export.json"


class ExportError(InputError):
    """An --out that must not be replaced; the message names it and why."""


def check_out(checkpoint: Path, out: Path) -> None:
    """Refuse an `out` that is not absent, empty or an earlier export (module docstring)."""
    if out.exists() and not out.is_dir():
        raise ExportError(f"--out {out}: exists and is not a directory. Nothing was written")
    sources = [checkpoint] + ([base_link(checkpoint)["path"]] if is_adapter_dir(checkpoint) else [])
    for source in sources:
        if Path(source).resolve().is_relative_to(out.resolve()):
            raise ExportError(f"--out {out}: it is or holds {source}, which is being exported. Nothing was written")
    why = protected_output(out)
    if why is None and out.is_dir() and any(out.iterdir()) and not (out / EXPORT_RECORD).is_file():
        why = f"it is not empty and not an earlier export (no {EXPORT_RECORD})"
    if why is not None:
        raise ExportError(f"--out {out}: refusing to replace it: {why}; choose another --out. Nothing was written")


def export_merged(checkpoint: str | Path, out: str | Path) -> dict:
    """Merge and write `checkpoint` to `out` (an earlier export there is replaced; anything else is
    refused: `check_out`); returns the export record."""
    checkpoint, out = Path(checkpoint), Path(out)
    check_out(checkpoint, out)
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
