"""The policy-update stage with 1 vs 2 processes (policy.distributed.world_size; torchrun + DDP, gloo on CPU),
and on a GPU where one is visible (`--arms cpu:1,cpu:2,cuda:1`).

Per model (the tiny default policy, and SmolLM2-135M-Instruct with LoRA r8), one run directory:
prepare, bootstrap (the tiny one trains its warm start; SmolLM2 is copied in), one rollout shard of
P problems x G samples of up to C tokens (HF engine), rewards with signal in every group (i % 2),
then `update_stage` of iteration 1 timed once per world size, the policy cache emptied before each
(a fresh stage: load, train, save). One minibatch = the whole batch, so one optimizer step. The
2-process time includes torchrun's start, each rank's imports and its load of checkpoint k. Also
reports each arm's max abs weight difference from the first arm's checkpoint. Each arm is
DEVICE:WORLD_SIZE (policy.device, policy.distributed.world_size); rollouts are always on the CPU.
JSON to bench/results/ddp_update/ (`--out-json` elsewhere).

    nice -n 10 .venv/bin/python bench/ddp_update.py [--models tiny,smollm2] [--arms cpu:1,cpu:2] [--problems 8] \
        [--group 8] [--tokens 16] [--smollm DIR] [--reuse]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from safetensors.torch import load_file

from coevo.config import load_config
from coevo.io import write_json
from coevo.layout import RunLayout
from coevo.model.cache import forget_policies
from coevo.model.checkpoint import weights_file
from coevo.stages.in_force import in_force
from coevo.stages.prepare import bootstrap_stage, prepare_stage
from coevo.stages.rollout import rollout_stage
from coevo.stages.update import update_stage
from coevo.stages.verify import verify_stage
from schemas.rewards import read_rewards, write_rewards

ROOT = Path(__file__).resolve().parents[1]
TINY_PARAMS = ROOT / "examples" / "tiny.yaml"  # the tiny character-level policy's params (params.yaml trains SmolLM2)


# "llama135": the tiny policy's Llama with SmolLM2-135M's layer sizes (a char vocabulary and 9
# key-value heads, so 119.5M parameters), randomly initialised, its warm start and rollouts on the
# GPU: a GPU-sized update without model files (only the update's cost is of interest; its rewards are the bench's own)
SMOLLM2_SHAPE = {"hidden_size": 576, "num_layers": 30, "num_heads": 9, "intermediate_size": 1536, "max_position": 128}


def model_overrides(name: str, args) -> dict:
    if name == "tiny":
        return {"bootstrap": {"steps": 30, "batch_size": 16}}
    if name == "llama135":
        return {
            "bootstrap": {"steps": 2, "batch_size": 16},
            "policy": {"shape": SMOLLM2_SHAPE, "device": "cuda", "threads": args.cpu_threads},
        }
    return {
        "policy": {"checkpoint": str(args.smollm.resolve()), "lora": {"rank": 8, "lr": 1e-4}},
        "prompt": {"format": "chat"},
    }


def run_model(name: str, args, out: Path) -> dict:
    base = {
        "run": {"out_dir": str(out / name / "run")},
        "problems": {"data_dir": str(out / name / "data"), "n_train": 64, "n_test": 8},
        "rollout": {"problems_per_iter": args.problems, "group_size": args.group},
        "sampling": {"max_new_tokens": args.tokens},
        "optim": {"minibatch_size": args.problems * args.group},
        "policy": {"threads": 1, "device": "cpu"},
    }
    from coevo.config import deep_merge

    overrides = deep_merge(base, model_overrides(name, args))
    cfg = load_config(TINY_PARAMS, overrides)
    data = prepare_stage(cfg)
    boot = bootstrap_stage(cfg, data)
    rollouts, signal = RunLayout(cfg.run.out_dir).rollouts(1), cfg.run.out_dir / "signal.parquet"
    if not (args.reuse and rollouts.is_file() and signal.is_file()):
        now = in_force(cfg, 1, data)
        rollouts = rollout_stage(cfg, now, boot.checkpoint.path).path
        frame = read_rewards(verify_stage(cfg, now, rollouts).path)
        write_rewards(
            signal,
            frame.assign(
                reward=[float(i % 2) for i in range(len(frame))], passed=[i % 2 == 1 for i in range(len(frame))]
            ),
        )
    frame = read_rewards(signal)
    result: dict = {"model": name, "sequences": len(frame)}
    weights = {}
    for arm in args.arms.split(","):
        device, world = arm.split(":")
        wcfg = load_config(
            TINY_PARAMS,
            deep_merge(overrides, {"policy": {"device": device, "distributed": {"world_size": int(world)}}}),
        )
        forget_policies()
        start = time.perf_counter()
        now = in_force(wcfg, 1, data)  # built from the arm's params: the update trains with them
        record = update_stage(wcfg, now, boot.checkpoint.path, str(rollouts), str(signal), boot.coevolver.path, data)
        result[f"update_s_{arm}"] = round(time.perf_counter() - start, 2)
        result[f"steps_{arm}"] = record.metrics["policy/steps"]
        weights[arm] = load_file(weights_file(RunLayout(wcfg.run.out_dir).checkpoint(1)))
        first = next(iter(weights.values()))
        result[f"max_abs_weight_diff_{arm}"] = max(float((first[k] - weights[arm][k]).abs().max()) for k in first)
    print(result, flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="tiny,smollm2")
    parser.add_argument(
        "--arms",
        default="cpu:1,cpu:2",
        help="DEVICE:WORLD_SIZE,... (the first is the reference of the weight differences)",
    )
    parser.add_argument("--problems", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument(
        "--smollm",
        type=Path,
        default=ROOT / "models" / "smollm2-135m-instruct",
        help="SmolLM2-135M-Instruct HF directory",
    )
    parser.add_argument("--cpu-threads", type=int, default=1, help="torch threads of the llama135 model's CPU arms")
    parser.add_argument("--reuse", action="store_true", help="keep the rollouts and rewards of an earlier run in --out")
    parser.add_argument("--out", type=Path, default=Path("/tmp/coevo-bench-ddp"))
    parser.add_argument("--out-json", type=Path, default=ROOT / "bench" / "results" / "ddp_update" / "results.json")
    args = parser.parse_args()
    results = [run_model(name, args, args.out) for name in args.models.split(",")]
    write_json(args.out_json, {"args": {k: str(v) for k, v in vars(args).items()}, "results": results})


if __name__ == "__main__":
    main()
