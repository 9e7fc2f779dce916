"""The trainer's completion logprobs (shared prefill, LM head on the last prompt position and the
completion positions only) against a plain full-sequence forward pass with every logit."""

from __future__ import annotations

import torch

from coevo.model.checkpoint import load_policy
from coevo.update.logprobs import completion_logprobs, pack


def test_completion_only_logits_equal_full_logit_logprobs(tiny_policy_dir):
    policy = load_policy(tiny_policy_dir, "cpu")
    tok = policy.tokenizer
    prompts = [tok(q)["input_ids"] for q in ("3+4=", "3+4=", "12-7=", "9*9=")]  # a shared prompt and different lengths
    completions = [tok(c, add_special_tokens=False)["input_ids"] for c in ("7", "8x", "5", "81")]
    with torch.no_grad():
        packed = pack(prompts, completions, tok.pad_token_id, policy.model.device)
        got = completion_logprobs(policy.model, packed, temperature=0.7)  # [B, T]
        for row, (p, c) in enumerate(zip(prompts, completions)):
            ids = torch.tensor([p + c])  # [1, P+C], no padding
            logits = (
                policy.model(ids).logits[0, len(p) - 1 : -1] / 0.7
            )  # [C, V] all positions computed, completion ones kept
            expected = (
                torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(c).unsqueeze(-1)).squeeze(-1)
            )  # [C]
            assert torch.allclose(got[row, : len(c)], expected, atol=1e-6), (row, got[row], expected)
            assert torch.all(got[row, len(c) :] == 0)
