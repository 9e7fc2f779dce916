"""Skill writers: worked examples from verified trajectories, and the OpenAI writer against a real
HTTP server on 127.0.0.1 (the real openai client talks to it over loopback)."""

from __future__ import annotations

import json
from http.server import ThreadingHTTPServer

import pytest

from coevo.coevolvers.writers import (
    ChatEndpoint,
    OpenAIChatWriter,
    SkillDraft,
    WorkedExampleWriter,
    build_writer,
    worked_text,
)
from coevo.config import WriterConfig

from ..conftest import JSONHandler


def example(question: str, completion: str, pass_rate: float, family: str = "mul") -> dict:
    return {
        "problem_id": question,
        "question": question,
        "completion": completion,
        "family": family,
        "pass_rate": pass_rate,
    }


# ---- worked examples ----
def test_worked_examples_hardest_first_one_per_question():
    examples = [
        example("3+4=", "7", 1.0, family="add"),
        example("7*8=", " 56 ", 0.25),
        example("7*8=", "56", 0.25),
        example("7*9=", "63", 0.25),
        example("12*3=", "36", 0.5),
    ]
    drafts = WorkedExampleWriter().write(examples, n=3)
    assert drafts == [
        SkillDraft(text="7*8=56", family="mul", key="7*8=", source="worked_example"),
        SkillDraft(text="7*9=63", family="mul", key="7*9=", source="worked_example"),
        SkillDraft(text="12*3=36", family="mul", key="12*3=", source="worked_example"),
    ]


def test_worked_examples_skip_multiline_and_empty_answers():
    code = "#f(1)=4 f(2)=5\ndef f(x): return "
    examples = [
        example("1*1=", "1\n2", 0.0),
        example("2*2=", "   ", 0.0),
        example("3*3=", "9", 0.5),
        example(code, "x+3", 0.6),
    ]
    assert [d.text for d in WorkedExampleWriter().write(examples, n=5)] == ["3*3=9", code + "x+3"]
    assert WorkedExampleWriter().write(examples, n=0) == []


def test_an_episode_reads_as_its_turns_in_order_and_a_turn_over_lines_stays_over_lines():
    one_turn = worked_text(" 56 ")
    turns = [
        {"role": "assistant", "content": '<tool_call>{"name": "multiply"}</tool_call>\n'},
        {"role": "tool", "content": " 56 "},
        {"role": "assistant", "content": "56"},
    ]
    assert (one_turn, worked_text("56", json.dumps(turns))) == (
        " 56 ",
        '<tool_call>{"name": "multiply"}</tool_call> [tool: 56] 56',
    )
    spanning = [{"role": "assistant", "content": "def f(x):\n    return x"}]
    assert "\n" in worked_text("", json.dumps(spanning))  # the worked-example writer skips it


# ---- registry ----
def test_build_writer_by_kind():
    assert isinstance(build_writer(WriterConfig()), WorkedExampleWriter)
    writer = build_writer(WriterConfig(kind="openai", base_url="http://127.0.0.1:9/v1", model="m"))
    assert isinstance(writer, OpenAIChatWriter) and writer.kind == "openai"


@pytest.mark.parametrize("missing", [{"model": "m"}, {"base_url": "http://127.0.0.1:9/v1"}])
def test_openai_writer_needs_endpoint_and_model(missing):
    with pytest.raises(ValueError, match="base_url and coevolver.writer.model"):
        build_writer(WriterConfig(kind="openai", **missing))


# ---- OpenAI writer over loopback ----
class ChatServer(ThreadingHTTPServer):
    """POST /v1/chat/completions: fails with 503 `failures` times, then replies `reply`; records bodies."""

    def __init__(self, reply: str, failures: int = 0):
        super().__init__(("127.0.0.1", 0), ChatHandler)
        self.reply, self.failures, self.bodies = reply, failures, []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class ChatHandler(JSONHandler):
    server: ChatServer

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.bodies.append({"path": self.path, **body})
        if self.server.failures > 0:
            self.server.failures -= 1
            return self._send(503, {"error": {"message": "overloaded", "type": "server_error"}})
        choice = {"index": 0, "message": {"role": "assistant", "content": self.server.reply}, "finish_reason": "stop"}
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        completion = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body["model"]}
        self._send(200, completion | {"choices": [choice], "usage": usage})


@pytest.fixture
def serve(loopback):
    """Start a ChatServer on loopback (shut down at teardown)."""

    def start(reply: str, failures: int = 0) -> ChatServer:
        return loopback(ChatServer(reply, failures))

    return start


def writer_for(server: ChatServer) -> OpenAIChatWriter:
    return OpenAIChatWriter(
        ChatEndpoint(base_url=server.base_url, model="tiny-writer", api_key="EMPTY", timeout_s=5, backoff_s=0.01)
    )


def test_openai_writer_sends_trajectories_and_parses_skill(serve):
    server = serve("\n  Multiply tens and units separately, then add.  \nExtra line ignored.")
    examples = [example("7*8=", "56", 0.25), example("12*3=", "36", 0.5), example("3+4=", "7", 1.0, family="add")]
    drafts = writer_for(server).write(examples, n=1)  # one request: the hardest family only
    assert drafts == [
        SkillDraft(text="Multiply tens and units separately, then add.", family="mul", key="7*8=", source="openai")
    ]
    [body] = server.bodies
    assert body["path"] == "/v1/chat/completions" and body["model"] == "tiny-writer"
    user = body["messages"][-1]["content"]
    assert "7*8=56" in user and "12*3=36" in user and "3+4=7" not in user


def test_openai_writer_one_request_per_family(serve):
    server = serve("x" * 300)
    drafts = writer_for(server).write([example("7*8=", "56", 0.25), example("3+4=", "7", 1.0, family="add")], n=4)
    assert [(d.family, len(d.text)) for d in drafts] == [("mul", 200), ("add", 200)]  # cut to 200 characters
    assert len(server.bodies) == 2


def test_openai_writer_retries_transient_errors(serve):
    server = serve("Check the units digit first.", failures=2)
    drafts = writer_for(server).write([example("7*8=", "56", 0.25)], n=1)
    assert [d.text for d in drafts] == ["Check the units digit first."]
    assert len(server.bodies) == 3


def test_openai_writer_gives_up_naming_the_endpoint(serve):
    server = serve("never sent", failures=5)
    with pytest.raises(RuntimeError, match=server.base_url):
        writer_for(server).write([example("7*8=", "56", 0.25)], n=1)
    assert len(server.bodies) == 3
