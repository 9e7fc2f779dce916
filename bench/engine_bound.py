"""The CPU rollout engine against this machine's bounds, and what holds it back.

Measured, each arm in its own process (vLLM reads its thread settings when it starts), arms
alternated within each round:

  machine   float32 matmul GFLOP/s with 1 and with all cores (2048^3, torch), and memory bandwidth
            (a 512 MiB tensor copy, bytes read + written): the two ceilings of a decode step.
  engine    VLLMEngine.generate on the SmolLM2 example's rollout batch (16 chat prompts x 8 samples,
            16 new tokens, temperature 1): generated tokens/s, and FLOP/s counting 2 x parameters
            per token processed (prompt tokens once per prompt: the prefix cache shares a group's
            prompt; every generated token), against the matmul peak of the cores its worker uses.
  idle      the engine's CPU use while it waits between rollouts (the policy update runs then):
            CPU seconds of its processes over a 5 s idle window, in cores; and the trainer's matmul
            GFLOP/s on all cores beside the idle engine vs with no engine.

Arms: vLLM's CPU thread binding `VLLM_CPU_OMP_THREADS_BIND`:
  auto   vLLM's default: on x86 it reserves one core for its scheduler process, so on 2 cores the
         model's forward runs on ONE thread;
  all    every core to the forward (`0-<n-1>`): the scheduler shares them.

    .venv/bin/python bench/engine_bound.py --model models/smollm2-135m-instruct [--rounds 2]
    # writes bench/results/engine-bound.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "bench" / "results"
CORES = os.cpu_count() or 1
BINDS = {"auto": "auto", "all": f"0-{CORES - 1}"}


def matmul_gflops(threads: int, size: int = 2048, repeats: int = 5) -> float:
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b  # warm-up
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    seconds = time.perf_counter() - start
    torch.set_num_threads(previous)
    return 2 * size**3 * repeats / seconds / 1e9


def bandwidth_gbs(mib: int = 512, repeats: int = 5) -> float:
    import torch

    src = torch.ones(mib * 2**20 // 4)
    dst = torch.empty_like(src)
    dst.copy_(src)
    start = time.perf_counter()
    for _ in range(repeats):
        dst.copy_(src)
    seconds = time.perf_counter() - start
    return 2 * src.numel() * 4 * repeats / seconds / 1e9


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of the processes (those that still exist)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def child_pids() -> list[int]:
    """This process's descendants (the engine core and its worker)."""
    import psutil

    return [p.pid for p in psutil.Process().children(recursive=True)]


def engine_arm(model: str, bind: str, repeats: int) -> dict:
    """One engine, started with the binding; the example's rollout batch timed `repeats` times."""
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = bind
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    from coevo.config import EngineConfig, PromptConfig, SamplingConfig, load_config
    from coevo.rollout.engines.vllm import VLLMEngine
    from coevo.rollout.prompting import encode_prompts, prompt_renderer

    example = load_config(ROOT / "examples" / "smollm2.yaml")
    tokenizer = AutoTokenizer.from_pretrained(model, local_files_only=True)
    renderer = prompt_renderer(PromptConfig(**example.prompt.model_dump()), tokenizer, model)
    problems = [{"question": f"What is {3 + i % 7} * {2 + i % 5}?", "family": "mul"} for i in range(16)]
    texts = renderer.render_all(problems)
    prompt_tokens = sum(len(ids) for ids in encode_prompts(tokenizer, texts, renderer.add_special_tokens))
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=example.sampling.max_new_tokens)
    engine = VLLMEngine(model, EngineConfig(kind="vllm", batch_size=256, max_model_len=512))
    engine.add_special_tokens = renderer.add_special_tokens
    params = sum(tensor.numel() for tensor in load_file(_weights(model)).values())
    engine.generate(texts, 8, sampling, seed=0)  # warm-up
    runs = []
    for r in range(repeats):
        start = time.perf_counter()
        out = engine.generate(texts, 8, sampling, seed=r + 1)
        seconds = time.perf_counter() - start
        generated = sum(len(g.token_ids) for group in out for g in group)
        runs.append((seconds, generated))
    pids = child_pids()
    before = cpu_seconds(pids)
    time.sleep(5.0)
    idle_cores = (cpu_seconds(pids) - before) / 5.0
    beside_idle = matmul_gflops(CORES)
    engine.close()
    seconds = statistics.median(s for s, _ in runs)
    generated = statistics.median(g for _, g in runs)
    flops = 2 * params * (prompt_tokens + generated)
    return {
        "bind": bind,
        "parameters": params,
        "prompt_tokens": prompt_tokens,
        "generated_tokens": generated,
        "seconds": seconds,
        "seconds_each": [round(s, 3) for s, _ in runs],
        "tokens_per_s": generated / seconds,
        "gflops": flops / seconds / 1e9,
        "idle_engine_cores": idle_cores,
        "trainer_matmul_gflops_beside_idle_engine": beside_idle,
    }


def _weights(model: str) -> str:
    return str(next(Path(model).glob("*.safetensors")))


def run_arm(model: str, arm: str, repeats: int) -> dict:
    """`engine_arm` in a fresh process, so vLLM starts with this arm's binding."""
    out = subprocess.run(
        [sys.executable, __file__, "--model", model, "--arm", arm, "--repeats", str(repeats)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="a local Hugging Face checkpoint (coevo import-model)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2, help="timed rollout batches per arm and round")
    parser.add_argument("--arm", choices=sorted(BINDS), help=argparse.SUPPRESS)  # internal: one arm
    parser.add_argument("--out", type=Path, default=RESULTS / "engine-bound.json")
    args = parser.parse_args()
    if args.arm:
        print(json.dumps(engine_arm(args.model, BINDS[args.arm], args.repeats)))
        return
    rounds = []
    for r in range(args.rounds):
        machine = {
            "load_average": os.getloadavg()[0],
            "matmul_gflops_1_thread": matmul_gflops(1),
            f"matmul_gflops_{CORES}_threads": matmul_gflops(CORES),
            "bandwidth_gbs": bandwidth_gbs(),
        }
        arms = {
            arm: run_arm(args.model, arm, args.repeats)
            for arm in (sorted(BINDS) if r % 2 else sorted(BINDS, reverse=True))
        }
        rounds.append({"machine": machine, "arms": arms})
        print(json.dumps(rounds[-1], indent=1), flush=True)
    args.out.write_text(json.dumps({"cores": CORES, "rounds": rounds}, indent=1) + "\n")


if __name__ == "__main__":
    main()
