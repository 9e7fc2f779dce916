"""Full fine-tuning vs LoRA on a real model: update step time and checkpoint size on disk.

SmolLM2-135M-Instruct (a local HF directory, float32 unless --dtype) trains on a fixed synthetic
batch: B sequences of a P-token prompt and a C-token completion, scored by coevo's trainer pass
(`completion_logprobs`: one shared prefill per distinct prompt, the LM head on the last prompt
position and the completion positions), a policy-gradient surrogate with fixed advantages, backward,
gradient clipping and AdamW (coevo's `build_optimizer`: all parameters, or the adapters only).
Per arm: one warm-up step, then --steps timed steps (mean and spread); then `save_checkpoint` with
the optimizer state, timed, and the bytes each checkpoint holds (weights or adapter, optimizer state,
everything). JSON goes to bench/results/lora_step/. The arms run one after the other in one process. Arm `head` times a
no-grad trainer pass with the LM head on the last prompt position only vs on every prompt position.

    .venv/bin/python bench/lora_step.py [--model models/smollm2-135m-instruct] [--steps 3]
        [--batch 16] [--prompt-len 32] [--completion-len 24] [--rank 8] [--arms full,lora,head]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from coevo.config import load_config
from coevo.io import write_json
from coevo.model.checkpoint import TRAINER_STATE, load_policy, save_checkpoint, weights_file
from coevo.model.lora import apply_lora
from coevo.update.logprobs import completion_logprobs, pack
from coevo.update.stage import build_optimizer

ROOT = Path(__file__).resolve().parents[1]
TINY_PARAMS = ROOT / "examples" / "tiny.yaml"  # the tiny character-level policy's params (params.yaml trains SmolLM2)


def batch(vocab: int, args, generator: torch.Generator) -> tuple[list[list[int]], list[list[int]], torch.Tensor]:
    """B/4 distinct prompts (groups of 4 share one), random completions, advantages +-1."""
    groups = max(1, args.batch // 4)
    prompts = [torch.randint(100, vocab, (args.prompt_len,), generator=generator).tolist() for _ in range(groups)]
    rows = [prompts[i % groups] for i in range(args.batch)]
    completions = [
        torch.randint(100, vocab, (args.completion_len,), generator=generator).tolist() for _ in range(args.batch)
    ]
    advantages = torch.tensor([1.0 if i % 2 else -1.0 for i in range(args.batch)])  # [B]
    return rows, completions, advantages


def step(policy, optimizer, packed, advantages: torch.Tensor, clip: float) -> None:
    logprobs = completion_logprobs(policy.model, packed)  # [B, T]
    loss = -(advantages.unsqueeze(1) * logprobs * packed.completion_mask).sum() / packed.completion_mask.sum()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for g in optimizer.param_groups for p in g["params"]], clip)
    optimizer.step()


def run_arm(arm: str, args) -> dict:
    overrides = {
        "policy": {"dtype": args.dtype, "lora": {"rank": args.rank if arm == "lora" else 0, "lr": 1e-4}},
        "optim": {"lr": 1e-5},
    }
    cfg = load_config(TINY_PARAMS, overrides)
    policy = load_policy(args.model, "cpu", args.dtype)
    if arm == "lora":
        policy.model, policy.base = apply_lora(policy.model, cfg.policy.lora, seed=0), Path(args.model)
    policy.model.eval()
    optimizer = build_optimizer(policy.model, cfg)
    prompts, completions, advantages = batch(len(policy.tokenizer), args, torch.Generator().manual_seed(0))
    packed = pack(prompts, completions, policy.tokenizer.pad_token_id, policy.model.device)
    trainable = sum(p.numel() for p in policy.model.parameters() if p.requires_grad)
    step(policy, optimizer, packed, advantages, cfg.optim.grad_clip)  # warm-up
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step(policy, optimizer, packed, advantages, cfg.optim.grad_clip)
        times.append(time.perf_counter() - start)
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        out = Path(tmp) / "ckpt"
        start = time.perf_counter()
        save_checkpoint(out, policy, {"iteration": 1}, optimizer)
        save_s = time.perf_counter() - start
        sizes = {
            "weights": weights_file(out).stat().st_size,
            "optimizer": (out / TRAINER_STATE).stat().st_size,
            "total": sum(p.stat().st_size for p in out.iterdir()),
        }
    return {
        "arm": arm,
        "trainable_params": trainable,
        "step_s_mean": statistics.mean(times),
        "step_s_min": min(times),
        "step_s_max": max(times),
        "save_s": save_s,
        "checkpoint_mb": {k: round(v / 1e6, 2) for k, v in sizes.items()},
    }


def head_arm(args) -> dict:
    """The LM head's share: a no-grad trainer pass (pi_old) with the head on the last prompt position
    (coevo's `completion_logprobs`) vs on every prompt position (the head applied to all P, then the
    last row taken, as before), on the same batch and model, alternating, --steps each."""
    from coevo.update import logprobs as lp

    policy = load_policy(args.model, "cpu", args.dtype)
    prompts, completions, _ = batch(len(policy.tokenizer), args, torch.Generator().manual_seed(0))
    packed = pack(prompts, completions, policy.tokenizer.pad_token_id, policy.model.device)
    model = policy.model

    def every_position(model_, prompt_ids, prompt_mask, prompt_of):
        positions = (prompt_mask.cumsum(-1) - 1).clamp(min=0)  # [U, P]
        out = model_(
            input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=positions, use_cache=True
        )  # logits [U, P, V]
        out.past_key_values.batch_select_indices(prompt_of)
        return out.logits[:, -1, :][prompt_of], out.past_key_values, prompt_mask[prompt_of], positions[prompt_of, -1:]

    times: dict[str, list[float]] = {"last_position": [], "every_position": []}
    kept = lp.shared_prefill
    with torch.no_grad():
        for _ in range(args.steps + 1):
            for name, prefill in (("last_position", kept), ("every_position", every_position)):
                lp.shared_prefill = prefill
                try:
                    start = time.perf_counter()
                    completion_logprobs(model, packed)
                    times[name].append(time.perf_counter() - start)
                finally:
                    lp.shared_prefill = kept
    return {"arm": "head", **{f"{k}_s_mean": statistics.mean(v[1:]) for k, v in times.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/smollm2-135m-instruct")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--completion-len", type=int, default=24)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--arms", default="full,lora")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tmp", default=None, help="Where checkpoints are written (default: the system temp dir).")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    results = [head_arm(args) if arm == "head" else run_arm(arm, args) for arm in args.arms.split(",")]
    record = {"settings": vars(args), "torch_threads": torch.get_num_threads(), "results": results}
    out = ROOT / "bench" / "results" / "lora_step" / f"lora_step_{args.arms.replace(',', '_')}.json"
    write_json(out, record)
    print(json.dumps(record, indent=2))
    print(f"written to {out}")


if __name__ == "__main__":
    main()
