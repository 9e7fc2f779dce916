"""Procedural memory (PMD): three levels of experience for a self-teacher.

Method. The memory is extracted online from the policy's own verified trajectories at three levels
of abstraction, and a memory-conditioned self-teacher supervises the memory-free student (objective
"opsd" with `teacher.sources: [coevolver]`, see self_distill.py):
- level 1, raw trajectories: this iteration's verified (passed) completions as worked examples
  `question + answer`, hardest problems first (the skill bank's worked-example writer);
- level 2, reflected strategies and lessons: per family, the reflector reads a few passed and failed
  attempts of this iteration and writes one lesson line (families whose outcomes are most mixed first);
- level 3, behavioural patterns across problems: every `patterns_every` iterations the reflector
  reads the admitted lessons of every family and the families' failure rates and writes one pattern
  that applies to every problem.
The reflector is the policy itself (greedy continuation of the reflection prompt by the checkpoint
that produced the rollouts) or any OpenAI-compatible chat endpoint (`coevolver.writer`).

Admission, scoring and retirement are the skill bank's (this class is a SkillBank): every entry goes
on trial, is probed in matched halves of its problems' rollout groups, and is admitted, promoted or
retired by its measured utility. What differs:
- the student is memory-free: the base half and solo groups carry no memory (`rollout_context` is
  empty); only the probe half of a matched group sees one entry, the one under trial;
- the teacher (and the held-out evaluation "with memory") sees up to `memory.top_k` admitted entries
  of each level, most similar first; a level-1 entry of the very question counts (it is the policy's
  own past verified solution, the cross-episode signal PMD distils), although probes never measure an
  entry on its own question (that would inflate its gap);
- level-3 patterns have no family and apply to every problem.

Departures: PMD's reflection is by the model being trained with a fixed prompt; with the tiny default
policy (a character model trained on arithmetic only) levels 2 and 3 written by the policy are mostly
noise and are rejected at admission, so on the built-in problems the memory that survives is level 1.
Point `memory.reflector: openai` at a capable model for levels 2 and 3 to carry strategies.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import pandas as pd

from coevo.coevolvers.base import TextGenerator, register_coevolver
from coevo.coevolvers.skill_bank import Skill, SkillBank, _examples
from coevo.coevolvers.writers import ChatEndpoint, SkillDraft, WorkedExampleWriter, worked_texts
from coevo.config import CoevolverConfig

REFLECTOR_SYSTEM = (
    "You reflect on a student model's attempts and write one short, reusable lesson or pattern. "
    "Reply with exactly one line of at most 200 characters and nothing else."
)
SHOWN = 4  # attempts of each outcome shown per lesson prompt


class Reflector(Protocol):
    kind: str

    def reflect(self, prompts: list[str]) -> list[str]:
        """One line per prompt ("" when nothing usable came back)."""
        ...


class PolicyReflector:
    """The policy itself: greedy continuation of each prompt, first line, at most `max_chars`."""

    kind = "policy"

    def __init__(self, generate: TextGenerator | None, max_chars: int):
        self.generate = generate
        self.max_chars = max_chars

    def reflect(self, prompts: list[str]) -> list[str]:
        if self.generate is None:
            raise ValueError(
                "memory.reflector='policy' needs the policy's text generator (the co-evolution stage passes it)"
            )
        texts = self.generate(prompts, self.max_chars) if prompts else []
        return [(text.strip().splitlines() or [""])[0].strip()[: self.max_chars] for text in texts]


class EndpointReflector:
    """An OpenAI-compatible chat endpoint (coevolver.writer.base_url / model)."""

    kind = "openai"

    def __init__(self, endpoint: ChatEndpoint):
        self.endpoint = endpoint

    def reflect(self, prompts: list[str]) -> list[str]:
        return [self.endpoint.ask(REFLECTOR_SYSTEM, prompt) for prompt in prompts]


def build_reflector(cfg: CoevolverConfig, generate: TextGenerator | None) -> Reflector:
    if cfg.memory.reflector == "openai":
        return EndpointReflector(ChatEndpoint.from_config(cfg.writer, "coevolver.memory.reflector='openai'"))
    return PolicyReflector(generate, cfg.memory.max_chars)


@register_coevolver("memory")
class ProceduralMemory(SkillBank):
    kind: str

    def __init__(self, cfg: CoevolverConfig, seed: int, generate: TextGenerator | None = None):
        super().__init__(cfg, seed, generate, writer=WorkedExampleWriter())
        self.memory = cfg.memory
        self.reflector = build_reflector(cfg, generate)

    # ---- what an entry applies to, and who sees it ----
    def applies(self, skill: Skill, problem: Mapping) -> bool:
        """Patterns (level 3, no family) apply to every problem; other entries to their family."""
        return skill.family == "" or super().applies(skill, problem)

    def rollout_context(self, problem: Mapping) -> list[Skill]:
        return []  # the student runs memory-free

    def teacher_context(self, problem: Mapping) -> list[str]:
        """Up to `top_k` admitted entries of each written level, most similar first, level by level."""
        retrieved = self.retrieve(problem, len(self.skills), own_key=True)
        return [
            s.text
            for level in sorted(self.memory.levels)
            for s in [s for s in retrieved if s.level == level][: self.memory.top_k]
        ]

    def context_for(self, problem: Mapping) -> list[str]:
        return self.teacher_context(problem)

    # ---- writing entries ----
    def _write_candidates(self, iteration: int, frame: pd.DataFrame) -> list[str]:
        room = self.params.max_trials - self.counts()["trial"]
        if room <= 0 or frame.empty:
            return []
        drafts: list[SkillDraft] = []
        if 1 in self.memory.levels:
            drafts += self.writer.write(_examples(frame), min(self.cfg.writer.candidates_per_iter, room))
        if 2 in self.memory.levels:
            drafts += self._lessons(frame)
        if 3 in self.memory.levels and iteration % self.memory.patterns_every == 0:
            drafts += self._patterns(frame)
        added = (self.add(d, iteration) for d in drafts[:room] if d.text)
        return [sid for sid in added if sid is not None]

    def _lessons(self, frame: pd.DataFrame) -> list[SkillDraft]:
        """Level 2: one lesson per family, most mixed outcomes first (pass rate nearest one half)."""
        families = frame.assign(family=frame["family"].fillna("")).groupby("family")["passed"].mean()
        order = sorted(families.index, key=lambda f: (abs(families[f] - 0.5), f))[: self.memory.lessons_per_iter]
        prompts, keys = [], []
        for family in order:
            rows = frame[frame["family"].fillna("") == family].sort_values("rollout_id")
            passed = rows[rows["passed"].astype(bool)].head(SHOWN)
            failed = rows[~rows["passed"].astype(bool)].head(SHOWN)
            attempts = [f"{q}{text.strip()} right" for q, text in zip(passed["question"], worked_texts(passed))]
            attempts += [f"{q}{text.strip()} wrong" for q, text in zip(failed["question"], worked_texts(failed))]
            prompts.append("\n".join(attempts) + f"\nLesson for {family}:")
            keys.append(str(rows["question"].iloc[0]))
        texts = self.reflector.reflect(prompts)
        source = f"reflector:{self.reflector.kind}"
        return [SkillDraft(text=t, family=f, key=k, source=source, level=2) for t, f, k in zip(texts, order, keys)]

    def _patterns(self, frame: pd.DataFrame) -> list[SkillDraft]:
        """Level 3: one cross-problem pattern from the admitted lessons and each family's failure rate."""
        lessons = [s.text for s in self._with_status("active", "stable") if s.level == 2]
        failure = 1.0 - frame.assign(family=frame["family"].fillna("")).groupby("family")["passed"].mean()
        lines = [f"{family} fails {rate:.0%}" for family, rate in failure.items()] + lessons[:SHOWN]
        [text] = self.reflector.reflect(["\n".join(lines) + "\nPattern:"])
        return [SkillDraft(text=text, family="", key="", source=f"reflector:{self.reflector.kind}", level=3)]
