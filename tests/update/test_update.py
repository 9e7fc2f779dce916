import torch

from coevo.coevolvers import build_coevolver
from coevo.model.checkpoint import load_policy
from coevo.prepare import prepare_problems
from coevo.rollout.engines.hf import HFEngine
from coevo.rollout.stage import run_rollouts
from coevo.update.objectives import build_objective
from coevo.update.stage import build_optimizer, build_training_set, frozen_logprobs, old_logprobs, policy_update
from coevo.verification.stage import verify_rollouts
from schemas.rewards import validate_rewards
from schemas.rollouts import validate_rollouts


def _iteration_tables(cfg, policy):
    train, _ = prepare_problems(cfg)
    batch = train.iloc[: cfg.rollout.problems_per_iter]
    variants = build_coevolver(cfg.coevolver_list[0], cfg.seed).plan(batch, cfg.rollout.group_size)
    rollouts = validate_rollouts(run_rollouts(HFEngine(policy), variants, batch, cfg, 1, "v0"), "test")
    return rollouts, validate_rewards(verify_rollouts(rollouts, batch), "test")


def _snapshot(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_update_changes_parameters_on_informative_groups(tiny_cfg, tiny_policy_dir):
    policy = load_policy(tiny_policy_dir, "cpu")
    rollouts, rewards = _iteration_tables(tiny_cfg, policy)
    rewards["reward"] = [float(i % 2) for i in range(len(rewards))]  # every group has both outcomes
    before = _snapshot(policy.model)
    stats = policy_update(
        policy,
        build_optimizer(policy.model, tiny_cfg),
        build_objective(tiny_cfg.objective),
        rollouts,
        rewards,
        tiny_cfg,
        seed=0,
    )
    assert stats["policy/groups_kept"] == tiny_cfg.rollout.problems_per_iter
    assert stats["policy/steps"] == 2  # 16 sequences / minibatch 8, one epoch
    assert any(not torch.equal(before[k], v) for k, v in policy.model.state_dict().items())


def test_zero_variance_groups_are_dropped_and_nothing_moves(tiny_cfg, tiny_policy_dir):
    policy = load_policy(tiny_policy_dir, "cpu")
    rollouts, rewards = _iteration_tables(tiny_cfg, policy)
    rewards["reward"] = 1.0
    before = _snapshot(policy.model)
    stats = policy_update(
        policy,
        build_optimizer(policy.model, tiny_cfg),
        build_objective(tiny_cfg.objective),
        rollouts,
        rewards,
        tiny_cfg,
        seed=0,
    )
    assert stats["policy/groups_kept"] == 0 and stats["policy/steps"] == 0
    assert all(torch.equal(before[k], v) for k, v in policy.model.state_dict().items())


def test_strip_trains_the_bare_question_keep_trains_the_sampled_prompt(tmp_path, tiny_policy_dir):
    from tests.conftest import tiny_config

    policy = load_policy(tiny_policy_dir, "cpu")
    cfg = tiny_config(tmp_path)
    rollouts, rewards = _iteration_tables(cfg, policy)
    rollouts["prompt"] = "1+1=2\n" + rollouts["question"]  # as if a skill had been retrieved
    rollouts["prompt_ids"] = policy.tokenizer(list(rollouts["prompt"]))["input_ids"]
    rewards["reward"] = [float(i % 2) for i in range(len(rewards))]
    stripped, _ = build_training_set(policy, rollouts, rewards, cfg)
    kept, _ = build_training_set(policy, rollouts, rewards, tiny_config(tmp_path, coevolver={"update_context": "keep"}))
    by_problem = rollouts.sort_values("problem_id", kind="stable")
    assert stripped.prompts == policy.tokenizer(list(by_problem["question"]))["input_ids"]
    assert kept.prompts == [list(ids) for ids in by_problem["prompt_ids"]]


def test_advantages_follow_groups(tiny_cfg, tiny_policy_dir):
    policy = load_policy(tiny_policy_dir, "cpu")
    rollouts, rewards = _iteration_tables(tiny_cfg, policy)
    # group of 4: rewards [1, 0, 0, 0] -> mean .25, unbiased std .5 -> advantages [1.5, -.5, -.5, -.5]
    rewards["reward"] = [1.0 if i % 4 == 0 else 0.0 for i in range(len(rewards))]
    data, _ = build_training_set(policy, rollouts, rewards, tiny_cfg)
    expected = torch.tensor([1.5, -0.5, -0.5, -0.5] * tiny_cfg.rollout.problems_per_iter)
    torch.testing.assert_close(data.advantages, expected, atol=1e-5, rtol=0)


def _with_context_and_a_silent_group(policy, cfg):
    """Rollouts whose first group was sampled with a skill line in front, and rewards with a signal
    in every group but the last (all zero: dropped from training, still measured for mismatch)."""
    rollouts, rewards = _iteration_tables(cfg, policy)
    first = rollouts["problem_id"] == rollouts["problem_id"].iloc[0]
    rollouts.loc[first, "prompt"] = "1+1=2\n" + rollouts.loc[first, "question"]
    rollouts["prompt_ids"] = policy.tokenizer(list(rollouts["prompt"]))["input_ids"]
    rewards["reward"] = [float(i % 2) for i in range(len(rewards))]
    rewards.loc[rollouts["problem_id"] == rollouts["problem_id"].iloc[-1], "reward"] = 0.0
    return rollouts, rewards


def test_pi_old_is_the_sampling_logprobs_when_the_engine_is_the_trainer(tiny_cfg, tiny_policy_dir):
    """HF engine: rows trained as sampled take pi_old from the rollouts (which agree with a trainer
    pass to float precision); stripped rows are scored on their bare question; no mismatch is reported."""
    policy = load_policy(tiny_policy_dir, "cpu")
    rollouts, rewards = _with_context_and_a_silent_group(policy, tiny_cfg)
    data, _ = build_training_set(policy, rollouts, rewards, tiny_cfg)
    pad = policy.tokenizer.pad_token_id
    old, mismatch = old_logprobs(policy.model, data, rollouts, tiny_cfg, pad, engine_is_trainer=True)
    recomputed = frozen_logprobs(policy.model, data.prompts, data.completions, tiny_cfg, pad)
    assert mismatch == {} and data.as_sampled.count(False) == tiny_cfg.rollout.group_size
    for same, ours, sampled, scored in zip(data.as_sampled, old, data.sampling_logprobs, recomputed):
        if same:
            assert ours.tolist() == sampled
            torch.testing.assert_close(ours, scored, atol=1e-5, rtol=0)
        else:  # scored in another batch (other padding): equal to float precision
            torch.testing.assert_close(ours, scored, atol=1e-6, rtol=0)


def test_with_a_separate_engine_one_pass_gives_pi_old_and_the_mismatch(tiny_cfg, tiny_policy_dir):
    policy = load_policy(tiny_policy_dir, "cpu")
    rollouts, rewards = _with_context_and_a_silent_group(policy, tiny_cfg)
    data, _ = build_training_set(policy, rollouts, rewards, tiny_cfg)
    pad = policy.tokenizer.pad_token_id
    old, mismatch = old_logprobs(policy.model, data, rollouts, tiny_cfg, pad, engine_is_trainer=False)
    for ours, scored in zip(old, frozen_logprobs(policy.model, data.prompts, data.completions, tiny_cfg, pad)):
        torch.testing.assert_close(ours, scored, atol=1e-6, rtol=0)
    bare = rollouts[rollouts["prompt"] == rollouts["question"]]  # the silent group included
    assert len(bare) == len(rollouts) - tiny_cfg.rollout.group_size
    assert mismatch["policy/mismatch_tokens"] == bare["completion_ids"].map(len).sum()
    assert mismatch["policy/mismatch_abs_logprob"] < 1e-5  # the HF engine sampled them
