"""Generation engines by name (`engine.kind`), and the one live engine of a process.

ENGINES maps a name to a builder `(cfg, checkpoint, policy) -> Engine`, where `policy()` returns the
loaded trainer policy (the HF engine generates with it; vLLM serves the checkpoint directory itself).
A builder marked `persistent` starts a costly engine that `LiveEngine` keeps across iterations and
syncs in place; a non-persistent one is built per call (cheap: it wraps the cached policy). A builder
marked `trainer_model` samples with the trainer's own model object, so its sampling logprobs are
the trainer's and the update needs no pass of its own to get pi_old (coevo/update/stage.py).
`vllm` is imported only when the vllm engine is built, so the project works without the extra.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coevo.registry import Registry
from coevo.rollout.engines.base import Engine
from coevo.rollout.prompting import PROMPT_FORMATS

if TYPE_CHECKING:
    from coevo.config import Config, EngineConfig
    from coevo.model.checkpoint import Policy

ENGINES = Registry("engine")


def persistent(builder: Callable) -> Callable:
    builder.persistent = True
    return builder


def trainer_model(builder: Callable) -> Callable:
    builder.trainer_model = True
    return builder


def samples_with_trainer_model(cfg: Config) -> bool:
    """Whether `engine.kind` generates with the trainer's own model (its logprobs are pi_old exactly)."""
    return getattr(ENGINES[cfg.engine.kind], "trainer_model", False)


def check_parallelism(config: EngineConfig, gpus: int, task_runner: str) -> None:
    """Engines per node: `tensor_parallel_size` GPUs shard one engine (vLLM's TP: needs that many
    GPUs on the node, so none on CPU); `data_parallel_size` engines are independent, one per Ray
    worker, each serving one rollout shard and synced after every update like the single engine
    (the Ray task runner fans the shards out; the local runner runs one engine and refuses > 1)."""
    tp, dp = config.tensor_parallel_size, config.data_parallel_size
    if tp > 1 and config.kind != "vllm":
        raise ValueError(
            f"engine.tensor_parallel_size={tp}: tensor parallelism is vLLM's (engine.kind: vllm), not the "
            f"{config.kind!r} engine's"
        )
    if tp > 1 and gpus < tp:
        where = "no GPU (CPU only)" if gpus == 0 else f"only {gpus} GPU(s)"
        raise ValueError(
            f"engine.tensor_parallel_size={tp} needs {tp} GPUs on the engine's node; this node has {where}: set it to 1"
        )
    if dp > 1 and task_runner != "ray":
        raise ValueError(
            f"engine.data_parallel_size={dp}: one engine per worker needs the Ray task runner (pipeline.task_runner: "
            f"ray); "
            f"the {task_runner!r} runner runs one engine: set it to 1"
        )


def _check_engines_per_node(cfg: Config) -> None:
    import torch

    check_parallelism(cfg.engine, torch.cuda.device_count(), getattr(cfg.pipeline, "task_runner", "local"))


@ENGINES.register("hf")
@trainer_model
def build_hf(cfg: Config, checkpoint: Path, policy: Callable[[], Policy]) -> Engine:
    from coevo.rollout.engines.hf import HFEngine

    _check_engines_per_node(cfg)
    return HFEngine(policy(), cfg.engine.batch_size)


@ENGINES.register("vllm")
@persistent
def build_vllm(cfg: Config, checkpoint: Path, policy: Callable[[], Policy]) -> Engine:
    from coevo.rollout.engines.vllm import VLLMEngine

    _check_engines_per_node(cfg)
    engine = VLLMEngine(serving_dir(checkpoint), cfg.engine, cfg.policy.dtype, cfg.seed)
    if serving_dir(checkpoint) != Path(checkpoint):  # a LoRA checkpoint: started from its base, then merged weights
        engine.load_weights(_merged(policy))
    return engine


def serving_dir(checkpoint: str | Path) -> Path:
    """The full-model directory an engine starts from: the checkpoint, or a LoRA checkpoint's base."""
    from coevo.model.lora import base_link, is_adapter_dir

    return base_link(checkpoint)["path"] if is_adapter_dir(checkpoint) else Path(checkpoint)


def _merged(policy: Callable[[], Policy]) -> dict:
    from coevo.model.lora import merged_state_dict

    return merged_state_dict(policy().model)


class LiveEngine:
    """The process's persistent engine: started once per (engine settings, model architecture, seed),
    then moved from checkpoint to checkpoint by `load_weights`, never restarted. A fresh process (a
    resumed flow) starts it from the checkpoint directory it is first asked for."""

    def __init__(self) -> None:
        self.engine: Any = None
        self.key: str | None = None
        self.version: str | None = None  # weights hash of the checkpoint it serves
        self.starts = 0  # engines started by this process (a flow starts one)

    def get(self, cfg: Config, checkpoint: str | Path, version: str, policy: Callable[[], Policy]) -> Engine:
        return with_prompt_format(self._get(cfg, checkpoint, version, policy), cfg)

    def _get(self, cfg: Config, checkpoint: str | Path, version: str, policy: Callable[[], Policy]) -> Engine:
        builder = ENGINES[cfg.engine.kind]
        if not getattr(builder, "persistent", False):
            return builder(cfg, Path(checkpoint), policy)
        key = engine_key(cfg, checkpoint)
        if key != self.key:
            self.close()
            self.engine, self.key, self.version = builder(cfg, Path(checkpoint), policy), key, version
            self.starts += 1
        elif version != self.version:
            self.sync(checkpoint, version, policy)
        return self.engine

    def sleep(self) -> None:
        """Release the engine's accelerator memory for the policy update (GPU vLLM; else a no-op)."""
        if self.engine is not None:
            self.engine.sleep()

    def sync(self, checkpoint: str | Path, version: str, policy: Callable[[], Policy] | None = None) -> None:
        """Serve `checkpoint`'s weights in place, if a persistent engine is running (also when they are
        unchanged but the engine slept: sleep level 2 discards them). A LoRA checkpoint is served as
        merged weights of `policy()` (the trainer's model, which holds exactly its adapters)."""
        if self.engine is not None and (version != self.version or getattr(self.engine, "sleeping", False)):
            lora = serving_dir(checkpoint) != Path(checkpoint)
            if lora and policy is None:
                raise ValueError(f"{checkpoint}: a LoRA checkpoint is synced from the trainer's policy; pass `policy`")
            self.engine.load_weights(_merged(policy) if lora else Path(checkpoint))
            self.version = version

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
        self.engine, self.key, self.version = None, None, None


def with_prompt_format(engine: Engine, cfg: Config) -> Engine:
    """The engine encodes prompts as `prompt.format` renders them: a chat template writes BOS and
    the role markers itself, so the tokenizer must add no special tokens (coevo/rollout/prompting.py)."""
    engine.add_special_tokens = PROMPT_FORMATS[cfg.prompt.format].add_special_tokens
    return engine


def engine_key(cfg: Config, checkpoint: str | Path) -> str:
    """What a running engine cannot change in place: its settings, dtype, seed and architecture."""
    architecture = json.loads((serving_dir(checkpoint) / "config.json").read_text())
    architecture.pop("transformers_version", None)
    inputs = [cfg.engine.model_dump(mode="json"), cfg.policy.dtype, cfg.seed, architecture]
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()


LIVE = LiveEngine()
