"""Generation engines: vLLM through coevo vs vLLM called directly vs the HF engine, and the time of
an in-place weight sync vs an engine restart.

Two models, both random-initialised locally from a config (no downloads):
  tiny   the default policy shape of params.yaml (Llama, hidden 128, 4 layers, char vocabulary) on
         the default rollout batch: 32 prompts x 16 samples, 8 new tokens;
  135m   a SmolLM-135M-shaped Llama (hidden 576, 30 layers, 9 heads / 3 KV heads, vocab 49152,
         tied embeddings; 135M parameters), 8 prompts x 4 samples, 32 new tokens.

Arms, alternated within each round on the same machine and, for vLLM, the same running engine:
  coevo-vllm   VLLMEngine.generate (tokenises, one request per prompt with its own seed, builds
               Generation records with token ids and sampling logprobs);
  vllm-direct  LLM.generate on that engine's LLM with text prompts and one SamplingParams
               (n, temperature, max_tokens, logprobs=0): what a user would call;
  hf           HFEngine.generate on the same checkpoint (the default engine).
Completions/s and generated tokens/s are the median over rounds. Sync: `load_weights` from a state
dict and from a checkpoint directory (median of 3) vs closing the engine and starting a new one.

    .venv/bin/python bench/engines.py [--rounds 3] [--models tiny,135m]   # writes bench/results/engines-tiny-135m.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY_PARAMS = ROOT / "examples" / "tiny.yaml"  # the tiny character-level policy's params (params.yaml trains SmolLM2)
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: E402

from coevo.config import EngineConfig, SamplingConfig, load_config  # noqa: E402
from coevo.model.checkpoint import Policy, load_policy, save_checkpoint  # noqa: E402
from coevo.model.tokenizer import build_char_tokenizer  # noqa: E402

RESULTS = ROOT / "bench" / "results"
PROMPT = "What is {a} + {b}? Answer: "


def tokenizer_of_size(vocab_size: int) -> PreTrainedTokenizerFast:
    """The char tokenizer padded with placeholder tokens to `vocab_size` ids, so every id a random
    model samples decodes."""
    tokenizer = build_char_tokenizer()
    extra = vocab_size - len(tokenizer)
    if extra > 0:
        tokenizer.add_tokens([f"<x{i}>" for i in range(extra)])
    return tokenizer


def build_model(name: str, directory: Path) -> Path:
    """A random-initialised checkpoint of the named shape, saved as coevo saves policies."""
    if name == "tiny":
        shape = load_config(TINY_PARAMS).policy.shape
        tokenizer = build_char_tokenizer()
        config = LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=shape.hidden_size,
            num_hidden_layers=shape.num_layers,
            num_attention_heads=shape.num_heads,
            intermediate_size=shape.intermediate_size,
            max_position_embeddings=shape.max_position,
            tie_word_embeddings=True,
        )
    else:  # 135m: SmolLM-135M's shape
        tokenizer = tokenizer_of_size(49152)
        config = LlamaConfig(
            vocab_size=49152,
            hidden_size=576,
            num_hidden_layers=30,
            num_attention_heads=9,
            num_key_value_heads=3,
            intermediate_size=1536,
            max_position_embeddings=2048,
            tie_word_embeddings=True,
            rms_norm_eps=1e-5,
        )
    config.bos_token_id, config.eos_token_id, config.pad_token_id = (
        tokenizer.bos_token_id,
        tokenizer.eos_token_id,
        tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    path = directory / name
    save_checkpoint(path, Policy(model=model, tokenizer=tokenizer), {"bench": name})
    return path


WORKLOADS = {  # prompts, samples per prompt, new tokens
    "tiny": (32, 16, 8),
    "135m": (8, 4, 32),
}


def prompts(count: int) -> list[str]:
    return [PROMPT.format(a=17 * i % 97, b=31 * i % 89) for i in range(count)]


def run_coevo(engine, texts, n, sampling, seed) -> tuple[float, int, int]:
    start = time.perf_counter()
    out = engine.generate(texts, n, sampling, seed)
    seconds = time.perf_counter() - start
    return seconds, sum(len(group) for group in out), sum(len(g.token_ids) for group in out for g in group)


def run_direct(llm, texts, n, sampling, seed) -> tuple[float, int, int]:
    from vllm import SamplingParams

    params = SamplingParams(
        n=n,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        max_tokens=sampling.max_new_tokens,
        logprobs=0,
        seed=seed,
    )
    start = time.perf_counter()
    out = llm.generate(texts, params, use_tqdm=False)
    seconds = time.perf_counter() - start
    return seconds, sum(len(o.outputs) for o in out), sum(len(c.token_ids) for o in out for c in o.outputs)


def bench_model(name: str, directory: Path, rounds: int) -> dict:
    from coevo.rollout.engines.hf import HFEngine
    from coevo.rollout.engines.vllm import VLLMEngine

    path = build_model(name, directory)
    count, n, new_tokens = WORKLOADS[name]
    texts, sampling = prompts(count), SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=new_tokens)
    config = EngineConfig(kind="vllm", batch_size=512)
    engine = VLLMEngine(path, config)
    hf = HFEngine(load_policy(path, "cpu"), batch_size=512)
    arms = {
        "coevo-vllm": lambda seed: run_coevo(engine, texts, n, sampling, seed),
        "vllm-direct": lambda seed: run_direct(engine.llm, texts, n, sampling, seed),
        "hf": lambda seed: run_coevo(hf, texts, n, sampling, seed),
    }
    for arm in arms.values():  # warm-up
        arm(0)
    runs: dict[str, list[tuple[float, int, int]]] = {arm: [] for arm in arms}
    for r in range(rounds):
        order = list(arms) if r % 2 == 0 else list(reversed(arms))
        for arm in order:
            runs[arm].append(arms[arm](r + 1))
    throughput = {
        arm: {
            "completions_per_s": statistics.median(c / s for s, c, _ in values),
            "tokens_per_s": statistics.median(t / s for s, _, t in values),
            "seconds": statistics.median(s for s, _, _ in values),
        }
        for arm, values in runs.items()
    }
    state = hf.policy.model.state_dict()
    sync_state = statistics.median(_timed(lambda: engine.load_weights(state)) for _ in range(3))
    sync_path = statistics.median(_timed(lambda: engine.load_weights(path)) for _ in range(3))
    first_start = engine.start_s
    engine.close()
    restart = _timed(lambda: VLLMEngine(path, config).close())
    return {
        "model": name,
        "parameters": sum(p.numel() for p in hf.policy.model.parameters()),
        "workload": {"prompts": count, "samples_per_prompt": n, "max_new_tokens": new_tokens},
        "throughput": throughput,
        "coevo_vs_direct": throughput["coevo-vllm"]["tokens_per_s"] / throughput["vllm-direct"]["tokens_per_s"],
        "coevo_vs_hf": throughput["coevo-vllm"]["tokens_per_s"] / throughput["hf"]["tokens_per_s"],
        "sync_state_dict_s": sync_state,
        "sync_checkpoint_dir_s": sync_path,
        "first_start_s": first_start,
        "restart_s": restart,
        "sync_state_dict_vs_restart": sync_state / restart,
        "sync_checkpoint_dir_vs_restart": sync_path / restart,
    }


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def report(results: list[dict]) -> str:
    lines = [
        "| model | params | arm | completions/s | tokens/s |",
        "|---|---|---|---|---|",
    ]
    for res in results:
        for arm, row in res["throughput"].items():
            lines.append(
                f"| {res['model']} | {res['parameters'] / 1e6:.1f}M | {arm} | {row['completions_per_s']:.1f} | "
                f"{row['tokens_per_s']:.1f} |"
            )
    lines += [
        "",
        (
            "| model | coevo-vLLM / direct vLLM (tokens/s) | coevo-vLLM / HF | sync: state dict (s) | sync: "
            "checkpoint dir (s) | restart (s) | state dict / restart | dir / restart |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for res in results:
        lines.append(
            f"| {res['model']} | {res['coevo_vs_direct']:.3f}x | {res['coevo_vs_hf']:.2f}x | "
            f"{res['sync_state_dict_s']:.3f} | "
            f"{res['sync_checkpoint_dir_s']:.3f} | {res['restart_s']:.1f} | {res['sync_state_dict_vs_restart']:.4f}x "
            f"| {res['sync_checkpoint_dir_vs_restart']:.4f}x |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--models", default="tiny,135m")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            results.append(bench_model(name, Path(tmp), args.rounds))
            print(report(results[-1:]), flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"engines-{'-'.join(args.models.split(','))}.json"
    out.write_text(json.dumps(results, indent=2))
    print(report(results))


if __name__ == "__main__":
    main()
