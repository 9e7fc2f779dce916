"""One rank of the distributed update stage: the module torchrun runs (`-m coevo.update.rank JOB`).

The update stage (coevo/stages/update.py, policy.distributed.world_size > 1) starts torchrun through
`launch_update` (coevo/update/distributed.py), naming this module; each rank loads checkpoint k,
builds the update's optimizer, objective and reference exactly as the single-process stage does
(`update_state`), trains its share of every minibatch in DDP (`update_train` with its
`Ranks`), and rank 0 alone writes checkpoint k+1 (`update_save`) and the result file the
launcher reads. The stage's work lives in coevo/update/steps.py and the DDP mechanics in
coevo/update/distributed.py; this module only joins them in the rank's process.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
from dataclasses import asdict
from pathlib import Path

import torch
import torch.distributed as dist

from coevo.config import Config
from coevo.io import write_json
from coevo.layout import RunLayout
from coevo.model.checkpoint import load_policy
from coevo.records import InForce, Splits, Trained
from coevo.update.distributed import RESULT, Ranks, backend_of
from coevo.update.steps import update_save, update_state, update_train


def run_rank(job: Path) -> None:
    """One rank: load checkpoint k, train its shares in DDP, rank 0 writes checkpoint k+1 and the result."""
    spec = json.loads((job / "job.json").read_text())
    cfg, now = Config.model_validate(spec["config"]), InForce.from_json(spec["in_force"])
    it = now.iteration
    backend = backend_of(cfg)
    local_rank = int(os.environ["LOCAL_RANK"])
    device = f"cuda:{local_rank}" if backend == "nccl" else "cpu"
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend)
    try:
        torch.set_num_threads(cfg.policy.threads or 1)
        paths = [spec[key] for key in ("checkpoint", "rollouts", "rewards", "coevolver")]
        policy = load_policy(spec["checkpoint"], device, cfg.policy.dtype)
        optimizer, objective, reference = update_state(cfg, it, spec["checkpoint"], policy)
        ranks = Ranks(policy.model, torch.device(device))
        stats = update_train(cfg, now, policy, optimizer, objective, reference, *paths[1:], ranks)
        if ranks.rank == 0:
            data, world = Splits.from_json(spec["data"]), {"world_size": ranks.world}
            version = update_save(cfg, now, *paths, data, policy, optimizer, stats, world)
            out = RunLayout(cfg.run.out_dir).checkpoint(it)
            write_json(job / RESULT, asdict(Trained(str(out), version, stats)))
        # DDP's reducer holds the process group: free it while the group is alive (destroyed after the
        # group, its gloo threads wait on the peer that has already exited, and the rank hangs)
        del ranks
        gc.collect()
        dist.barrier()
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="One rank of coevo's distributed policy update (started by torchrun).")
    parser.add_argument("job", type=Path, help="the launcher's job directory (job.json)")
    run_rank(parser.parse_args(argv).job)


if __name__ == "__main__":
    main()
