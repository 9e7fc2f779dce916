"""An LLM judge: one score per (prompt, response, criterion) from an OpenAI-compatible chat endpoint.

Method: the rubric-as-reward judge of EvoRubrics (RaR, arXiv 2507.17746): a
judge model reads the prompt, a response and one criterion and grades how well the response meets it.
Each judgement is one chat request (the HTTP client, its retries with exponential backoff, its
timeout and its garbage-reply handling are `ChatEndpoint`'s, coevo/coevolvers/writers.py); a batch
of judgements runs on `workers` threads, identical items are asked once.

Scores (`scoring`, rubrics.judge_scoring):
- "reply": the judge replies with one number 0..10 (or "7/10", "Score: 7"); it is stored divided by
  10. A reply that is not such a number is a parse failure.
- "yes_no": the judge is asked whether the response meets the criterion and generates one token; the
  score is P(yes) / (P(yes) + P(no)) over its top first-token log-probabilities (tokens "yes"/"no" in
  any case and spacing), the probability-weighted judgement of G-Eval (arXiv 2303.16634) reduced to
  two labels. A small instruct model that never writes a parsable number still scores every item;
  whether the scores mean anything is what bench/judge.py measures (agreement with gold checks:
  SmolLM2-135M's is at chance, docs/benchmarks/judge.md). Neither label among the top tokens is a parse failure.
A parse failure is score None, never a reward (the rubric reward leaves it out of its weighted mean
and counts it, `verify/judge_parse_fail`). An endpoint that stays down, times out or answers garbage
after its retries raises EndpointError (the verification task's own retries apply): never a silent
reward.

Cache: every judgement (parse failures too, so a re-run reproduces the same rewards) is appended to a
JSONL file keyed by sha256 of (judge version, prompt, response, criterion), where the judge version
is the endpoint's model plus a hash of the scoring mode's prompts and sampling: a new judge model,
prompt or mode never reads old scores. Appends are whole lines under an exclusive file lock, flushed
and fsynced; a torn last line (a crash mid-write) is skipped on load and counted.

Departures: RaR asks for all criteria in one request and a Likert score; one request per criterion
keeps each score's parse failure separate (a garbled reply loses one criterion, not a whole rubric).
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from coevo.io import hash_bytes

JUDGE_SYSTEM = (
    "You are a strict grader. Read the task, the response and one criterion. "
    "Reply with a single integer from 0 (criterion not met) to 10 (fully met) and nothing else."
)
JUDGE_TEMPLATE = "Task:\n{prompt}\n\nResponse:\n{response}\n\nCriterion: {criterion}\n\nScore (0-10):"
JUDGE_SAMPLING = {"temperature": 0.0, "max_tokens": 16}  # part of the judge's version (the cache key)
YES_NO_SYSTEM = (
    "You are a strict grader. Read the task, the response and one criterion. "
    "Answer yes if the response meets the criterion and no if it does not."
)
YES_NO_TEMPLATE = (
    "Task:\n{prompt}\n\nResponse:\n{response}\n\nCriterion: {criterion}\n\nDoes the response meet the criterion? "
    "Answer yes or no."
)
YES_NO_TOP = 20  # first-token alternatives asked for (vLLM's default max_logprobs)
YES_NO_SAMPLING = {"temperature": 0.0}  # with YES_NO_TOP, part of the judge's version (the cache key)
_SCORE = re.compile(r"^\s*(?:score\s*[:=]?\s*)?(\d+(?:\.\d+)?)\s*(?:/\s*10)?\s*\.?\s*$", re.IGNORECASE)
SCORING = {  # mode -> what defines its judgements (hashed into the judge's version)
    "reply": JUDGE_SYSTEM + JUDGE_TEMPLATE + json.dumps(JUDGE_SAMPLING, sort_keys=True),
    "yes_no": YES_NO_SYSTEM
    + YES_NO_TEMPLATE
    + json.dumps({**YES_NO_SAMPLING, "top_logprobs": YES_NO_TOP}, sort_keys=True),
}


@dataclass(frozen=True)
class Judgement:
    """One (prompt, response, criterion) graded: `score` in [0, 1] or None (parse failure), the raw reply."""

    score: float | None
    reply: str
    cached: bool = False


@dataclass
class JudgeStats:
    requests: int = 0
    cache_hits: int = 0
    parse_fail: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


def parse_score(reply: str) -> float | None:
    """A judge reply's score in [0, 1], or None when the reply is not one number 0..10."""
    match = _SCORE.match(reply or "")
    if match is None:
        return None
    value = float(match.group(1))
    return value / 10.0 if 0.0 <= value <= 10.0 else None


def yes_no_score(logprobs: dict[str, float]) -> tuple[float | None, str]:
    """P(yes) / (P(yes) + P(no)) from first-token log-probabilities, and the reply kept for it (the two
    probabilities); None when neither label is among the tokens."""
    mass = {"yes": 0.0, "no": 0.0}
    for token, logprob in logprobs.items():
        label = token.strip().lower()
        if label in mass:
            mass[label] += math.exp(logprob)
    total = mass["yes"] + mass["no"]
    reply = f"p_yes={mass['yes']:.4g} p_no={mass['no']:.4g} top={max(logprobs, key=logprobs.get)!r}"
    return (mass["yes"] / total if total > 0 else None), reply


class JudgeCache:
    """Judgements on disk: one JSON object per line {key, score, reply}; appends are lock-protected."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._entries: dict[str, dict] | None = None  # read at first use
        self._torn = 0

    @property
    def entries(self) -> dict[str, dict]:
        if self._entries is None:
            self._entries = {}
            lines = self.path.read_text(encoding="utf-8").splitlines() if self.path.is_file() else []
            for line in lines:
                try:
                    record = json.loads(line)
                    self._entries[record["key"]] = record
                except (json.JSONDecodeError, KeyError, TypeError):
                    self._torn += 1
        return self._entries

    @property
    def torn(self) -> int:
        """Lines skipped on load (a crash mid-append)."""
        _ = self.entries
        return self._torn

    def get(self, key: str) -> dict | None:
        return self.entries.get(key)

    def put_many(self, records: list[dict]) -> None:
        if not records:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in records).encode()
        with open(self.path, "ab") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
        self.entries.update({r["key"]: r for r in records})


class JudgeEndpoint(Protocol):
    """What the judge asks: an OpenAI-compatible chat endpoint (`ChatEndpoint` of coevo/coevolvers/writers.py)."""

    model: str

    def ask(self, system: str, prompt: str, **sampling: float | int) -> str: ...

    def first_token_logprobs(self, system: str, prompt: str, top: int, **sampling: float | int) -> dict[str, float]: ...


class Judge:
    """Scores (prompt, response, criterion) triples through `endpoint`, with an optional disk cache."""

    def __init__(
        self, endpoint: JudgeEndpoint, cache: JudgeCache | None = None, workers: int = 4, scoring: str = "reply"
    ):
        if scoring not in SCORING:
            raise ValueError(f"judge scoring {scoring!r} is not one of {sorted(SCORING)}")
        self.endpoint = endpoint
        self.cache = cache
        self.workers = workers
        self.scoring = scoring
        self.version = f"{endpoint.model}:{hash_bytes(SCORING[scoring].encode())[:12]}"
        self.stats = JudgeStats()

    def _ask(self, item: tuple[str, str, str]) -> tuple[float | None, str]:
        """One judgement's score and the reply kept for it: greedy (the same items get the same scores)
        and short (a score is a few tokens; without a cap a chat model may write up to its context length)."""
        prompt, response, criterion = item
        if self.scoring == "yes_no":
            asked = YES_NO_TEMPLATE.format(prompt=prompt, response=response, criterion=criterion)
            return yes_no_score(self.endpoint.first_token_logprobs(YES_NO_SYSTEM, asked, YES_NO_TOP, **YES_NO_SAMPLING))
        reply = self.endpoint.ask(
            JUDGE_SYSTEM, JUDGE_TEMPLATE.format(prompt=prompt, response=response, criterion=criterion), **JUDGE_SAMPLING
        )
        return parse_score(reply), reply

    def key(self, prompt: str, response: str, criterion: str) -> str:
        return hash_bytes(json.dumps([self.version, prompt, response, criterion]).encode())

    def score(self, items: list[tuple[str, str, str]]) -> list[Judgement]:
        """One Judgement per (prompt, response, criterion), in order; uncached unique items are asked
        concurrently. EndpointError when the endpoint still fails after its retries."""
        keys = [self.key(*item) for item in items]
        found: dict[str, Judgement] = {}
        missing: dict[str, tuple[str, str, str]] = {}
        for key, item in zip(keys, items):
            hit = self.cache.get(key) if self.cache is not None else None
            if hit is not None:
                found[key] = Judgement(hit["score"], hit["reply"], cached=True)
            elif key not in found:
                missing.setdefault(key, item)
        self.stats.cache_hits += sum(1 for key in keys if key in found)
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            judged = list(pool.map(self._ask, missing.values()))
        fresh = [
            {"key": key, "score": score, "reply": reply, "version": self.version}
            for key, (score, reply) in zip(missing, judged)
        ]
        if self.cache is not None:
            self.cache.put_many(fresh)
        found.update({r["key"]: Judgement(r["score"], r["reply"]) for r in fresh})
        self.stats.requests += len(fresh)
        out = [found[key] for key in keys]
        self.stats.parse_fail += sum(1 for j in out if j.score is None)
        return out
