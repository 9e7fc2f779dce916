"""Policy checkpoints: a Hugging Face model directory plus coevo's training state.

Layout of `checkpoints/iter_NNNN/`:
  config.json, model.safetensors, tokenizer files   -- loadable by AutoModelForCausalLM / vLLM
  trainer_state.pt                                   -- optimizer state (absent for the bootstrap)
  coevo.json                                         -- iteration, weights hash, every file's sha256,
                                                        the optimizer state's (trainer_state_sha256),
                                                        lineage record, metrics

A LoRA run's checkpoint holds adapter_model.safetensors + adapter_config.json instead of the model
(coevo/model/lora.py); its coevo.json names the base directory and the base weights' sha256, and
its weights hash is the adapter file's. A checkpoint whose weights did not change (no optimizer
step) copies its parent's files instead of serialising the model again (`unchanged_from`); the
bootstrap of a user's checkpoint (policy.checkpoint) copies that weights file (`weights_from`,
`linkable_weights`) when it holds the model exactly as loaded.

No two checkpoints share a mutable file: every file is written anew or copied with
`coevo.io.clone_file` (a copy-on-write clone where the filesystem has reflinks, else a byte copy;
never a hard link, so a write into one checkpoint, or into the user's model, cannot reach another).
Every sha256 coevo.json records is of the bytes in the new directory, hashed after they were written
or copied; a copied file must also have the sha256 its parent recorded, else the save fails with
DamagedCheckpointError naming the parent's file (a damaged parent is never vouched for by its child).
The directory is written under a temporary name and renamed, so a crash never leaves a partial
checkpoint under its final name.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from coevo.errors import InputError
from coevo.io import atomic_path, clone_file, hash_file

META = "coevo.json"
TRAINER_STATE = "trainer_state.pt"
WEIGHTS = "model.safetensors"
PRUNED = "pruned.json"  # written by retention (coevo/model/retention.py): the weight files deleted, with their sha256


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
    base: Path | None = None  # a LoRA policy's base model directory (checkpoint LoRA was applied to)


class CheckpointError(InputError):
    """A checkpoint directory whose tokenizer or weights cannot be loaded; names the directory."""


class DamagedCheckpointError(CheckpointError):
    """A checkpoint whose files no longer have the sha256 its coevo.json records; names them."""

    ADVICE = "Restore it (e.g. `dvc checkout`) or delete it and rerun; `coevo lineage --verify` lists every mismatch"

    def __init__(self, checkpoint: str | Path, damaged: list[str], doing: str, advice: str = ADVICE):
        self.checkpoint, self.damaged = Path(checkpoint), damaged
        super().__init__(
            f"{checkpoint}: {', '.join(damaged)} no longer ha{'s' if len(damaged) == 1 else 've'} the sha256 its "
            f"{META} records (truncated or written into in place since it was saved); {doing}. {advice}".strip()
        )


def _first_line(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def weights_file(directory: str | Path) -> Path:
    """The file whose sha256 is a checkpoint's version: the adapter's for LoRA, else the model's."""
    from coevo.model.lora import ADAPTER_WEIGHTS, is_adapter_dir

    return Path(directory) / (ADAPTER_WEIGHTS if is_adapter_dir(directory) else WEIGHTS)


def load_policy(path: str | Path, device: str = "auto", dtype: str = "float32") -> Policy:
    """Load any local HF causal-LM checkpoint directory (never downloads), or a LoRA checkpoint:
    its base (named in coevo.json) with the adapter on top, adapters trainable."""
    from coevo.model.lora import base_link, is_adapter_dir, load_adapter

    path = Path(path)
    if (path / PRUNED).is_file():
        raise PrunedCheckpointError(path)
    if is_adapter_dir(path):
        base = base_link(path)["path"]
        policy = load_policy(base, device, dtype)
        model = load_adapter(policy.model, path)
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        return Policy(model=model, tokenizer=tokenizer, path=path, base=base)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path}: not a Hugging Face checkpoint directory (no config.json)")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as exc:  # no tokenizer.json / tokenizer_config.json, or unreadable ones
        found = sorted(p.name for p in path.iterdir() if "token" in p.name) or "none"
        raise CheckpointError(
            f"{path}: cannot load the tokenizer (tokenizer files found: {found}): {_first_line(exc)}"
        ) from exc
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    try:
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=getattr(torch, dtype))
    except (OSError, ValueError, SafetensorError) as exc:  # missing, truncated or corrupt weights file
        raise CheckpointError(
            f"{path}: cannot load the weights ({WEIGHTS} missing, truncated or corrupt): {_first_line(exc)}"
        ) from exc
    model.to(resolve_device(device))
    realign(model)
    return Policy(model=model, tokenizer=tokenizer, path=path)


def realign(model: torch.nn.Module, alignment: int = 64) -> None:
    """Copy every parameter whose storage is not `alignment`-byte aligned into fresh memory.

    Weights read from safetensors sit at arbitrary file offsets, while tensors torch allocates are
    64-byte aligned, and a CPU matmul's rounding depends on its operands' alignment: without this,
    a policy loaded from disk computes different low bits than the same weights still in memory
    after the update that produced them, and a resumed run drifts from the uninterrupted one
    (tests/model/test_retention.py, tests/flows/test_resume.py)."""
    for param in model.parameters():
        if param.device.type == "cpu" and param.data_ptr() % alignment:
            param.data = param.data.clone()


def save_checkpoint(
    directory: str | Path,
    policy: Policy,
    meta: dict,
    optimizer: torch.optim.Optimizer | None = None,
    unchanged_from: str | Path | None = None,
    weights_from: str | Path | None = None,
) -> str:
    """Write the checkpoint atomically; returns the sha256 of its weights file (the policy version).

    `unchanged_from`: a checkpoint holding exactly these weights (and, when it has one, this
    optimizer state): its files are copied (`_copy_files`: cloned copy-on-write where possible, each
    checked against the parent's recorded sha256), not serialised again.
    `weights_from`: a safetensors file holding exactly the model's tensors (`linkable_weights`): it is
    copied (cloned where possible) as the weights; config and tokenizer are written as usual.
    Every sha256 recorded is of the bytes in the new directory."""
    directory = Path(directory)
    with atomic_path(directory, is_dir=True) as tmp:
        if unchanged_from is not None:
            files = _copy_files(Path(unchanged_from), tmp, directory)
            meta = {**meta, "unchanged_from": os.path.relpath(Path(unchanged_from).resolve(), directory.resolve())}
        else:
            if weights_from is not None:
                policy.model.config.save_pretrained(tmp)
                if policy.model.can_generate() and policy.model.generation_config is not None:
                    policy.model.generation_config.save_pretrained(tmp)
                clone_file(weights_from, tmp / WEIGHTS)
            else:
                policy.model.save_pretrained(tmp, safe_serialization=True)
            policy.tokenizer.save_pretrained(tmp)
            # trainer_state.pt is training state, pruned from older checkpoints: not part of the model's identity
            files = {p.name: hash_file(p) for p in sorted(tmp.iterdir()) if p.is_file() and p.name != TRAINER_STATE}
        if optimizer is not None and not (tmp / TRAINER_STATE).is_file():
            torch.save({"optimizer": optimizer.state_dict()}, tmp / TRAINER_STATE)
        if (tmp / TRAINER_STATE).is_file():  # checked before a resume starts from it (`resume_problem`)
            meta = {**meta, "trainer_state_sha256": hash_file(tmp / TRAINER_STATE)}
        if policy.base is not None:
            base = Path(policy.base).resolve()
            meta = {
                **meta,
                "base": {"path": os.path.relpath(base, directory.resolve()), "weights_sha256": policy_version(base)},
            }
        weights_hash = files[weights_file(tmp).name]
        (tmp / META).write_text(
            json.dumps({**meta, "weights_sha256": weights_hash, "files": files}, indent=2, sort_keys=True, default=str)
        )
    return weights_hash


_SAFETENSORS_DTYPES = {"F64": torch.float64, "F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}


def linkable_weights(source: str | Path, model: torch.nn.Module) -> Path | None:
    """`source`'s single model.safetensors when it holds exactly `model`'s tensors as they are in
    memory (same names, shapes and dtypes; a tensor it lacks must be tied to one it has), so that
    linking it is the same as saving the model; else None (sharded, another dtype, adapters)."""
    from safetensors import safe_open

    path = Path(source) / WEIGHTS
    if (
        not path.is_file()
        or (Path(source) / f"{WEIGHTS}.index.json").exists()
        or not isinstance(model, PreTrainedModel)
    ):
        return None
    state = model.state_dict()
    with safe_open(str(path), framework="pt") as f:
        names = set(f.keys())
        for key in names:
            tensor, stored = state.get(key), f.get_slice(key)
            if (
                tensor is None
                or tuple(stored.get_shape()) != tuple(tensor.shape)
                or _SAFETENSORS_DTYPES.get(stored.get_dtype()) != tensor.dtype
            ):
                return None
    stored_ptrs = {state[key].data_ptr() for key in names}
    return path if all(key in names or tensor.data_ptr() in stored_ptrs for key, tensor in state.items()) else None


def _copy_files(parent: Path, target: Path, directory: Path) -> dict[str, str]:
    """Copy the parent's listed files (and its optimizer state) into `target` (`clone_file`), each
    hashed as copied and required to have the sha256 the parent recorded (DamagedCheckpointError
    naming the parent's files otherwise: nothing damaged is carried forward); returns the listing."""
    meta = read_meta(parent)
    files = meta.get("files")
    if not isinstance(files, dict):
        raise ValueError(f"{parent / META}: no files listing to reuse")
    expected = {**files, **({TRAINER_STATE: meta["trainer_state_sha256"]} if "trainer_state_sha256" in meta else {})}
    damaged = []
    for name in [*files, TRAINER_STATE]:
        source = parent / name
        if not source.is_file():
            if name == TRAINER_STATE:
                continue
            raise FileNotFoundError(f"{source}: listed in {parent / META} but missing; cannot reuse it")
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        clone_file(source, target / name)
        if name in expected and hash_file(target / name) != expected[name]:
            damaged.append(name)
    if damaged:
        raise DamagedCheckpointError(parent, damaged, f"not copied into {directory}")
    return dict(files)


RUN_MARKERS = ("bootstrap", "checkpoints", "coevolver", ".coevo-run.lock")  # what a run directory holds (any one)


def protected_output(out: str | Path) -> str | None:
    """Why a command must not replace the directory `out` with a model it writes (`coevo export-merged`,
    `coevo import-model --force`), or None: a coevo checkpoint (its coevo.json lineage and optimizer
    state would be lost), a run directory, or a directory holding one of those."""
    out = Path(out)
    if not out.is_dir():
        return None
    if (out / META).is_file():
        return f"it is a coevo checkpoint ({META}: its lineage, optimizer state and place in a run would be lost)"
    if any((out / name).exists() for name in RUN_MARKERS):
        return "it is a run directory (its checkpoints and records would be lost)"
    for pattern in (f"*/{META}", f"*/*/{META}", f"*/*/*/{META}"):  # a run's checkpoints sit two levels down
        for inner in out.glob(pattern):
            return f"it holds the coevo checkpoint {inner.parent}"
    return None


def read_meta(directory: str | Path) -> dict:
    meta_path = Path(directory) / META
    return json.loads(meta_path.read_text()) if meta_path.is_file() else {}


def policy_version(directory: str | Path) -> str:
    """The sha256 of a checkpoint's weights (recorded in coevo.json, else computed)."""
    directory = Path(directory)
    recorded = read_meta(directory).get("weights_sha256")
    if recorded:
        return recorded
    weights = weights_file(directory)
    return hash_file(weights) if weights.is_file() else "unknown"


def damaged_files(checkpoint: str | Path) -> list[str]:
    """The files of `checkpoint` whose content no longer has the sha256 its coevo.json records
    (truncated, overwritten or missing; the optimizer state is not listed); [] for an intact one."""
    listed = read_meta(checkpoint).get("files", {})
    return [
        name
        for name, sha in sorted(listed.items())
        if not (Path(checkpoint) / name).is_file() or hash_file(Path(checkpoint) / name) != sha
    ]


def resume_problem(directory: str | Path, damaged: list[str]) -> str | None:
    """Why an update cannot resume exactly from checkpoint `directory` (its weight files `damaged`
    as `damaged_files` lists them), or None when it can: weights intact and the optimizer state
    present with the sha256 coevo.json records (checkpoints written before that hash existed: present)."""
    directory = Path(directory)
    if read_pruned(directory) is not None:
        return "its weights were pruned by retention (run.retention)"
    if damaged:
        return f"files whose sha256 differs from its {META} (truncated or overwritten): {', '.join(damaged)}"
    state = directory / TRAINER_STATE
    if not state.is_file():
        return f"no {TRAINER_STATE} (the optimizer state an exact resume needs)"
    recorded = read_meta(directory).get("trainer_state_sha256")
    if recorded is not None and hash_file(state) != recorded:
        return f"{TRAINER_STATE} whose sha256 differs from its {META} (truncated or overwritten)"
    return None


def load_optimizer_state(directory: str | Path, optimizer: torch.optim.Optimizer) -> bool:
    state_path = Path(directory) / TRAINER_STATE
    if (Path(directory) / PRUNED).is_file():
        raise PrunedCheckpointError(directory)
    if not state_path.is_file():
        return False
    optimizer.load_state_dict(torch.load(state_path, weights_only=True)["optimizer"])
    return True
