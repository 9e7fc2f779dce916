"""The distributed policy update (coevo/update/distributed.py): real torchrun, gloo on loopback, the tiny policy.

Two ranks on the same global batch must give the single-process weights (the loss is scaled by the
all-reduced token count, so DDP's mean over ranks is undone exactly); a rank SIGKILLed mid-update
fails the stage with a clear error, writes nothing, and a re-run resumes from checkpoint k.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from coevo.layout import RunLayout
from coevo.model.cache import forget_policies
from coevo.model.checkpoint import WEIGHTS
from coevo.stages.in_force import in_force
from coevo.stages.update import update_stage
from coevo.store.lineage import verify_lineage
from coevo.update.distributed import DistributedUpdateError, check_distributed
from coevo.update.objectives import build_objective
from schemas.rewards import write_rewards
from tests.conftest import first_iteration, tiny_config

KL = {"kl_coef": 0.05, "aggregation": "seq-mean-token-mean"}  # a reference model and the per-sequence normaliser


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Bootstrap, one rollout shard and rewards with signal in every group (uneven completion lengths)."""
    root = tmp_path_factory.mktemp("ddp_run")
    cfg = tiny_config(root)
    data, boot, rollouts, frame = first_iteration(cfg)
    signal = cfg.run.out_dir / "signal.parquet"
    write_rewards(
        signal,
        frame.assign(
            reward=[float(i % 3 == 0) for i in range(len(frame))], passed=[i % 3 == 0 for i in range(len(frame))]
        ),
    )
    return root, data, boot, rollouts, str(signal)


def _update(
    run, world_size: int, objective: dict | None = None, policy: dict | None = None
) -> tuple[dict, dict[str, torch.Tensor]]:
    """Checkpoint 1 from the bootstrap with `world_size` processes; the stage record and the weights."""
    root, data, boot, rollouts, signal = run
    cfg = tiny_config(
        root, policy={"distributed": {"world_size": world_size}, **(policy or {})}, objective=objective or {}
    )
    forget_policies()
    now = in_force(cfg, 1, data)
    record = update_stage(cfg, now, boot.checkpoint.path, rollouts, signal, boot.coevolver.path, data)
    return record, load_file(RunLayout(cfg.run.out_dir).checkpoint(1) / WEIGHTS)


def _max_abs_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.fixture(scope="module")
def single(run):
    return _update(run, 1)


@pytest.fixture(scope="module")
def two_ranks(run):
    """The 2-rank GRPO update: its record, weights, and what rank 0 left on disk right after it."""
    record, weights = _update(run, 2)
    checkpoint = RunLayout(run[0] / "run").checkpoint(1)
    left = {
        "meta": json.loads((checkpoint / "coevo.json").read_text()),
        "lineage_mismatches": verify_lineage(checkpoint),
        "trainer_state": (checkpoint / "trainer_state.pt").is_file(),
        "job_dirs": list((run[0] / "run").glob(".ddp-*")),
    }
    return record, weights, left


@pytest.mark.parametrize("objective", [None, KL], ids=["grpo", "grpo-kl-seqmean"])
def test_two_ranks_give_the_single_process_weights(run, single, two_ranks, objective):
    one, one_weights = single if objective is None else _update(run, 1, objective)
    two, two_weights = two_ranks[:2] if objective is None else _update(run, 2, objective)
    boot_weights = load_file(RunLayout(run[0] / "run").checkpoint(0) / WEIGHTS)
    assert _max_abs_diff(one_weights, boot_weights) > 1e-4  # the update moved the weights
    diff = _max_abs_diff(one_weights, two_weights)
    print(f"max |w_1proc - w_2proc| = {diff:.3e}")
    assert diff <= 1e-5
    assert two.metrics["policy/steps"] == one.metrics["policy/steps"] == 2
    assert two.metrics["policy/grad_norm"] == pytest.approx(
        one.metrics["policy/grad_norm"], rel=1e-4
    )  # the global gradient on every rank


def test_two_ranks_with_whole_group_shares_give_the_single_process_weights(run, single):
    """policy.shared_prefix: group: minibatches of whole groups, each rank a contiguous run of them
    (coevo/update/prefix.py), so a rank encodes each of its groups' prompts once."""
    group = {"shared_prefix": "group"}
    one, one_weights = _update(run, 1, policy=group)
    two, two_weights = _update(run, 2, policy=group)
    assert _max_abs_diff(one_weights, single[1]) > 0  # other minibatches than the row permutation's
    diff = _max_abs_diff(one_weights, two_weights)
    print(f"shared_prefix group: max |w_1proc - w_2proc| = {diff:.3e}")
    assert diff <= 1e-5
    assert two.metrics["policy/grad_norm"] == pytest.approx(one.metrics["policy/grad_norm"], rel=1e-4)


def test_rank_zero_writes_the_checkpoint_with_its_lineage(run, two_ranks):
    record, _, left = two_ranks
    meta = left["meta"]
    assert meta["world_size"] == 2 and meta["iteration"] == 1
    assert meta["weights_sha256"] == record.sha256
    assert meta["lineage"]["parent"]["weights_sha256"] == run[2].checkpoint.sha256
    assert left["lineage_mismatches"] == []
    assert left["trainer_state"]
    assert left["job_dirs"] == []  # the launcher's job directory is gone


def test_a_killed_rank_fails_the_update_and_the_rerun_resumes(run, single, monkeypatch):
    checkpoint = RunLayout(run[0] / "run").checkpoint(1)
    shutil.rmtree(checkpoint, ignore_errors=True)
    monkeypatch.setenv("COEVO_KILL", "ddp-step:1")  # rank 1 SIGKILLs itself at its first optimizer step
    with pytest.raises(
        DistributedUpdateError, match=r"iteration 1: .*rank 1 exited -9 \(killed by SIGKILL\).*re-run the update stage"
    ):
        _update(run, 2)
    assert not checkpoint.exists()  # nothing half-written
    monkeypatch.delenv("COEVO_KILL")
    _, weights = _update(run, 2)
    assert _max_abs_diff(single[1], weights) <= 1e-5


@pytest.mark.parametrize(
    ("name", "apply_to"),
    [
        ("ess", "all"),
        ("opsa", "all"),
        ("opsd", "correct"),
        ("opsd", "incorrect"),
        ("sdar", "correct"),
        ("sdar", "incorrect"),
    ],
)
def test_objectives_with_minibatch_statistics_are_refused(tmp_path, name, apply_to):
    """ess and opsa read a statistic of the whole minibatch; opsd/sdar restricted by teacher.apply_to
    normalise the distillation term by the selected tokens and the GRPO term by all: two normalisers."""
    cfg = tiny_config(
        tmp_path, policy={"distributed": {"world_size": 2}}, objective={"name": name, "teacher": {"apply_to": apply_to}}
    )
    with pytest.raises(ValueError, match=rf"objective {name!r} reads a statistic of the whole minibatch"):
        check_distributed(cfg, build_objective(cfg.objective))


@pytest.mark.parametrize(("name", "apply_to"), [("grpo", "all"), ("opsd", "all"), ("sdar", "all"), ("rlsd", "correct")])
def test_shardable_objectives_pass_the_check(tmp_path, name, apply_to):
    """The shardable list of docs/policy.md ("Distributed policy update"): GRPO, rlsd whatever apply_to, opsd/sdar
    distilling on every sequence."""
    cfg = tiny_config(
        tmp_path,
        policy={"distributed": {"world_size": 2, "backend": "gloo"}},
        objective={"name": name, "teacher": {"apply_to": apply_to}},
    )
    check_distributed(cfg, build_objective(cfg.objective))
