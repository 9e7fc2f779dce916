import torch

from coevo.config import SamplingConfig
from coevo.model.checkpoint import load_policy
from coevo.rollout.engines.hf import HFEngine
from coevo.update.logprobs import completion_logprobs, pack


def _engine(path) -> HFEngine:
    return HFEngine(load_policy(path, "cpu"), batch_size=5)


def test_n_completions_per_prompt_with_logprobs(tiny_policy_dir):
    engine = _engine(tiny_policy_dir)
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=4)
    out = engine.generate(["1+2=", "9-3=", "4+4="], 3, sampling, seed=1)
    assert [len(group) for group in out] == [3, 3, 3]
    eos = engine.policy.tokenizer.eos_token_id
    for group in out:
        for g in group:
            assert 1 <= len(g.token_ids) <= 4 and len(g.logprobs) == len(g.token_ids)
            assert all(lp <= 0 for lp in g.logprobs)
            assert g.finished == (g.token_ids[-1] == eos)
            assert eos not in g.token_ids[:-1]  # generation stops at EOS


def test_same_seed_same_samples_other_seed_differs(tiny_policy_dir):
    engine = _engine(tiny_policy_dir)
    sampling = SamplingConfig(temperature=1.5, max_new_tokens=4)
    first = engine.generate(["1+2="] * 4, 4, sampling, seed=7)
    again = engine.generate(["1+2="] * 4, 4, sampling, seed=7)
    other = engine.generate(["1+2="] * 4, 4, sampling, seed=8)
    ids = lambda out: [g.token_ids for group in out for g in group]  # noqa: E731
    assert ids(first) == ids(again)
    assert ids(first) != ids(other)


def test_sampling_logprobs_match_trainer_recomputation(tiny_policy_dir):
    """Left-padded cached decoding and the trainer's right-padded full pass agree per token."""
    engine = _engine(tiny_policy_dir)
    sampling = SamplingConfig(temperature=0.8, max_new_tokens=4)
    prompts = ["1+2=", "19-3=", "4+4=", "7*8="]  # different lengths exercise the padding
    out = [g for group in engine.generate(prompts, 2, sampling, seed=3) for g in group]
    model = engine.policy.model
    packed = pack(
        [g.prompt_ids for g in out], [g.token_ids for g in out], engine.policy.tokenizer.pad_token_id, model.device
    )
    with torch.no_grad():
        trainer = completion_logprobs(model, packed, sampling.temperature)
    for row, g in enumerate(out):
        torch.testing.assert_close(trainer[row, : len(g.token_ids)], torch.tensor(g.logprobs), atol=1e-4, rtol=1e-4)


def test_greedy_and_tiny_top_p_pick_the_argmax(tiny_policy_dir):
    engine = _engine(tiny_policy_dir)
    greedy = engine.generate(["5+3="], 1, SamplingConfig(temperature=0, max_new_tokens=4), seed=0)[0][0]
    nucleus = engine.generate(["5+3="], 3, SamplingConfig(temperature=1.0, top_p=1e-6, max_new_tokens=4), seed=5)[0]
    assert all(g.token_ids == greedy.token_ids for g in nucleus)


def test_load_weights_in_place(tiny_policy_dir):
    engine = _engine(tiny_policy_dir)
    state = {k: torch.zeros_like(v) for k, v in engine.policy.model.state_dict().items()}
    engine.load_weights(state)
    assert all(float(v.abs().sum()) == 0.0 for v in engine.policy.model.state_dict().values())
    engine.load_weights(tiny_policy_dir)
    restored = load_policy(tiny_policy_dir, "cpu").model.state_dict()
    for name, tensor in engine.policy.model.state_dict().items():
        torch.testing.assert_close(tensor, restored[name])


def test_stop_at_newline_keeps_the_first_line_and_generates_no_further(tiny_policy_dir):
    # one batch of all 16 rows: a batch that stops early draws fewer tokens from the shared generator,
    # so with several batches the next one's draws would shift (stopping is per batch, not per row)
    engine = HFEngine(load_policy(tiny_policy_dir, "cpu"), batch_size=16)
    tok = engine.policy.tokenizer
    newline, minus = tok.convert_tokens_to_ids("\n"), tok.convert_tokens_to_ids("-")
    assert engine.newline_ids() == [newline]  # the char tokenizer's one line-break token
    with torch.no_grad():  # a policy that writes line breaks: "\n" scores as "-" does (a frequent token)
        engine.model.get_output_embeddings().weight[newline] = engine.model.get_output_embeddings().weight[minus]
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=12)
    prompts = ["1+2=", "9-3=", "4+4=", "7*8="]
    full = [g for group in engine.generate(prompts, 4, sampling, seed=0) for g in group]
    lines = [g for group in engine.generate(prompts, 4, sampling, seed=0, stop_at_newline=True) for g in group]
    assert any(newline in g.token_ids[:-1] for g in full)  # some completions go on past a line break
    for whole, line in zip(full, lines):  # the same seed draws the same tokens up to the break
        if newline in whole.token_ids:
            cut = whole.token_ids.index(newline) + 1
            assert (line.token_ids, line.finished) == (whole.token_ids[:cut], True)
        else:
            assert line.token_ids == whole.token_ids
        assert line.text.splitlines()[:1] == whole.text.splitlines()[:1]
