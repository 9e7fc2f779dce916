"""Dynamic sampling on the frontier mix, a short probe: the share of the trained batch's groups with no
outcome signal, and what the extra rounds cost, GRPO against GRPO with `rollout.dynamic_sampling`.

Both arms run the settle comparison's setting (bench/specs/smollm2_frontier_settle.yaml: SmolLM2-135M-
Instruct, LoRA, vLLM, add/sub/mul with 1-3 digit operands) for a few iterations with the plain driver,
one after the other, from the same seed; only a small held-out split is evaluated (the probe reads
the training batches). Per arm and iteration it reads metrics.jsonl: the zero-variance share of the
groups the update trained on (GRPO: every drawn group; dynamic sampling: the kept ones) and of the
drawn groups, the extra rounds, the completion tokens sampled (a load-independent cost) and the
rollout and update seconds (measured under whatever else the machine was running: read them as such).

    .venv/bin/python bench/dynamic_sampling.py --iterations 6 --out bench/results/dynamic-sampling-probe.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from coevo.compare.spec import load_spec  # noqa: E402
from coevo.config import deep_merge, load_config  # noqa: E402
from coevo.driver import train  # noqa: E402
from coevo.io import write_json  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "bench" / "specs" / "smollm2_frontier_settle.yaml"
ARMS = {"grpo": {}, "grpo_dynamic": {"rollout": {"dynamic_sampling": {"enabled": True}}}}


def arm_config(name: str, iterations: int, root: Path):
    spec = load_spec(SPEC)
    own = {
        "seed": 0,
        "run": {"iterations": iterations, "out_dir": str(root / name)},
        "problems": {"data_dir": str(root / name / "data"), "n_test": 27, "n_val": 9},
        "eval": {"every": 1000},
        "tracking": {"mlflow_uri": f"sqlite:///{root / 'mlflow.db'}"},
    }
    overrides = deep_merge(deep_merge(spec.overrides, {"coevolver": {"kind": "none"}}), ARMS[name])
    return load_config(spec.arms[0].params, deep_merge(overrides, own))


def per_iteration(run: Path, per_iter: int, group_size: int) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    out = []
    for row in rows:
        drawn = row.get("rollout/ds_groups_drawn", per_iter)
        out.append(
            {
                "iteration": int(row["iteration"]),
                "zero_var_trained": row.get("rollout/ds_zero_var_share_kept", row["coevo/zero_var_share"]),
                "zero_var_drawn": row["coevo/zero_var_share"],
                "groups_drawn": drawn,
                "extra_rounds": row.get("rollout/ds_rounds", 0.0),
                "tokens": row["rollout/completion_len"] * drawn * group_size,  # completion tokens sampled
                "rollout_s": row["time/rollout"] + row.get("time/verify", 0.0),
                "update_s": row["time/update"],
            }
        )
    return out


def summarise(rows: list[dict]) -> dict:
    return {key: statistics.fmean(r[key] for r in rows) for key in rows[0] if key != "iteration"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "dynamic-sampling-probe.json")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ds-probe-"))
    result = {"spec": str(SPEC.relative_to(ROOT)), "iterations": args.iterations, "arms": {}}
    for name in ARMS:
        cfg = arm_config(name, args.iterations, root)
        train(cfg)
        rows = per_iteration(cfg.run.out_dir, cfg.rollout.problems_per_iter, cfg.rollout.group_size)
        result["arms"][name] = {"per_iteration": rows, "mean": summarise(rows)}
    grpo, dynamic = result["arms"]["grpo"]["mean"], result["arms"]["grpo_dynamic"]["mean"]
    result["ratios"] = {
        "zero_var_trained": dynamic["zero_var_trained"] / grpo["zero_var_trained"],
        "tokens": dynamic["tokens"] / grpo["tokens"],
        "rollout_s": dynamic["rollout_s"] / grpo["rollout_s"],
        "update_s": dynamic["update_s"] / grpo["update_s"],
    }
    write_json(args.out, result)
    print(
        json.dumps({"means": {k: v["mean"] for k, v in result["arms"].items()}, "ratios": result["ratios"]}, indent=2)
    )


if __name__ == "__main__":
    main()
