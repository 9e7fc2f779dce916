"""The train/inference mismatch metrics (coevo/update/mismatch.py) logged beside the vLLM engine;
no vLLM needed."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from coevo.update.mismatch import measured_rows, mismatch_of, mismatch_stats


def test_mismatch_stats_by_hand():
    # row 0: pi_trainer = (0.5, 0.25), pi_sampler = (0.5, 0.5); row 1 is padding (mask 0), ignored
    trainer = torch.log(torch.tensor([[0.5, 0.25], [0.1, 0.1]]))
    sampler = torch.log(torch.tensor([[0.5, 0.5], [0.9, 0.9]]))
    mask = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    stats = mismatch_stats(trainer, sampler, mask)
    # log ratios 0 and log(0.5) = -0.6931: |.| mean 0.3466, max 0.6931
    # k3 = r - 1 - log r: 0 and 0.5 - 1 + 0.6931 = 0.1931, mean 0.0966
    assert stats["policy/mismatch_abs_logprob"] == pytest.approx(math.log(2) / 2, abs=1e-6)
    assert stats["policy/mismatch_abs_logprob_max"] == pytest.approx(math.log(2), abs=1e-6)
    assert stats["policy/mismatch_kl"] == pytest.approx((0.5 - 1 + math.log(2)) / 2, abs=1e-6)
    assert stats["policy/mismatch_tokens"] == 2.0
    assert mismatch_stats(trainer, sampler, torch.zeros_like(mask)) == {"policy/mismatch_tokens": 0.0}


def test_only_rows_sampled_without_context_are_measured(tiny_policy_dir):
    from coevo.model.checkpoint import load_policy
    from coevo.update.logprobs import completion_logprobs, pack

    policy = load_policy(tiny_policy_dir, "cpu")
    tok = policy.tokenizer
    bare, with_skill = tok("3+4=")["input_ids"], tok("1+1=2\n3+4=")["input_ids"]
    completion = tok("7", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    with torch.no_grad():
        exact = completion_logprobs(
            policy.model, pack([bare], [completion], tok.pad_token_id, policy.model.device), 1.0
        )[0]
    rollouts = pd.DataFrame(
        {
            "question": ["3+4=", "3+4="],
            "prompt": ["3+4=", "1+1=2\n3+4="],
            "prompt_ids": [bare, with_skill],
            "completion_ids": [completion, completion],
            "sampling_logprobs": [exact.tolist(), [-5.0, -5.0]],  # the skill row's would count as a huge mismatch
        }
    )
    measured = measured_rows(rollouts)
    assert list(measured.index) == [0]
    stats = mismatch_of([exact], list(measured["sampling_logprobs"]))
    assert stats["policy/mismatch_tokens"] == len(completion)
    assert stats["policy/mismatch_abs_logprob"] < 1e-6 and stats["policy/mismatch_kl"] < 1e-6
    assert mismatch_of([], []) == {"policy/mismatch_tokens": 0.0}
