"""The plain driver end to end on the tiny model: artifacts validate, parameters move, runs repeat."""

import gc
import json

import pytest
import torch
from rich.console import Console
from safetensors.torch import load_file

from coevo.coevolvers import load_coevolver
from coevo.driver import train
from coevo.loop import frozen_heap
from schemas.rewards import read_rewards
from schemas.rollouts import read_rollouts

from .conftest import tiny_config


def test_two_iterations_write_valid_artifacts_and_move_the_policy(tmp_path):
    # seed 1: with the unseen splits, seed 0's first two batches are all zero-variance groups (dropped),
    # so nothing moves
    cfg = tiny_config(tmp_path, seed=1)
    summary = train(cfg)
    out = cfg.run.out_dir
    assert summary["iterations"] == 2
    for it in (1, 2):
        rollouts = read_rollouts(out / "rollouts" / f"iter_{it:04d}.parquet")  # validates the schema
        rewards = read_rewards(out / "rewards" / f"iter_{it:04d}.parquet")
        assert len(rollouts) == len(rewards) == cfg.rollouts_per_iter
        load_coevolver(out / "coevolver" / f"iter_{it:04d}", cfg.coevolver_list[0], cfg.seed)  # manifest hash checks
    start = load_file(out / "bootstrap" / "model.safetensors")
    end = load_file(out / "checkpoints" / "iter_0002" / "model.safetensors")
    assert any(not torch.equal(start[k], end[k]) for k in start)
    meta = json.loads((out / "checkpoints" / "iter_0002" / "coevo.json").read_text())
    assert (
        meta["lineage"]["parent"]["weights_sha256"]
        == json.loads((out / "checkpoints" / "iter_0001" / "coevo.json").read_text())["weights_sha256"]
    )
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2 and "eval/acc" in json.loads(lines[-1]) and "time/rollout" in json.loads(lines[-1])
    assert summary["final_checkpoint"].endswith("iter_0002")
    assert {"eval/acc", "eval/acc_context", "eval/pass@2"} <= set(summary["final_eval"])


def test_same_seed_same_rewards_and_final_weights(tmp_path, monkeypatch):
    """... whatever the working directory; one outside a git checkout is warned about (no code commit
    for the lineage)."""
    first = tiny_config(tmp_path / "a", run={"iterations": 3, "checkpoint_every": 3})
    second = tiny_config(tmp_path / "b", run={"iterations": 3, "checkpoint_every": 3})
    consoles = [Console(record=True, width=400), Console(record=True, width=400)]
    train(first, consoles[0])  # from the repository's checkout
    monkeypatch.chdir(tmp_path)  # not a git checkout
    train(second, consoles[1])
    said = [console.export_text() for console in consoles]
    assert "is not a git checkout" not in said[0] and f"warning: {tmp_path} is not a git checkout" in said[1]
    for it in (1, 2, 3):
        a = read_rewards(first.run.out_dir / "rewards" / f"iter_{it:04d}.parquet")
        b = read_rewards(second.run.out_dir / "rewards" / f"iter_{it:04d}.parquet")
        assert a["reward"].tolist() == b["reward"].tolist()
    wa = load_file(first.run.out_dir / "checkpoints" / "iter_0003" / "model.safetensors")
    wb = load_file(second.run.out_dir / "checkpoints" / "iter_0003" / "model.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    bank_a = (first.run.out_dir / "coevolver" / "iter_0003" / "manifest.json").read_text()
    assert bank_a == (second.run.out_dir / "coevolver" / "iter_0003" / "manifest.json").read_text()


def test_frozen_heap_freezes_what_is_alive_for_the_run_only():
    """What exists before a run is out of the collector's full passes while it runs, and back after, even on error."""
    assert gc.get_freeze_count() == 0

    @frozen_heap()
    def run(fail: bool) -> int:
        if fail:
            raise RuntimeError("stage failed")
        return gc.get_freeze_count()

    assert run(fail=False) > 10_000  # the imported libraries' objects
    assert gc.get_freeze_count() == 0
    with pytest.raises(RuntimeError):
        run(fail=True)
    assert gc.get_freeze_count() == 0
