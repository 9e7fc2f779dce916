"""The LLM judge against real HTTP servers on loopback (the real openai client): a scripted grader
(exact replies or first-token log-probabilities, a 500 before it answers) and the tiny policy served
as a chat model (its scores are noise: the test asserts the plumbing)."""

from __future__ import annotations

import json
import math
import re
from http.server import ThreadingHTTPServer

import pytest
import torch

from coevo.coevolvers.writers import ChatEndpoint, EndpointError
from coevo.model.checkpoint import load_policy
from coevo.verification.judge import YES_NO_TOP, Judge, JudgeCache, parse_score, yes_no_score

from .conftest import JSONHandler


class GraderServer(ThreadingHTTPServer):
    """POST /v1/chat/completions: 500 for the first `failures` requests, then `answer(user message)`:
    a str is the reply's content, a dict {token: probability} its first token's top log-probabilities
    (OpenAI's chat logprobs shape), None a reply without logprobs. Every answered request's body is kept
    (`bodies`; `last` the newest)."""

    daemon_threads = True

    def __init__(self, answer, failures: int = 0):
        super().__init__(("127.0.0.1", 0), GraderHandler)
        self.answer, self.failures, self.hits, self.last, self.bodies = answer, failures, 0, None, []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class GraderHandler(JSONHandler):
    server: GraderServer

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.hits += 1
        if self.server.failures > 0:
            self.server.failures -= 1
            return self._send(500, {"error": {"message": "boom", "type": "server_error"}})
        self.server.last = body
        self.server.bodies.append(body)
        reply = self.server.answer(body["messages"][-1]["content"])
        choice = {"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}
        if not isinstance(reply, str):
            top = [{"token": t, "logprob": math.log(p), "bytes": None} for t, p in (reply or {}).items()]
            first = {**max(top, key=lambda t: t["logprob"]), "top_logprobs": top} if top else None
            choice = {
                **choice,
                "message": {"role": "assistant", "content": first["token"] if first else "?"},
                "logprobs": {"content": [first]} if first else None,
            }
        self._send(
            200, {"id": "c", "object": "chat.completion", "created": 0, "model": body["model"], "choices": [choice]}
        )


SCRIPT = {"short": "7", "polite": "Score: 3/10", "vague": "It is quite good overall."}


def scripted(user: str) -> str:
    criterion = re.search(r"Criterion: (\w+)", user).group(1)
    return SCRIPT[criterion]


def judge_for(server: GraderServer, cache_path=None, model: str = "grader") -> Judge:
    endpoint = ChatEndpoint(server.base_url, model, "EMPTY", timeout_s=5, backoff_s=0.01)
    return Judge(endpoint, JudgeCache(cache_path) if cache_path else None, workers=3)


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ("7", 0.7),
        (" 10 ", 1.0),
        ("0", 0.0),
        ("7/10", 0.7),
        ("Score: 8.5", 0.85),
        ("score=4.", 0.4),
        ("11", None),
        ("-1", None),
        ("good", None),
        ("7 because", None),
        ("", None),
    ],
)
def test_parse_score(reply, score):
    assert parse_score(reply) == score


def test_judge_parses_caches_and_excludes_parse_failures(loopback, tmp_path):
    server = loopback(GraderServer(scripted))
    items = [("Write about cats.", "Cats nap.", c) for c in ("short", "polite", "vague")] + [
        ("Write about cats.", "Cats nap.", "short")
    ]
    judge = judge_for(server, tmp_path / "cache.jsonl")
    first = judge.score(items)
    assert [j.score for j in first] == [0.7, 0.3, None, 0.7]
    assert first[2].reply == "It is quite good overall."
    assert server.hits == 3 and judge.stats.requests == 3  # the repeated item is asked once
    assert judge.stats.parse_fail == 1 + 0  # the vague reply; the duplicate of "short" parsed
    again = judge_for(server, tmp_path / "cache.jsonl")  # a new process reads the cache file
    second = again.score(items)
    assert [j.score for j in second] == [0.7, 0.3, None, 0.7] and all(j.cached for j in second)
    assert server.hits == 3 and again.stats.cache_hits == 4 and again.stats.requests == 0
    other = judge_for(server, tmp_path / "cache.jsonl", model="another-grader")  # another judge version
    other.score(items[:1])
    assert server.hits == 4


def test_torn_cache_line_is_skipped(loopback, tmp_path):
    server = loopback(GraderServer(scripted))
    path = tmp_path / "cache.jsonl"
    judge_for(server, path).score([("q", "r", "short")])
    with path.open("a") as handle:
        handle.write('{"key": "abc", "sco')  # a crash mid-append
    judge = judge_for(server, path)
    assert judge.cache.torn == 1
    assert judge.score([("q", "r", "short")])[0].cached


def test_judge_retries_after_a_server_500(loopback):
    server = loopback(GraderServer(scripted, failures=2))
    [judgement] = judge_for(server).score([("q", "r", "polite")])
    assert judgement.score == 0.3 and server.hits == 3


def test_judge_endpoint_down_is_a_clear_error_not_a_reward(loopback):
    server = loopback(GraderServer(scripted, failures=10))
    with pytest.raises(EndpointError, match=rf"request to {server.base_url} .*failed after 3 attempt"):
        judge_for(server).score([("q", "r", "short")])


@pytest.mark.parametrize(
    ("probs", "score"),
    [
        ({"yes": 0.6, " No": 0.2, "maybe": 0.1}, 0.75),
        ({"Yes": 0.3, " yes": 0.3, "no": 0.2}, 0.75),
        ({"NO": 0.5}, 0.0),
        ({"yes!": 0.4, "y": 0.3}, None),
    ],
)
def test_yes_no_score(probs, score):
    got, reply = yes_no_score({token: math.log(p) for token, p in probs.items()})
    assert got == pytest.approx(score) if score is not None else got is None
    assert reply.startswith("p_yes=")


YES_NO = {"short": {"yes": 0.6, "no": 0.2, "The": 0.1}, "vague": {"The": 0.7, "I": 0.2}, "empty": None}


def test_yes_no_judge_scores_from_first_token_logprobs(loopback, tmp_path):
    server = loopback(GraderServer(lambda user: YES_NO[re.search(r"Criterion: (\w+)", user).group(1)]))
    endpoint = ChatEndpoint(server.base_url, "grader", "EMPTY", timeout_s=5, backoff_s=0.01)
    judge = Judge(endpoint, JudgeCache(tmp_path / "cache.jsonl"), workers=2, scoring="yes_no")
    short, vague = judge.score(
        [("Write about cats.", "Cats nap.", "short"), ("Write about cats.", "Cats nap.", "vague")]
    )
    assert short.score == pytest.approx(0.75) and vague.score is None and judge.stats.parse_fail == 1
    assert "Answer yes or no" in server.last["messages"][-1]["content"]
    assert {k: server.last[k] for k in ("max_tokens", "logprobs", "top_logprobs", "temperature")} == {
        "max_tokens": 1,
        "logprobs": True,
        "top_logprobs": YES_NO_TOP,
        "temperature": 0.0,
    }
    hits = server.hits
    reply_mode = Judge(
        endpoint, JudgeCache(tmp_path / "cache.jsonl"), workers=2
    )  # another scoring mode: another judge version
    assert reply_mode.version != judge.version
    with pytest.raises(
        EndpointError, match="no top_logprobs"
    ):  # a server that ignores logprobs: garbage, retried, then an error
        judge.score([("Write about cats.", "Cats nap.", "empty")])
    assert server.hits == hits + 3


def test_judge_against_the_tiny_policy_served_as_a_chat_model(loopback, tiny_policy_dir, tmp_path):
    policy = load_policy(tiny_policy_dir, "cpu", "float32")
    tok = policy.tokenizer

    def generate(user: str) -> str:
        ids = tok(user[-40:], return_tensors="pt")["input_ids"]  # the tail fits the tiny model's 64 positions
        with torch.no_grad():
            out = policy.model.generate(ids, max_new_tokens=4, do_sample=False, pad_token_id=tok.pad_token_id)
        return tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True) or "?"

    server = loopback(GraderServer(generate))
    items = [
        ("Write about cats.", response, "The response is short.") for response in ("Cats nap.", "Cats, cats.", "cats")
    ]
    judge = judge_for(server, tmp_path / "cache.jsonl", model="tiny")
    first = judge.score(items)
    assert all(j.score is None or 0.0 <= j.score <= 1.0 for j in first)
    assert [j.score for j in first] == [parse_score(j.reply) for j in first]
    assert judge.stats.parse_fail == sum(j.score is None for j in first)
    hits = server.hits
    assert [j.score for j in judge.score(items)] == [j.score for j in first] and server.hits == hits
