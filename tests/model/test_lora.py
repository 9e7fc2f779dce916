"""LoRA (peft) on the tiny policy: only adapters train and are saved, lineage names and checks the
base, resume is bit-identical, the merged export serves the same function, and checkpoints whose
weights did not change are linked, not rewritten."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
from transformers import AutoModelForCausalLM

from coevo.layout import RunLayout
from coevo.model.cache import forget_policies
from coevo.model.checkpoint import TRAINER_STATE, WEIGHTS, load_policy, save_checkpoint
from coevo.model.export import EXPORT_RECORD, export_merged
from coevo.model.lora import ADAPTER_CONFIG, ADAPTER_WEIGHTS, LoraTargetError, apply_lora, is_lora, merged_copy
from coevo.rollout.engines.hf import HFEngine
from coevo.stages.in_force import in_force
from coevo.stages.prepare import prepare_stage
from coevo.stages.update import update_stage
from coevo.store.lineage import verify_lineage
from coevo.update.objectives import build_objective
from coevo.update.stage import build_optimizer, policy_update
from schemas.rewards import write_rewards
from tests.conftest import first_iteration, tiny_config
from tests.update.test_update import _iteration_tables

LORA = {"rank": 4, "alpha": 8.0, "lr": 1e-2}


def _lora_policy(cfg, policy_dir):
    policy = load_policy(policy_dir, "cpu")
    policy.model = apply_lora(policy.model, cfg.policy.lora, seed=0)
    policy.base = policy_dir
    return policy


def _train_once(cfg, policy):
    rollouts, rewards = _iteration_tables(cfg, policy)
    rewards["reward"] = [float(i % 2) for i in range(len(rewards))]  # every group has both outcomes
    optimizer = build_optimizer(policy.model, cfg)
    stats = policy_update(policy, optimizer, build_objective(cfg.objective), rollouts, rewards, cfg, seed=0)
    assert stats["policy/steps"] > 0
    return optimizer


def test_a_lora_step_changes_only_the_adapters(tmp_path, tiny_policy_dir):
    cfg = tiny_config(tmp_path, policy={"lora": LORA})
    policy = _lora_policy(cfg, tiny_policy_dir)
    before = {k: v.detach().clone() for k, v in policy.model.named_parameters()}
    optimizer = _train_once(cfg, policy)
    trainable = {k for k, p in policy.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in k for k in trainable)
    assert optimizer.param_groups[0]["lr"] == LORA["lr"]  # policy.lora.lr, not optim.lr
    assert sum(len(g["params"]) for g in optimizer.param_groups) == len(trainable)
    after = dict(policy.model.named_parameters())
    assert all(torch.equal(before[k], after[k]) for k in before if k not in trainable)  # the base is frozen
    assert any(not torch.equal(before[k], after[k]) for k in trainable if "lora_B" in k)


def test_adapter_checkpoint_round_trip_holds_only_adapters(tmp_path, tiny_policy_dir):
    cfg = tiny_config(tmp_path, policy={"lora": LORA})
    policy = _lora_policy(cfg, tiny_policy_dir)
    optimizer = _train_once(cfg, policy)
    out = tmp_path / "ckpt"
    version = save_checkpoint(out, policy, {"iteration": 1}, optimizer)
    names = {p.name for p in out.iterdir()}
    assert {ADAPTER_WEIGHTS, ADAPTER_CONFIG, TRAINER_STATE} <= names and WEIGHTS not in names
    meta = json.loads((out / "coevo.json").read_text())
    assert meta["base"]["weights_sha256"] == json.loads((tiny_policy_dir / "coevo.json").read_text())["weights_sha256"]
    assert meta["weights_sha256"] == version == meta["files"][ADAPTER_WEIGHTS]
    state = torch.load(out / TRAINER_STATE, weights_only=True)["optimizer"]
    assert len(state["state"]) == sum(p.requires_grad for p in policy.model.parameters())  # adapter params only

    loaded = load_policy(out, "cpu")
    assert is_lora(loaded.model) and loaded.base.resolve() == tiny_policy_dir.resolve()
    ids = torch.tensor([policy.tokenizer("3+4=")["input_ids"]])  # [1, P]
    with torch.no_grad():
        assert torch.equal(policy.model(ids).logits, loaded.model(ids).logits)  # [1, P, V]
    fresh = build_optimizer(loaded.model, cfg)
    fresh.load_state_dict(state)  # the saved state fits the reloaded adapters exactly


def test_merged_export_and_hf_engine_serve_the_adapted_model(tmp_path, tiny_policy_dir):
    cfg = tiny_config(tmp_path, policy={"lora": LORA})
    policy = _lora_policy(cfg, tiny_policy_dir)
    optimizer = _train_once(cfg, policy)
    save_checkpoint(tmp_path / "ckpt", policy, {"iteration": 1}, optimizer)
    record = export_merged(tmp_path / "ckpt", tmp_path / "export")
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "export", local_files_only=True)
    assert record["lora"] and json.loads((tmp_path / "export" / EXPORT_RECORD).read_text()) == record
    assert not (tmp_path / "export" / ADAPTER_CONFIG).exists()
    ids = torch.tensor([policy.tokenizer("12+9=21")["input_ids"]])  # [1, P]
    with torch.no_grad():
        merged = merged_copy(policy.model)(ids).logits  # [1, P, V]
        assert torch.equal(exported(ids).logits, merged)
        assert torch.allclose(policy.model(ids).logits, merged, atol=1e-5)  # unmerged computes the same function
        assert not torch.allclose(load_policy(tiny_policy_dir, "cpu").model(ids).logits, merged, atol=1e-4)
        plain = HFEngine(load_policy(tiny_policy_dir, "cpu"))
        plain.load_weights(tmp_path / "ckpt")  # a plain engine model takes the merged weights
        assert torch.equal(plain.model(ids).logits, merged)


def test_a_target_matching_no_module_stops_before_anything_is_written(tmp_path):
    cfg = tiny_config(tmp_path, policy={"lora": {**LORA, "target_modules": ["q_proj", "nope_proj"]}})
    with pytest.raises(LoraTargetError, match=r"policy\.lora\.target_modules.*nope_proj") as error:
        prepare_stage(cfg)
    assert not cfg.problems.data_dir.exists() and not cfg.run.out_dir.exists()
    # docs/policy.md (LoRA): the error lists the model's linear layers (the names a target may use): the Llama
    # architecture's projections and head, and nothing else (no norms, embeddings or containers)
    listed = str(error.value).split("its linear layers are ", 1)[1]
    assert listed == str(["down_proj", "gate_proj", "k_proj", "lm_head", "o_proj", "q_proj", "up_proj", "v_proj"])


def test_bfloat16_lora_update_runs(tmp_path, tiny_policy_dir):
    cfg = tiny_config(tmp_path, policy={"lora": LORA, "dtype": "bfloat16"})
    policy = load_policy(tiny_policy_dir, "cpu", "bfloat16")
    policy.model = apply_lora(policy.model, cfg.policy.lora, seed=0)
    before = {k: v.detach().clone() for k, v in policy.model.named_parameters() if v.requires_grad}
    _train_once(cfg, policy)
    assert any(not torch.equal(before[k], p) for k, p in policy.model.named_parameters() if k in before)
    assert policy.model.get_base_model().model.embed_tokens.weight.dtype == torch.bfloat16


# ---- through the stages: lineage, resume, unchanged weights ----


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    """Bootstrap, one rollout shard, rewards with signal in every group and rewards without any."""
    cfg = tiny_config(tmp_path_factory.mktemp("lora_run"), policy={"lora": LORA})
    data, boot, rollouts, frame = first_iteration(cfg)
    signal, flat = cfg.run.out_dir / "signal.parquet", cfg.run.out_dir / "flat.parquet"
    write_rewards(
        signal,
        frame.assign(reward=[float(i % 2) for i in range(len(frame))], passed=[i % 2 == 1 for i in range(len(frame))]),
    )
    write_rewards(flat, frame.assign(reward=0.0, passed=False))
    return cfg, data, boot, rollouts, signal, flat


def _update(lora_run, it, parent, rewards):
    cfg, data, boot, rollouts, _, _ = lora_run
    now = in_force(cfg, it, data, choose=False)  # no version it-1 here: the params are what is in force
    return update_stage(cfg, now, str(parent), rollouts, str(rewards), boot.coevolver.path, data)


def test_resume_of_a_lora_run_is_bit_identical_and_lineage_checks_the_base(lora_run):
    cfg, _, boot, _, signal, _ = lora_run
    layout = RunLayout(cfg.run.out_dir)
    first = _update(lora_run, 1, boot.checkpoint.path, signal)
    second = _update(lora_run, 2, first.path, signal)  # uninterrupted: policy kept in memory
    uninterrupted = (layout.checkpoint(2) / ADAPTER_WEIGHTS).read_bytes()
    assert uninterrupted != (layout.checkpoint(1) / ADAPTER_WEIGHTS).read_bytes()
    forget_policies()  # a fresh process: base + adapter + optimizer state from checkpoint 1
    resumed = _update(lora_run, 2, first.path, signal)
    assert (layout.checkpoint(2) / ADAPTER_WEIGHTS).read_bytes() == uninterrupted
    assert resumed.sha256 == second.sha256

    record = json.loads((layout.checkpoint(2) / "coevo.json").read_text())["lineage"]
    assert record["base"] == {"path": "bootstrap", "weights_sha256": boot.checkpoint.sha256}
    assert verify_lineage(layout.checkpoint(2)) == []
    weights = layout.checkpoint(0) / WEIGHTS
    saved = weights.read_bytes()
    try:
        weights.write_bytes(saved[:-2] + bytes([saved[-2] ^ 1]) + saved[-1:])
        found = verify_lineage(layout.checkpoint(2))
        assert any(m.what == "base model" and m.path == str(weights.resolve()) for m in found)
    finally:
        weights.write_bytes(saved)


def test_unchanged_weights_are_copied_never_shared(lora_run):
    """No step: the child holds copies of its parent's adapter and optimizer state (same bytes,
    another inode, so a write into one never reaches the other), recorded as unchanged_from."""
    cfg, _, boot, _, signal, flat = lora_run
    layout = RunLayout(cfg.run.out_dir)
    parent = _update(lora_run, 1, boot.checkpoint.path, signal)
    out = _update(lora_run, 2, parent.path, flat)  # no group has signal: no step
    assert out.metrics["policy/steps"] == 0 and out.sha256 == parent.sha256
    for name in (ADAPTER_WEIGHTS, TRAINER_STATE):
        one, two = layout.checkpoint(1) / name, layout.checkpoint(2) / name
        assert not os.path.samefile(one, two) and one.read_bytes() == two.read_bytes()
    assert (
        json.loads((layout.checkpoint(2) / "coevo.json").read_text())["lineage"]["unchanged_from"]
        == "checkpoints/iter_0001"
    )
    assert verify_lineage(layout.checkpoint(2)) == []
    shutil.rmtree(layout.checkpoint(1))  # a pruned parent: the child's files survive
    assert load_policy(layout.checkpoint(2), "cpu").model is not None


def test_cli_lineage_and_export_merged_take_adapter_checkpoints(lora_run, tmp_path):
    from typer.testing import CliRunner

    from coevo.cli import app

    cfg, _, boot, _, signal, _ = lora_run
    checkpoint = _update(lora_run, 1, boot.checkpoint.path, signal).path
    runner = CliRunner()
    shown = runner.invoke(app, ["lineage", checkpoint, "--verify"])
    assert shown.exit_code == 0, shown.output
    assert "LoRA base" in shown.output and "every hash matches" in shown.output
    exported = runner.invoke(app, ["export-merged", checkpoint, "--out", str(tmp_path / "served"), "--json"])
    assert exported.exit_code == 0, exported.output
    record = json.loads(exported.output)
    assert record["lora"] and record["base"]["weights_sha256"] == boot.checkpoint.sha256
    assert (tmp_path / "served" / WEIGHTS).is_file()
