"""LoRA adapters through peft: the policy trains low-rank adapters on a frozen base model.

Method: LoRA (Hu et al., 2021, "LoRA: Low-Rank Adaptation of Large Language Models"): each target
linear layer W gets W + (alpha / r) * B @ A with A [r, in], B [out, r]; B starts at zero, so the
adapted model starts equal to the base. Built with peft's `LoraConfig` / `get_peft_model`.

A LoRA checkpoint directory holds the adapter only (adapter_model.safetensors, adapter_config.json,
the tokenizer) plus the adapter parameters' optimizer state; its coevo.json names the base model
directory (relative to the checkpoint) and the base weights' sha256, which lineage --verify checks.

Departures:
1. The adapters' initialisation (peft draws A with torch's global RNG) runs under a forked RNG
   seeded from the run seed, so a run starts from the same adapter whatever ran before it.
2. The base is the checkpoint LoRA was first applied to (normally checkpoint 0, the bootstrap); it
   is never written again, only referenced.
3. Engines that keep their own copy of the weights (vLLM) are synced with merged weights
   (W + scale * B @ A, peft's `merge_and_unload` on a copy); the HF engine and the trainer run the
   unmerged PeftModel, which computes the same function.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import torch
from peft import LoraConfig, PeftModel, get_peft_model, set_peft_model_state_dict
from safetensors.torch import load_file
from transformers import PreTrainedModel

from coevo.config import LoraSettings

ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"


class LoraTargetError(ValueError):
    """policy.lora.target_modules names no module of the model."""


def is_adapter_dir(directory: str | Path) -> bool:
    return (Path(directory) / ADAPTER_CONFIG).is_file()


def is_lora(model: torch.nn.Module) -> bool:
    return isinstance(model, PeftModel)


def apply_lora(model: PreTrainedModel, settings: LoraSettings, seed: int) -> PeftModel:
    """Wrap `model` (in place, as peft does) with fresh adapters; only they require grad."""
    config = LoraConfig(
        r=settings.rank,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=settings.target_modules,
        task_type="CAUSAL_LM",
    )
    check_target_modules(model, settings.target_modules)
    model.zero_grad(set_to_none=True)  # a warm start's leftover gradients on the now frozen base
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return get_peft_model(model, config)


def check_target_modules(model: torch.nn.Module, targets: list[str] | str) -> None:
    """Every named target must match some module (peft only fails when none does)."""
    if targets == "all-linear":
        return
    names = [name for name, _ in model.named_modules()]
    unmatched = [t for t in targets if not any(name == t or name.endswith("." + t) for name in names)]
    if unmatched:
        linear = sorted(
            {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
        )
        raise LoraTargetError(
            f"policy.lora.target_modules: {unmatched} match no module of the model; its linear layers are {linear}"
        )


def load_adapter(base: PreTrainedModel, directory: str | Path, trainable: bool = True) -> PeftModel:
    """The base model with the adapter saved in `directory` (adapters trainable unless told)."""
    return PeftModel.from_pretrained(base, str(directory), is_trainable=trainable)


def load_adapter_weights(model: PeftModel, directory: str | Path) -> None:
    """Replace a PeftModel's adapter weights in place by those saved in `directory`."""
    set_peft_model_state_dict(model, load_file(Path(directory) / ADAPTER_WEIGHTS))


def merged_copy(model: torch.nn.Module) -> PreTrainedModel:
    """A plain model with the adapters folded in (W + scale * B @ A); the given model is untouched.
    A model without adapters is returned as is."""
    if not is_lora(model):
        return model
    return copy.deepcopy(model).merge_and_unload()


def merged_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The merged weights under the base model's own parameter names (what vLLM loads)."""
    return merged_copy(model).state_dict()


def base_link(checkpoint: str | Path) -> dict:
    """The {"path", "weights_sha256"} of an adapter checkpoint's base, path resolved to a directory."""
    meta_path = Path(checkpoint) / "coevo.json"
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    link = meta.get("base")
    if not isinstance(link, dict) or "path" not in link:
        raise ValueError(f"{meta_path}: an adapter checkpoint must name its base model ('base' in coevo.json)")
    path = Path(link["path"])
    return {**link, "path": path if path.is_absolute() else (Path(checkpoint) / path).resolve()}
