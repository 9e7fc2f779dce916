"""Episode throughput: the live episodes of a turn in one engine call (coevo/rollout/episodes.py
`run_turns`) against one call per episode, in policy tokens per second (issue 42).

The model is the tiny policy taught the calculator's call format (bench/tiny_episodes.py): its
episodes call a tool, read the tool turn and answer, two turns each, so both ways run whole
multi-turn episodes. The same `--episodes` episodes (the first held-out problems of the episode toy
comparison's spec, `--group` samples each) are sampled both ways with the HF engine, the two
alternating `--repeats` times; policy tokens are the sampled ones (tool turns excluded). One thread
(bench/common.py THREADS), as the comparison's runs.

    .venv/bin/python bench/tiny_episodes.py --out models/tiny-tools
    .venv/bin/python bench/episode_throughput.py --out bench/results
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import THREADS, add_output_args, alternate, fmt, publish, spread, table  # noqa: E402
from coevo.compare.spec import arm_config, load_spec  # noqa: E402
from coevo.model.checkpoint import load_policy  # noqa: E402
from coevo.prepare import prepare_problems  # noqa: E402
from coevo.rollout.engines.hf import HFEngine  # noqa: E402
from coevo.rollout.episodes import sample  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "bench" / "specs" / "tiny_episodes.yaml"
WAYS = ["batched", "per_episode"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=ROOT / "models" / "tiny-tools")
    parser.add_argument("--episodes", type=int, default=32, help="problems sampled")
    parser.add_argument("--group", type=int, default=4, help="episodes per problem")
    parser.add_argument("--repeats", type=int, default=3)
    add_output_args(parser, "episode-throughput")
    args = parser.parse_args()
    torch.set_num_threads(THREADS)
    spec = load_spec(SPEC)
    with tempfile.TemporaryDirectory() as work:
        cfg = arm_config(spec, spec.arm(spec.reference), 0, Path(work) / "run")
        data = cfg.problems.model_copy(update={"data_dir": Path(work) / "data"})
        cfg = cfg.model_copy(
            update={"problems": data, "policy": cfg.policy.model_copy(update={"checkpoint": args.model})}
        )
        _, test = prepare_problems(cfg)
    rows = test.head(args.episodes).to_dict("records")
    engine = HFEngine(load_policy(args.model, "cpu"))

    def run(way: str, rep: int) -> dict:
        start = time.perf_counter()
        if way == "batched":
            groups = sample(engine, cfg, rows, None, args.group, cfg.sampling, seed=rep)
        else:
            groups = [
                sample(engine, cfg, [row], None, 1, cfg.sampling, seed=rep * 10_000 + i * args.group + j)[0]
                for i, row in enumerate(rows)
                for j in range(args.group)
            ]
        seconds = time.perf_counter() - start
        episodes = [g for group in groups for g in group]
        tokens = sum(sum(g.policy_mask) if g.policy_mask else len(g.token_ids) for g in episodes)
        turns = sum(g.turns for g in episodes) / len(episodes)
        return {"seconds": seconds, "policy_tokens": tokens, "tokens_per_s": tokens / seconds, "turns": turns}

    results = alternate(WAYS, args.repeats, run)
    stats = {way: spread([r["tokens_per_s"] for r in results[way]]) for way in WAYS}
    ratio = spread([b["tokens_per_s"] / p["tokens_per_s"] for b, p in zip(results["batched"], results["per_episode"])])
    rows_out = [
        [way, fmt(stats[way], 1), f"{sum(r['turns'] for r in results[way]) / args.repeats:.2f}"] for way in WAYS
    ]
    rows_out.append(["batched / per episode", fmt(ratio, 2), ""])
    report = {
        "model": str(args.model),
        "episodes": args.episodes * args.group,
        "repeats": args.repeats,
        "runs": results,
        "tokens_per_s": stats,
        "ratio": ratio,
    }
    shown = table(
        f"{args.episodes * args.group} episodes, HF engine, {THREADS} thread",
        ["way", "policy tokens/s", "turns"],
        rows_out,
    )
    publish("episode-throughput", args.out, report, shown, None, args.mlflow)


if __name__ == "__main__":
    main()
