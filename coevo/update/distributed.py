"""Data-parallel policy update: torchrun launches N ranks, each trains its share of every minibatch in DDP.

Method. PyTorch DistributedDataParallel (Li et al. 2020, "PyTorch Distributed: Experiences on
Accelerating Data Parallel Training"), launched by torchrun (torch.distributed.run) with a c10d
rendezvous on loopback, as verl, OpenRLHF and prime-rl run their trainers. The update stage
(coevo/stages/update.py) starts `python -m torch.distributed.run --nproc-per-node N ... -m
coevo.update.rank` as a subprocess (`launch_update`); every rank (coevo/update/rank.py: the
stage's own update_state / update_train / update_save around this module's `Ranks`) reads
checkpoint k, the iteration's rollouts and rewards from their paths (the stage passes paths, never
tensors), builds the same training set, advantages and seeded minibatch order as the
single-process update (coevo/update/stage.py, whose `minibatch_loss` every rank calls: the
objective math exists once), and takes the rows `idx[rank::N]` of each minibatch.

Loss aggregation identical to one process. Each minibatch's loss is one aggregate over its tokens
(token-mean by default): sum / count. Each rank computes aggregate(its share) = sum_r / count_r,
all-reduces the counts (kl.shard_weight: tokens, sequences or rows by objective.aggregation), and
backpropagates aggregate * count_r / count_global * N. DDP averages the gradients over the N ranks,
so every rank holds the gradient of sum_r sum_r / count_global: the single-process gradient, not a
mean of rank means. The gradient-norm clip then sees the global gradient on every rank, and the
AdamW steps stay in lockstep. Rank 0 alone writes checkpoint k+1 (stages.update_save: the same
lineage and metadata, plus `world_size`) and the optimizer state, atomically; the launcher reads
its small result file. A rank that dies makes torchrun stop the others and exit non-zero: the
launcher raises DistributedUpdateError naming the iteration and the rank's exit, and nothing has
been written, so a re-run of the stage resumes from checkpoint k.

Departures.
1. Objectives whose loss reads a statistic of the whole minibatch (ess: the ESS; opsa: the mean
   entropy; opsd/sdar with teacher.apply_to other than "all": two normalisers) would see their
   rank's share only: they declare `shardable = False` and are refused with world_size > 1.
2. pi_old and the reference logprobs are computed by every rank for every row (a no-grad pass,
   duplicated N times) so they are bit-identical to the single-process ones; sharding them is a
   follow-up. The per-minibatch teacher pass runs on the rank's share only.
3. The reported `policy/` stats are the means of the ranks' minibatch stats (the loss and gradient
   are exact; a ratio mean over one rank's tokens is not the global one).
4. DDP only (CPU gloo or GPU nccl); FSDP2 for models that do not fit one device is not built yet.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel

from coevo.config import Config
from coevo.faults import kill_point
from coevo.io import write_json
from coevo.records import InForce, Splits, Trained
from coevo.update.objectives import Objective, build_objective
from coevo.update.objectives.kl import shard_weight
from coevo.update.prefix import rank_rows
from coevo.update.stage import TrainingSet, minibatch_loss

RESULT = "result.json"


class DistributedUpdateError(RuntimeError):
    """torchrun exited non-zero: a rank failed; checkpoint k+1 was not written."""


class Ranks:
    """This process's place in the update: rank, world size and the DDP wrapper of the policy's model."""

    def __init__(self, model: torch.nn.Module, device: torch.device):
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.device = device
        ids = [device.index] if device.type == "cuda" else None
        self.ddp = DistributedDataParallel(
            model, device_ids=ids, broadcast_buffers=False
        )  # every rank loaded checkpoint k

    def share_loss(
        self, model, objective: Objective, data: TrainingSet, idx: list[int], old, ref, cfg: Config, pad_id: int
    ) -> tuple[Tensor, dict]:
        """This rank's loss on its share of the minibatch `idx` (rows idx[rank::world], or a
        contiguous run of whole groups with policy.shared_prefix: group; coevo/update/prefix.py),
        scaled so that DDP's mean over ranks of the gradients is the gradient of the whole minibatch's loss."""
        mine = rank_rows(idx, self.rank, self.world, cfg.policy.shared_prefix)
        rows = mine or idx[:1]  # a rank without rows still joins the all-reduce, with weight 0
        kill_point("ddp-step", self.rank)
        loss, stats, batch = minibatch_loss(model, self.ddp, objective, data, rows, old, ref, cfg, pad_id)
        local = (
            shard_weight(batch.mask, cfg.objective.aggregation) if mine else torch.zeros((), device=batch.mask.device)
        )
        total = local.detach().clone()
        dist.all_reduce(total)  # the whole minibatch's tokens (or sequences)
        return loss * (local / total.clamp(min=1.0) * self.world), stats

    def mean_stats(self, stats: dict[str, float]) -> dict[str, float]:
        """Each stat averaged over the ranks (same keys on every rank: same objective)."""
        keys = sorted(stats)
        values = torch.tensor([stats[k] for k in keys], dtype=torch.float64, device=self.device)  # [K]
        dist.all_reduce(values)
        return {k: float(v) / self.world for k, v in zip(keys, values.tolist())}


def backend_of(cfg: Config) -> str:
    """The torch.distributed backend: policy.distributed.backend, 'auto' = nccl on GPUs, else gloo."""
    chosen = cfg.policy.distributed.backend
    if chosen == "auto":
        return "nccl" if torch.cuda.is_available() and cfg.policy.device != "cpu" else "gloo"
    return chosen


def check_distributed(cfg: Config, objective: Objective) -> None:
    """Refuse settings the distributed update cannot run exactly (before any process starts)."""
    if not getattr(objective, "shardable", False):
        raise ValueError(
            f"policy.distributed.world_size={cfg.policy.distributed.world_size}: objective {objective.name!r} "
            "reads a statistic of the whole minibatch (or two loss normalisers), which a rank's share cannot "
            "reproduce exactly; use world_size 1 or a shardable objective (grpo, rlsd; opsd/sdar with "
            "teacher.apply_to: all)"
        )
    if backend_of(cfg) == "nccl" and torch.cuda.device_count() < cfg.policy.distributed.world_size:
        raise ValueError(
            f"policy.distributed: nccl needs one GPU per rank: world_size {cfg.policy.distributed.world_size}, "
            f"{torch.cuda.device_count()} GPUs"
        )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch_update(
    cfg: Config,
    now: InForce,
    checkpoint: str,
    rollouts: str,
    rewards: str,
    coevolver: str,
    data: Splits,
    rank_module: str,
) -> Trained:
    """Run the update of iteration `now.iteration` (what it runs under: coevo/records.py) in
    `world_size` torchrun ranks, each `python -m rank_module JOB` (the stage's rank entry point,
    coevo/update/rank.py); the stage's record (checkpoint k+1 and its metrics) from rank 0. Raises
    DistributedUpdateError when torchrun fails (a rank died), with the failed ranks' exits; nothing
    is written then."""
    settings = cfg.policy.distributed
    check_distributed(cfg, build_objective(cfg.objective))
    it, port = now.iteration, settings.master_port or free_port()
    cfg.run.out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".ddp-{it:04d}-", dir=cfg.run.out_dir) as tmp:
        job = Path(tmp)
        write_json(
            job / "job.json",
            {
                "config": cfg.model_dump(mode="json"),
                "in_force": now.to_json(),
                "checkpoint": checkpoint,
                "rollouts": rollouts,
                "rewards": rewards,
                "coevolver": coevolver,
                "data": data.to_json(),
            },
        )
        command = [
            sys.executable, "-m", "torch.distributed.run",
            "--nnodes", "1", "--nproc-per-node", str(settings.world_size),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--max-restarts", "0",
            "-m", rank_module, str(job),
        ]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": str(cfg.policy.threads or 1)}
        with open(job / "torchrun.log", "w") as log:
            code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env, check=False).returncode
        if code != 0 or not (job / RESULT).is_file():
            raise DistributedUpdateError(
                failure_message(it, checkpoint, code, (job / "torchrun.log").read_text(errors="replace"))
            )
        return Trained.from_json(json.loads((job / RESULT).read_text()))


def failure_message(it: int, checkpoint: str, code: int, log: str) -> str:
    """A one-paragraph error: the iteration, each failed rank's exit (from torchrun's summary), the log's tail."""
    failed = re.findall(r"rank\s*:\s*(\d+)\s*\(local_rank: \d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)", log)
    ranks = ", ".join(f"rank {rank} exited {exit_text(int(code))}" for rank, code in failed) or "no rank summary"
    tail = "\n".join(log.strip().splitlines()[-15:])
    return (
        f"iteration {it}: the distributed policy update failed (torchrun exit {code}; {ranks}); "
        f"checkpoint {it} was not written; re-run the update stage to resume from {checkpoint}.\n--- torchrun log "
        f"(tail) ---\n{tail}"
    )


def exit_text(code: int) -> str:
    if code < 0:
        import signal

        return f"{code} (killed by {signal.Signals(-code).name})"
    return str(code)
