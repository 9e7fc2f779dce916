"""Fault matrix (issue 17, item 3): the servers a run talks to fail under it, on the real components.

- A co-evolver endpoint (skill writer, memory reflector) that is down, slow past its timeout or
  answers garbage: retried with backoff, then the co-evolution stage fails with EndpointError naming
  the URL, and no co-evolver version (nor report) is written for that iteration. The endpoint is a
  real HTTP server on loopback (the real openai client talks to it); "down" is a closed port.
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
from collections.abc import Iterator

import pandas as pd
import pytest

from coevo.coevolvers import build_coevolver
from coevo.coevolvers.writers import ATTEMPTS, ChatEndpoint, EndpointError
from coevo.stages import RunLayout, coevolve_stage, prepare_stage
from schemas.rewards import write_rewards
from schemas.rollouts import write_rollouts

from .conftest import tiny_config

# ---- co-evolver endpoints ----

COMPLETION = {"id": "c", "object": "chat.completion", "created": 0, "model": "writer"}
GARBAGE = {  # name -> (content type, body) of a 200 reply
    "not_json": ("application/json", b"<html>502 Bad Gateway</html>"),
    "html": ("text/html", b"<html>login required</html>"),
    "wrong_shape": ("application/json", json.dumps({"result": "Multiply tens first."}).encode()),
    "no_choices": ("application/json", json.dumps({**COMPLETION, "choices": []}).encode()),
    "empty_text": ("application/json", json.dumps({**COMPLETION, "choices": [{"index": 0, "message": {"role": "assistant", "content": "  \n"}, "finish_reason": "stop"}]}).encode()),
}
REASONS = {"not_json": "not JSON", "html": "not a chat completion", "wrong_shape": "not a chat completion", "no_choices": "not a chat completion", "empty_text": "no text"}


class Endpoint(http.server.ThreadingHTTPServer):
    """A chat endpoint on loopback that answers every POST with `reply` after `delay_s`, counting hits."""

    daemon_threads = True

    def __init__(self, reply: tuple[str, bytes], delay_s: float = 0.0):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.reply, self.delay_s, self.hits = reply, delay_s, 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Endpoint

    def do_POST(self):  # noqa: N802 (http.server's name)
        self.server.hits += 1
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        time.sleep(self.server.delay_s)
        content_type, body = self.server.reply
        try:
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:  # the client gave up (timeout) and closed the connection
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def serve() -> Iterator:
    servers: list[Endpoint] = []

    def start(reply: tuple[str, bytes], delay_s: float = 0.0) -> Endpoint:
        server = Endpoint(reply, delay_s)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def closed_port_url() -> str:
    with socket.socket() as sock:  # a port nobody listens on once closed
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


@pytest.mark.parametrize("garbage", sorted(GARBAGE))
def test_garbage_reply_is_retried_then_fails_naming_the_endpoint(serve, garbage):
    server = serve(GARBAGE[garbage])
    endpoint = ChatEndpoint(server.base_url, "writer", "EMPTY", timeout_s=5, backoff_s=0.01)
    with pytest.raises(EndpointError, match=rf"request to {server.base_url} \(model 'writer'\) failed after {ATTEMPTS} attempt\(s\).*{REASONS[garbage]}"):
        endpoint.ask("system", "write a skill")
    assert server.hits == ATTEMPTS


def test_slow_endpoint_times_out_each_attempt_then_fails_naming_it(serve):
    good = json.dumps({**COMPLETION, "choices": [{"index": 0, "message": {"role": "assistant", "content": "late"}, "finish_reason": "stop"}]})
    server = serve(("application/json", good.encode()), delay_s=2.0)
    endpoint = ChatEndpoint(server.base_url, "writer", "EMPTY", timeout_s=0.2, backoff_s=0.01)
    with pytest.raises(EndpointError, match=rf"request to {server.base_url} .*failed after {ATTEMPTS} attempt\(s\).*timed out"):
        endpoint.ask("system", "write a skill")
    assert server.hits == ATTEMPTS


def _iteration_one(tmp_path, coevolver: dict) -> tuple:
    """A tiny run's problems, co-evolver version 0 and iteration 1's rollouts and rewards (two of each
    problem's four completions right), without the policy: only the co-evolution stage runs."""
    cfg = tiny_config(tmp_path, coevolver=coevolver)
    data = prepare_stage(cfg)
    layout = RunLayout(cfg.run.out_dir)
    build_coevolver(cfg.coevolver, cfg.seed).save(layout.coevolver(0))
    train = pd.read_parquet(data["train"]["path"]).head(3)
    rollouts, rewards = [], []
    for row in train.itertuples():
        for k, right in enumerate([True, True, False, False]):
            rid = f"0001-{row.id}-{k}"
            completion = str(row.answer) if right else "0"
            rollouts.append(
                {"rollout_id": rid, "iteration": 1, "problem_id": row.id, "family": row.family, "variant": "solo", "probe_skill": "", "skills": [],
                 "question": row.prompt, "prompt": row.prompt, "completion": completion, "prompt_ids": [1, 2], "completion_ids": [3],
                 "sampling_logprobs": [-0.5], "finished": True, "policy_version": "test"}
            )
            rewards.append({"rollout_id": rid, "iteration": 1, "problem_id": row.id, "reward": float(right), "passed": right, "verifier": "test", "details": "", "components": "{}"})
    write_rollouts(layout.rollouts(1), pd.DataFrame(rollouts))
    write_rewards(layout.rewards(1), pd.DataFrame(rewards))
    return cfg, layout, data


@pytest.mark.parametrize("who", ["skill_writer", "memory_reflector"])
@pytest.mark.parametrize("fault", ["down", "garbage"])
def test_coevolution_stage_fails_without_writing_a_version(serve, tmp_path, who, fault):
    base_url = closed_port_url() if fault == "down" else serve(GARBAGE["wrong_shape"]).base_url
    writer = {"base_url": base_url, "model": "writer", "timeout_s": 2}
    if who == "skill_writer":
        coevolver = {"kind": "skill_bank", "writer": {**writer, "kind": "openai"}}
    else:
        coevolver = {"kind": "memory", "writer": writer, "memory": {"reflector": "openai", "levels": [2]}}
    cfg, layout, data = _iteration_one(tmp_path, coevolver)
    with pytest.raises(EndpointError, match=rf"request to {base_url} \(model 'writer'\) failed after {ATTEMPTS} attempt\(s\)"):
        coevolve_stage(cfg, 1, str(layout.coevolver(0)), str(layout.rollouts(1)), str(layout.rewards(1)), data["train"]["path"])
    assert not layout.coevolver(1).exists()
    assert not layout.report(1).exists()
    assert not list(layout.root.glob("coevolver/.*"))  # no temporary half-written version either
