import torch

from coevo.coevolvers import build_coevolver
from coevo.engines.hf import HFEngine
from coevo.objectives import build_objective
from coevo.policy.checkpoint import load_policy
from coevo.policy.update import build_optimizer, build_training_set, policy_update
from coevo.prepare import prepare_problems
from coevo.rollout import run_rollouts
from coevo.verify import verify_rollouts
from schemas.rewards import validate_rewards
from schemas.rollouts import validate_rollouts


def _iteration_tables(cfg, policy):
    train, _ = prepare_problems(cfg)
    batch = train.iloc[: cfg.rollout.problems_per_iter]
    variants = build_coevolver(cfg.coevolver, cfg.seed).plan(batch, cfg.rollout.group_size)
    rollouts = validate_rollouts(run_rollouts(HFEngine(policy), variants, batch, cfg, 1, "v0"), "test")
    return rollouts, validate_rewards(verify_rollouts(rollouts, batch), "test")


def _snapshot(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_update_changes_parameters_on_informative_groups(tiny_cfg, tiny_policy_dir):
    policy = load_policy(tiny_policy_dir, "cpu")
    rollouts, rewards = _iteration_tables(tiny_cfg, policy)
    rewards["reward"] = [float(i % 2) for i in range(len(rewards))]  # every group has both outcomes
    before = _snapshot(policy.model)
    stats = policy_update(policy, build_optimizer(policy.model, tiny_cfg), build_objective(tiny_cfg.objective), rollouts, rewards, tiny_cfg, seed=0)
    assert stats["policy/groups_kept"] == tiny_cfg.rollout.problems_per_iter
    assert stats["policy/steps"] == 2  # 16 sequences / minibatch 8, one epoch
    assert any(not torch.equal(before[k], v) for k, v in policy.model.state_dict().items())


def test_zero_variance_groups_are_dropped_and_nothing_moves(tiny_cfg, tiny_policy_dir):
    policy = load_policy(tiny_policy_dir, "cpu")
    rollouts, rewards = _iteration_tables(tiny_cfg, policy)
    rewards["reward"] = 1.0
    before = _snapshot(policy.model)
    stats = policy_update(policy, build_optimizer(policy.model, tiny_cfg), build_objective(tiny_cfg.objective), rollouts, rewards, tiny_cfg, seed=0)
    assert stats["policy/groups_kept"] == 0 and stats["policy/steps"] == 0
    assert all(torch.equal(before[k], v) for k, v in policy.model.state_dict().items())


def test_strip_trains_the_bare_question_keep_trains_the_sampled_prompt(tmp_path, tiny_policy_dir):
    from ..conftest import tiny_config

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
