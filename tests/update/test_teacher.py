"""The self-teacher: privileged context only in the teacher's prompts, no gradient through its pass,
and a real self-distillation update of the tiny policy."""

import pandas as pd
import pytest
import torch

from coevo.coevolvers import NoCoEvolver, ProceduralMemory, SkillDraft
from coevo.config import CoevolverConfig
from coevo.model.checkpoint import load_policy
from coevo.update.logprobs import completion_distributions, pack, sampled_logprobs
from coevo.update.objectives import build_objective
from coevo.update.prefix import teacher_pass
from coevo.update.stage import build_optimizer, build_training_set, policy_update
from coevo.update.teacher import teacher_context
from tests.conftest import tiny_config
from tests.update.test_update import _iteration_tables, _snapshot


@pytest.fixture
def tables(tiny_cfg, tiny_policy_dir):
    policy = load_policy(tiny_policy_dir, "cpu")
    rollouts, rewards = _iteration_tables(tiny_cfg, policy)
    rewards["passed"] = [i % 2 == 0 for i in range(len(rewards))]
    rewards["reward"] = rewards["passed"].astype(float)
    answers = pd.Series({pid: "42" for pid in rollouts["problem_id"]})
    return policy, rollouts, rewards, answers


def test_teacher_prompts_carry_the_privileged_context_student_prompts_never(tiny_cfg, tables):
    policy, rollouts, rewards, answers = tables
    memory = ProceduralMemory(CoevolverConfig(kind="memory"), seed=0)
    question = rollouts["question"].iloc[0]
    family = rollouts["family"].iloc[0]
    sid = memory.add(SkillDraft(text="9+9=18", family=family, key=question, source="test"), iteration=0)
    memory.skills[sid].status = "active"
    teacher = teacher_context(["answer", "feedback", "coevolver"], memory)
    data, _ = build_training_set(
        policy, rollouts, rewards, tiny_cfg, keep_all_groups=True, teacher=teacher, answers=answers
    )
    students = policy.tokenizer.batch_decode(data.prompts, skip_special_tokens=True)
    teachers = policy.tokenizer.batch_decode(data.teacher_prompts, skip_special_tokens=True)
    assert len(students) == len(teachers) == len(rollouts)
    for student, teach in zip(students, teachers):
        assert "42" not in student and "->" not in student and "9+9=18" not in student
        lines = teach.split("\n")
        assert lines[0] == student + "42"  # the reference answer as a worked example
        assert "->" in lines[1] and ("correct" in lines[1] or "wrong" in lines[1])  # verifier feedback
        assert lines[-1] == student  # the bare question last
    first = [t for s, t in zip(students, teachers) if s == question]
    assert first and all("9+9=18" in t for t in first)  # the memory entry reaches its own family's teacher


def test_teacher_pass_carries_no_gradient(tiny_cfg, tiny_policy_dir):
    policy = load_policy(tiny_policy_dir, "cpu")
    prompts, completions = policy.tokenizer(["1+1=", "2+3="])["input_ids"], [[5, 6], [7]]
    distributions = teacher_pass(
        policy.model, prompts, completions, policy.tokenizer.pad_token_id, tiny_cfg.sampling.temperature, share=True
    )
    logprobs = sampled_logprobs(
        distributions, pack(prompts, completions, policy.tokenizer.pad_token_id, policy.model.device)
    )
    assert torch.is_grad_enabled()
    assert not distributions.requires_grad and distributions.grad_fn is None
    assert not logprobs.requires_grad and logprobs.grad_fn is None
    student = completion_distributions(
        policy.model, pack(prompts, completions, policy.tokenizer.pad_token_id, policy.model.device)
    )
    assert student.requires_grad  # the same call with grad builds a graph: the no_grad is the teacher's
    torch.testing.assert_close(student.detach(), distributions)  # same model, same prompt, same numbers


@pytest.mark.parametrize("name", ["opsd", "sdar", "rlsd"])
def test_self_distillation_update_moves_the_policy(tmp_path, tables, name):
    policy, rollouts, rewards, answers = tables
    cfg = tiny_config(tmp_path, objective={"name": name, "grpo_weight": 0.0, "teacher": {"sources": ["answer"]}})
    rewards["reward"] = 1.0  # zero-variance groups: GRPO has nothing, the teacher still has something
    before = _snapshot(policy.model)
    objective = build_objective(cfg.objective)
    stats = policy_update(
        policy,
        build_optimizer(policy.model, cfg),
        objective,
        rollouts,
        rewards,
        cfg,
        0,
        teacher=teacher_context(["answer"], None),
        answers=answers,
    )
    assert stats["policy/groups_kept"] == cfg.rollout.problems_per_iter  # zero-variance groups kept
    assert stats["policy/teacher_gap"] != 0.0
    moved = any(not torch.equal(before[k], v) for k, v in policy.model.state_dict().items())
    assert moved == (name != "rlsd")  # rlsd only reshapes GRPO's advantage, which is 0 here


def test_no_privileged_context_means_no_divergence(tmp_path, tables):
    policy, rollouts, rewards, _ = tables
    cfg = tiny_config(tmp_path, objective={"name": "opsd", "grpo_weight": 0.0})
    teacher = teacher_context(["coevolver"], NoCoEvolver(CoevolverConfig(kind="none"), 0))
    stats = policy_update(
        policy,
        build_optimizer(policy.model, cfg),
        build_objective(cfg.objective),
        rollouts,
        rewards,
        cfg,
        0,
        teacher=teacher,
    )
    assert stats["policy/distill_divergence"] == pytest.approx(0.0, abs=1e-6)


def test_a_teacher_objective_without_teacher_context_is_an_error(tmp_path, tables):
    policy, rollouts, rewards, _ = tables
    cfg = tiny_config(tmp_path, objective={"name": "opsd"})
    with pytest.raises(ValueError, match="needs a teacher context"):
        policy_update(
            policy, build_optimizer(policy.model, cfg), build_objective(cfg.objective), rollouts, rewards, cfg, 0
        )


def test_under_chat_the_teacher_prompts_are_templated_like_the_students(tmp_path, tiny_policy_dir):
    """prompt.format: chat: the update re-renders each teacher prompt with the chat renderer, the
    privileged lines inside the user turn under the context header (never before the template), one BOS;
    the student's stripped prompt is the same template around the bare question."""
    from tests.test_prompting import templated_copy

    checkpoint = templated_copy(tiny_policy_dir, tmp_path / "chat-ckpt")
    chat = {"format": "chat", "system": "Be brief.", "context_header": "Hints:", "instruction": {"math": None}}
    cfg = tiny_config(tmp_path, prompt=chat, policy={"checkpoint": str(checkpoint)})
    policy = load_policy(checkpoint, "cpu")
    rollouts, rewards = _iteration_tables(cfg, policy)
    answers = pd.Series({pid: "42" for pid in rollouts["problem_id"]})
    data, _ = build_training_set(
        policy, rollouts, rewards, cfg, keep_all_groups=True, teacher=teacher_context(["answer"], None), answers=answers
    )
    ids = lambda text: policy.tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731  (the template writes BOS)
    student_of = {tuple(ids(f"<bos><system>Be brief.\n<user>{q}\n<assistant>")): q for q in rollouts["question"]}
    assert len(data.prompts) == len(data.teacher_prompts) == len(rollouts)
    for student, teacher in zip(data.prompts, data.teacher_prompts):
        question = student_of[tuple(student)]  # KeyError: the student was not templated as the engine templates it
        assert teacher == ids(f"<bos><system>Be brief.\n<user>Hints:\n{question}42\n\n{question}\n<assistant>"), (
            policy.tokenizer.decode(teacher)
        )
        assert teacher.count(policy.tokenizer.bos_token_id) == 1
