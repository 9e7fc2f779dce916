"""The code loop end to end on the synthetic family with the tiny policy: coder and tester
co-evolve through the real engine, sandbox, CURE rewards, test bank and GRPO update."""

from __future__ import annotations

import torch
from safetensors.torch import load_file

from coevo.code.loop import run_code_loop
from coevo.code.problems import TESTER_CUE
from coevo.code.unit_test_bank import TESTER_SUFFIX, TestBank
from coevo.config import CoevolverConfig
from schemas.rewards import parse_details, read_rewards
from schemas.rollouts import read_rollouts
from tests.conftest import tiny_config


def test_code_loop_runs_end_to_end(tmp_path):
    cfg = tiny_config(
        tmp_path,
        # 8 samples per role: enough testers for the bank to admit some whatever the float32 kernels
        # (with 4 it admitted none in a venv installed afresh on 2026-12-04: the margin was one seed's luck)
        code={
            "iterations": 2,
            "problems_per_iter": 4,
            "group_size": 8,
            "warm_start_steps": 400,
            "warm_start_lr": 1e-2,
            "warm_start_batch": 16,
            "synth": {"n_train": 40, "n_test": 6},
        },
        sampling={"max_new_tokens": 8},
        policy={"shape": {"max_position": 96}},
        optim={"lr": 1e-3},
    )
    summary = run_code_loop(cfg, log=lambda _: None)
    out = cfg.run.out_dir / "code"
    before = load_file(out / "checkpoints" / "iter_0000" / "model.safetensors")
    after = load_file(out / "checkpoints" / "iter_0002" / "model.safetensors")
    assert any(not torch.equal(before[k], after[k]) for k in before)  # the update changed the policy
    for it in (1, 2):
        rollouts, rewards = (
            read_rollouts(out / "rollouts" / f"iter_{it:04d}.parquet"),
            read_rewards(out / "rewards" / f"iter_{it:04d}.parquet"),
        )
        assert len(rollouts) == len(rewards) == 4 * 2 * 8  # problems x roles x G
        roles = [parse_details(d)["role"] for d in rewards["details"]]
        assert roles.count("coder") == roles.count("tester") == 32
        for details, passed, reward in zip(rewards["details"], rewards["passed"], rewards["reward"]):
            facts = parse_details(details)
            if facts["role"] == "coder":
                assert facts["verdict"] in ("passed", "failed", "timeout", "memory", "crashed", "invalid")
                k, n = map(int, facts["passed"].split("/"))
                assert passed == (facts["verdict"] == "passed") and reward == k / n  # the ground-truth pass rate
            else:
                assert passed == (facts["accurate"] == facts["decidable"] == "1")
    banks = [
        TestBank.load(out / "test_bank" / f"iter_{it:04d}", CoevolverConfig(), 0) for it in (0, 1, 2)
    ]  # every version validates
    assert_bank_grows(banks, summary, out)
    assert set(summary["before"]) == set(summary["after"]) == {"eval/coder_pass_rate", "eval/tester_accuracy"}
    assert len(summary["history"]) == 2 and summary["sandbox_mode"] in ("namespaces", "rlimits")
    assert (out / "summary.json").is_file()


def assert_bank_grows(banks: list[TestBank], summary: dict, out) -> None:
    """The bank starts empty and grows by the tests it admits, never shrinking: each one a tester
    completion of its iteration that the rewards marked accurate, decidable and rejecting a wrong
    solution."""
    sizes = [bank.size() for bank in banks]
    assert sizes[0] == 0 < sizes[2] and sizes[0] <= sizes[1] <= sizes[2], sizes
    assert [h["coevo/bank_size"] for h in summary["history"]] == sizes[1:] and summary["bank_size"] == sizes[2]
    for it in (1, 2):
        rollouts, rewards = (
            read_rollouts(out / "rollouts" / f"iter_{it:04d}.parquet"),
            read_rewards(out / "rewards" / f"iter_{it:04d}.parquet"),
        )
        facts = dict(zip(rewards["rollout_id"], map(parse_details, rewards["details"])))
        admitted = {
            TESTER_CUE + r.completion
            for r in rollouts.itertuples()
            if r.problem_id.endswith(TESTER_SUFFIX)
            and facts[r.rollout_id]["accurate"] == facts[r.rollout_id]["decidable"] == "1"
            and int(facts[r.rollout_id]["rejected"]) >= 1
        }
        new = [e["test"] for entries in banks[it].tests.values() for e in entries if e["added_iter"] == it]
        assert len(new) == summary["history"][it - 1]["coevo/admitted"] and set(new) <= admitted
