"""Skill writers: turn verified trajectories into candidate skills for the skill bank.

Method: the "skill generator" of pre-storage skill validation (001 line 10) and the experience
synthesiser of EDGE (001 line 43). The bank hands a writer this iteration's verified (passed)
trajectories; the writer returns candidate skills (`SkillDraft`), which the bank then puts on trial.

Writers, chosen by `coevolver.writer.kind` from a registry:
- "worked_example": the policy is its own writer. A verified trajectory becomes a worked example
  `question + completion` (e.g. "7*8=" + "56" -> "7*8=56"), the layout the tiny policy's warm start
  teaches it to read.
- "openai": an OpenAI-compatible chat endpoint (a vLLM server, a hosted model) reads one family's
  verified trajectories and writes one short reusable skill per request.

A trajectory is what the policy did, not only what it answered: for a multi-turn episode (tools or an
environment) the writer reads every turn in order on one line (`worked_text`), each tool call as the
policy wrote it and each tool turn as `[tool: result]`, e.g. `<tool_call>{"name": "multiply",
"arguments": {"a": 345, "b": 27}}</tool_call> [tool: 9315] 9315` after the question `What is 345*27?`:
a skill can then show which call solves which problem, the procedure the answer alone hides.

Departures from the papers:
1. The policy is not trained as a skill generator (001 line 10 rewards the generator with the
   measured gap); the worked-example writer copies verified trajectories instead.
2. EDGE synthesises entries from recurring failures; a failure carries no verified answer, so both
   writers read successes, hard-won ones first (the problems with the lowest pass rate this
   iteration, i.e. the policy's frontier).
3. The OpenAI writer makes one request per family (hardest families first, at most n requests, at
   most `MAX_EXAMPLES` trajectories each), so one call to `write` yields at most one skill per family.
   A reply longer than `MAX_SKILL_CHARS` is cut to that length. No temperature or token limit is sent
   (reasoning models reject both); the prompt asks for one line and only the first line is kept.
4. A reply that is not a chat completion with text (not JSON, another JSON shape, empty content) is
   retried like a transient error, then fails as EndpointError naming the URL: an endpoint that
   answers garbage never yields a silently empty co-evolver update.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from itertools import groupby
from statistics import fmean
from typing import Protocol

import pandas as pd
from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from coevo.config import WriterConfig
from coevo.registry import Registry

MAX_SKILL_CHARS = 200  # longest skill the OpenAI writer keeps (characters, one line)
MAX_EXAMPLES = 8  # verified trajectories shown per OpenAI request
ATTEMPTS = 3  # tries per OpenAI request (tenacity, exponential backoff)

SYSTEM_PROMPT = (
    "You write skills for a student model: short, reusable pieces of procedural knowledge. "
    "Reply with exactly one line of at most 200 characters and nothing else."
)


@dataclass(frozen=True)
class SkillDraft:
    """A candidate skill before it enters the bank: its one-line text, the family it applies to, the
    question it was induced from (its retrieval key) and the writer kind that wrote it."""

    text: str
    family: str
    key: str
    source: str
    level: int = 1  # the memory's abstraction level; skills are level 1


class SkillWriter(Protocol):
    kind: str

    def write(self, examples: list[dict], n: int) -> list[SkillDraft]:
        """At most `n` drafts from verified trajectories.

        Each example has keys question, completion, family, pass_rate (the problem's share of passed
        rollouts this iteration).
        """
        ...


def worked_text(completion: str, messages: str = "") -> str:
    """What a writer reads of one sample: its completion, or for an episode (`messages`, the rollouts
    table's JSON of the turns after the prompt) every turn in order, joined by spaces, each tool turn as
    `[tool: result]`. A turn that spans lines leaves the text spanning lines."""
    if not messages:
        return completion
    return " ".join(
        turn["content"].strip() if turn["role"] == "assistant" else f"[{turn['role']}: {turn['content'].strip()}]"
        for turn in json.loads(messages)
    )


def worked_texts(frame: pd.DataFrame) -> list[str]:
    """`worked_text` of each row of a rollouts frame (a frame without `messages` holds one-turn samples)."""
    messages = frame["messages"] if "messages" in frame else [""] * len(frame)
    return [worked_text(str(c), m) for c, m in zip(frame["completion"], messages)]


def _hardest_first(examples: list[dict]) -> list[dict]:
    """Examples ordered by problem pass rate (lowest first), then question and completion text."""
    return sorted(examples, key=lambda ex: (float(ex["pass_rate"]), str(ex["question"]), str(ex["completion"])))


class WorkedExampleWriter:
    """Verified trajectories as worked-example skills: `question + completion.strip()`. A code
    problem's question spans lines (spec, then the function header), so a skill may too; a
    completion that runs over a line is not a worked answer and is skipped."""

    kind = "worked_example"

    def write(self, examples: list[dict], n: int) -> list[SkillDraft]:
        drafts: list[SkillDraft] = []
        seen: set[str] = set()
        for ex in _hardest_first(examples):
            if len(drafts) >= n:
                break
            question, answer = str(ex["question"]), str(ex["completion"]).strip()
            text = question + answer
            if question in seen or not answer or "\n" in answer:  # a code question spans lines; its answer is one
                continue
            seen.add(question)
            drafts.append(SkillDraft(text=text, family=str(ex["family"]), key=question, source=self.kind))
        return drafts


class EndpointError(RuntimeError):
    """A co-evolver endpoint (skill writer, reflector) that still failed after its retries; names the URL."""


class GarbageReply(RuntimeError):
    """A reply that is not a chat completion with text (not JSON, wrong shape, empty): retried like a transient
    error."""


class ChatEndpoint:
    """One-line answers from an OpenAI-compatible chat endpoint, with tenacity's retries on transient errors."""

    def __init__(self, base_url: str, model: str, api_key: str, timeout_s: float, backoff_s: float = 0.5):
        self.base_url = base_url
        self.model = model
        self.backoff_s = backoff_s
        import openai  # here, not at the top: every run imports this module, few talk to an endpoint (~1.5 s)

        # max_retries=0: retries are tenacity's, so attempts and backoff are ours to state.
        self.client = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=0)

    @classmethod
    def from_config(cls, cfg: WriterConfig, who: str) -> ChatEndpoint:
        """The endpoint of coevolver.writer; `who` names the setting that asked for it in the error."""
        if not cfg.base_url or not cfg.model:
            raise ValueError(f"{who} needs coevolver.writer.base_url and coevolver.writer.model")
        api_key = os.environ.get(cfg.api_key_env) or "EMPTY"
        return cls(base_url=cfg.base_url, model=cfg.model, api_key=api_key, timeout_s=cfg.timeout_s)

    def ask(self, system: str, prompt: str, **sampling: float | int) -> str:
        """The first non-empty line of the reply, cut to MAX_SKILL_CHARS. Transient errors and garbage
        replies (not JSON, not a chat completion, no text) are retried; then EndpointError. `sampling`:
        request fields such as max_tokens and temperature (the server's defaults otherwise)."""
        return self._retried(self._text, system, prompt, sampling)

    def first_token_logprobs(self, system: str, prompt: str, top: int, **sampling: float | int) -> dict[str, float]:
        """The `top` most likely first tokens of the reply and their log-probabilities (one token is
        generated); a reply without them is garbage, retried like `ask`'s."""
        return self._retried(
            self._first_logprobs, system, prompt, {**sampling, "max_tokens": 1, "logprobs": True, "top_logprobs": top}
        )

    def _retried(self, extract, system: str, prompt: str, sampling: dict):
        import openai

        transient = (
            openai.APIConnectionError,
            openai.APITimeoutError,
            openai.RateLimitError,
            openai.InternalServerError,
        )
        messages = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
        retrying = Retrying(
            stop=stop_after_attempt(ATTEMPTS),
            wait=wait_exponential(multiplier=self.backoff_s, max=8 * self.backoff_s),
            retry=retry_if_exception_type((*transient, GarbageReply)),
            reraise=True,
        )
        try:
            return retrying(lambda: extract(self._choice(messages, sampling)))
        except (openai.OpenAIError, GarbageReply) as exc:
            tries = retrying.statistics.get("attempt_number", 1)  # transient errors are retried, others fail at once
            raise EndpointError(
                f"request to {self.base_url} (model {self.model!r}) failed after {tries} attempt(s) (transient "
                f"errors and garbage replies retried with backoff): {exc}"
            ) from exc

    def _choice(self, messages: list[dict], sampling: dict):
        try:
            reply = self.client.chat.completions.create(model=self.model, messages=messages, **sampling)
        except ValueError as exc:  # a 200 whose body is not JSON (json.JSONDecodeError)
            raise GarbageReply(f"the reply is not JSON: {exc}") from exc
        choices = getattr(
            reply, "choices", None
        )  # the client does not validate: a str, a list or any JSON object comes back as is
        if not isinstance(choices, list) or not choices:
            raise GarbageReply(f"the reply is not a chat completion with choices: {str(reply)[:200]!r}")
        return choices[0]

    @staticmethod
    def _text(choice) -> str:
        content = getattr(getattr(choice, "message", None), "content", None)
        text = _first_line(content) if isinstance(content, str) else ""
        if not text:
            raise GarbageReply(f"the reply has no text in choices[0].message.content: {str(choice)[:200]!r}")
        return text

    @staticmethod
    def _first_logprobs(choice) -> dict[str, float]:
        content = getattr(getattr(choice, "logprobs", None), "content", None)
        top = getattr(content[0], "top_logprobs", None) if isinstance(content, list) and content else None
        if not top:
            raise GarbageReply(
                f"the reply has no top_logprobs in choices[0].logprobs.content[0]: {str(choice)[:200]!r}"
            )
        return {str(t.token): float(t.logprob) for t in top}


class OpenAIChatWriter:
    """One skill per family from an OpenAI-compatible chat endpoint."""

    kind = "openai"

    def __init__(self, endpoint: ChatEndpoint):
        self.endpoint = endpoint

    @classmethod
    def from_config(cls, cfg: WriterConfig) -> OpenAIChatWriter:
        return cls(ChatEndpoint.from_config(cfg, "coevolver.writer.kind='openai'"))

    def write(self, examples: list[dict], n: int) -> list[SkillDraft]:
        by_family = [
            (family, _hardest_first(list(group))[:MAX_EXAMPLES])
            for family, group in groupby(
                sorted(examples, key=lambda ex: str(ex["family"])), key=lambda ex: str(ex["family"])
            )
        ]
        by_family.sort(key=lambda item: (fmean(float(ex["pass_rate"]) for ex in item[1]), item[0]))
        drafts: list[SkillDraft] = []
        for family, shown in by_family[: max(n, 0)]:
            text = self.endpoint.ask(SYSTEM_PROMPT, self._prompt(family, shown))  # never empty: EndpointError instead
            drafts.append(SkillDraft(text=text, family=family, key=str(shown[0]["question"]), source=self.kind))
        return drafts

    @staticmethod
    def _prompt(family: str, shown: list[dict]) -> str:
        lines = "\n".join(f"{ex['question']}{str(ex['completion']).strip()}" for ex in shown)
        return (
            f"Problem family: {family}\n"
            f"Verified solutions by the student (question then answer):\n{lines}\n"
            "Write one short reusable skill that would help the student solve more problems of this family."
        )


def _first_line(reply: str) -> str:
    """The first non-empty line of a reply, stripped and cut to MAX_SKILL_CHARS."""
    for line in reply.splitlines():
        if line.strip():
            return line.strip()[:MAX_SKILL_CHARS].strip()
    return ""


WRITERS = Registry("skill writer")
WRITERS.add(WorkedExampleWriter.kind, lambda cfg: WorkedExampleWriter())
WRITERS.add(OpenAIChatWriter.kind, OpenAIChatWriter.from_config)


def build_writer(cfg: WriterConfig) -> SkillWriter:
    """The writer registered under `cfg.kind`; unknown kinds raise ValueError."""
    return WRITERS[cfg.kind](cfg)
