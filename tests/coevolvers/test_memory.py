"""Procedural memory (PMD): three levels, a memory-free student, the skill bank's admission machinery,
and the policy itself as reflector (the real tiny checkpoint)."""

from __future__ import annotations

import pytest
import torch

from coevo.coevolvers import (
    ProceduralMemory,
    SkillDraft,
    build_coevolver,
    load_coevolver,
)
from coevo.coevolvers.memory import PolicyReflector
from coevo.config import CoevolverConfig, MemoryConfig, SkillBankConfig

from .test_skill_bank import BY_ID, CALL, PROBLEMS, frames, matched, with_episodes


def memory_config(**memory: object) -> CoevolverConfig:
    return CoevolverConfig(
        kind="memory",
        skill_bank=SkillBankConfig(min_count=1, admission="threshold", retire_z=None, skip_saturated=False),
        memory=MemoryConfig(**memory),
    )


def entry(memory: ProceduralMemory, text: str, key: str, family: str = "mul", level: int = 1, status: str = "active"):
    sid = memory.add(SkillDraft(text=text, family=family, key=key, source="test", level=level), iteration=0)
    memory.skills[sid].status = status
    return memory.skills[sid]


def problem(pid: str) -> dict:
    return BY_ID.loc[pid].to_dict() | {"id": pid}


def test_student_rollouts_are_memory_free_only_the_probe_half_sees_one_entry():
    memory = ProceduralMemory(memory_config(), seed=0)
    entry(memory, "7*9=63", key="7*9=")  # admitted: never shown to rollouts
    trial = entry(memory, "12*3=36", key="12*3=", status="trial")
    variants = memory.plan(PROBLEMS, group_size=4)
    by_problem = {(v.problem_id, v.variant): v for v in variants}
    assert by_problem[("m1", "base")].texts == () and by_problem[("m1", "probe")].texts == (trial.text,)
    assert by_problem[("a1", "solo")].texts == ()  # no trial of its family: one memory-free group
    assert by_problem[("m3", "probe")].texts == (
        "7*9=63",
    )  # its own trial is never probed on it: an admitted entry is re-measured
    assert all(v.texts == () for v in variants if v.variant != "probe") and all(
        len(v.texts) == 1 for v in variants if v.variant == "probe"
    )


def test_teacher_sees_top_k_per_level_own_question_included_patterns_everywhere():
    memory = ProceduralMemory(memory_config(top_k=1), seed=0)
    own = entry(memory, "7*8=56", key="7*8=")
    entry(memory, "7*9=63", key="7*9=")  # less similar than the own question
    lesson = entry(memory, "Multiply tens and units apart.", key="12*3=", level=2)
    pattern = entry(memory, "Check the last digit.", key="", family="", level=3)
    entry(memory, "3+4=7", key="3+4=", family="add")
    assert memory.teacher_context(problem("m1")) == [own.text, lesson.text, pattern.text]
    assert memory.teacher_context(problem("a1")) == ["3+4=7", pattern.text]
    assert memory.context_for(problem("m1")) == memory.teacher_context(problem("m1"))
    assert ProceduralMemory(memory_config(levels=[3]), seed=0).teacher_context(problem("m1")) == []  # empty memory


def test_a_pattern_on_trial_is_probed_on_any_family_and_admitted_by_its_gap():
    memory = ProceduralMemory(memory_config(levels=[1, 3]), seed=0)
    pattern = entry(memory, "Check the last digit.", key="", family="", level=3, status="trial")
    probes = {v.problem_id: v.probe_skill for v in memory.plan(PROBLEMS, group_size=4) if v.variant == "probe"}
    assert set(probes) == {"m1", "m2", "m3", "a1"} and set(probes.values()) == {pattern.id}
    report = memory.update(1, PROBLEMS, *frames(matched("a1", pattern.id, [0, 0], [1, 1])))
    assert [a["id"] for a in report["admitted"]] == [pattern.id] and memory.skills[pattern.id].status == "active"


REFLECTIONS = {
    "add": "Count on.\nmore",
    "mul": "Add tens.\nmore",
    "": "Check digits, then carry",
}  # what the policy learns to write


def reflector_policy(tiny_policy_dir, out_dir, prompts: dict[str, str]):
    """The tiny checkpoint taught to continue each reflection prompt with its REFLECTIONS line (masked
    NLL on the reflection and <eos> only): a real policy that reflects, served by the real engine."""
    from coevo.model.checkpoint import load_policy, save_checkpoint
    from coevo.model.supervised import supervised_steps

    policy = load_policy(tiny_policy_dir, device="cpu")
    tok = policy.tokenizer
    sequences, masks = [], []
    for family, prompt in prompts.items():
        head, tail = (
            tok(prompt)["input_ids"],
            tok(REFLECTIONS[family], add_special_tokens=False)["input_ids"] + [tok.eos_token_id],
        )
        sequences.append(head + tail)
        masks.append([0.0] * len(head) + [1.0] * len(tail))
    torch.manual_seed(0)
    supervised_steps(policy.model, lambda: (sequences, masks), tok.pad_token_id, lr=1e-2, steps=150, warmup=5)
    save_checkpoint(out_dir, policy, {"iteration": 0, "source": "test-reflector"})
    return out_dir


def test_policy_reflector_writes_levels_two_and_three(tiny_cfg, tiny_policy_dir, tmp_path):
    from coevo.coevolvers.policy import policy_generator

    cfg = memory_config(patterns_every=2, lessons_per_iter=2, max_chars=12)
    groups = [("m1", "solo", "", [1, 0, 0, 0]), ("a1", "solo", "", [1, 1, 0, 0])]
    asked: dict[str, str] = {}  # the memory's own reflection prompts, keyed by the family they ask about

    def record(batch: list[str], max_new_tokens: int) -> list[str]:
        asked.update({p.rsplit("Lesson for ", 1)[1].rstrip(":") if "Lesson for " in p else "": p for p in batch})
        return [""] * len(batch)

    ProceduralMemory(cfg, seed=0, generate=record).update(2, PROBLEMS, *frames(groups, iteration=2))
    assert set(asked) == {"add", "mul", ""}
    checkpoint = reflector_policy(tiny_policy_dir, tmp_path / "reflector", asked)

    policy = policy_generator(tiny_cfg, checkpoint, 2)
    prompts: list[str] = []

    def generate(batch: list[str], max_new_tokens: int) -> list[str]:
        prompts.extend(batch)
        return policy(batch, max_new_tokens)

    memory = ProceduralMemory(cfg, seed=0, generate=generate)
    report = memory.update(2, PROBLEMS, *frames(groups, iteration=2))
    written = [memory.skills[sid] for sid in report["new_candidates"]]
    assert {(s.level, s.family, s.key, s.text) for s in written if s.source == "worked_example"} == {
        (1, "mul", "7*8=", "7*8=56"),
        (1, "add", "3+4=", "3+4=7"),
    }
    reflected = {(s.level, s.family, s.key, s.text) for s in written if s.source == "reflector:policy"}
    # first line only, cut to max_chars=12; a lesson keys on its family's question, a pattern on nothing
    assert reflected == {(2, "add", "3+4=", "Count on."), (2, "mul", "7*8=", "Add tens."), (3, "", "", "Check digits")}
    assert all(s.status == "trial" and s.created_iter == 2 for s in written)
    assert sorted(prompts) == sorted(asked.values())
    prompts.clear()
    memory.update(3, PROBLEMS, *frames(groups, iteration=3))  # no pattern on odd iterations
    assert len(prompts) == 2 and not any(p.endswith("Pattern:") for p in prompts)


def test_reflector_prompts_show_attempts_and_outcomes():
    prompts: list[str] = []

    def record(batch: list[str], max_new_tokens: int) -> list[str]:
        prompts.extend(batch)
        return [f"lesson {i}\nsecond line" for i in range(len(batch))]

    memory = ProceduralMemory(memory_config(levels=[2], lessons_per_iter=1), seed=0, generate=record)
    report = memory.update(1, PROBLEMS, *frames([("m1", "solo", "", [1, 0])]))
    assert prompts == ["7*8=56 right\n7*8=0 wrong\nLesson for mul:"]
    [sid] = report["new_candidates"]
    assert memory.skills[sid].text == "lesson 0" and memory.skills[sid].level == 2


def test_reflector_prompts_show_each_episodes_turns():
    """A lesson is written from whole episodes: the calls each attempt made, their results, its answer."""
    prompts: list[str] = []

    def record(batch: list[str], max_new_tokens: int) -> list[str]:
        prompts.extend(batch)
        return ["lesson"] * len(batch)

    memory = ProceduralMemory(memory_config(levels=[2], lessons_per_iter=1), seed=0, generate=record)
    rollouts, rewards = frames([("m1", "solo", "", [1, 0])])
    memory.update(1, PROBLEMS, with_episodes(rollouts), rewards)
    assert prompts == [f"7*8={CALL} [tool: 56] 56 right\n7*8={CALL} [tool: 56] 0 wrong\nLesson for mul:"]


def test_policy_reflector_without_a_policy_is_an_error():
    with pytest.raises(ValueError, match="text generator"):
        PolicyReflector(None, 10).reflect(["x"])


def test_openai_reflector_needs_an_endpoint():
    with pytest.raises(ValueError, match="coevolver.memory.reflector='openai' needs coevolver.writer.base_url"):
        ProceduralMemory(CoevolverConfig(kind="memory", memory=MemoryConfig(reflector="openai")), seed=0)


def test_save_load_round_trip_keeps_levels_and_kind(tmp_path):
    memory = build_coevolver(memory_config(), seed=0)
    entry(memory, "Check the last digit.", key="", family="", level=3)
    entry(memory, "7*8=56", key="7*8=")
    digest = memory.save(tmp_path / "memory")
    loaded = load_coevolver(tmp_path / "memory", memory_config(), seed=0)
    assert isinstance(loaded, ProceduralMemory) and loaded == memory
    assert loaded.save(tmp_path / "again") == digest
    with pytest.raises(ValueError, match="holds a 'memory' co-evolver but coevolver.kind is 'skill_bank'"):
        load_coevolver(tmp_path / "memory", CoevolverConfig(), seed=0)


def test_frozen_after_counts_iterations():
    assert not CoevolverConfig(frozen=False).frozen_at(5)
    assert CoevolverConfig(frozen=True).frozen_at(1)
    late = CoevolverConfig(frozen=True, frozen_after=2)
    assert [late.frozen_at(it) for it in (1, 2, 3)] == [False, False, True]
