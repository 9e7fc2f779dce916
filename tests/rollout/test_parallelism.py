"""Engines per node (coevo/rollout/engines check_parallelism): tensor parallel needs GPUs, data parallel the Ray
runner."""

from __future__ import annotations

import pytest
import torch

from coevo.config import EngineConfig
from coevo.rollout.engines import ENGINES, check_parallelism
from tests.conftest import tiny_config


def test_the_defaults_pass_everywhere():
    check_parallelism(EngineConfig(), gpus=0, task_runner="local")


def test_tensor_parallel_on_cpu_is_a_clear_error():
    with pytest.raises(ValueError, match=r"engine\.tensor_parallel_size=2 needs 2 GPUs.*no GPU \(CPU only\)"):
        check_parallelism(EngineConfig(kind="vllm", tensor_parallel_size=2), gpus=0, task_runner="local")
    with pytest.raises(ValueError, match=r"tensor_parallel_size=4 needs 4 GPUs.*only 2 GPU\(s\)"):
        check_parallelism(EngineConfig(kind="vllm", tensor_parallel_size=4), gpus=2, task_runner="local")
    check_parallelism(EngineConfig(kind="vllm", tensor_parallel_size=2), gpus=2, task_runner="local")


def test_tensor_parallel_is_vllms():
    with pytest.raises(ValueError, match=r"tensor parallelism is vLLM's.*not the 'hf' engine's"):
        check_parallelism(EngineConfig(kind="hf", tensor_parallel_size=2), gpus=8, task_runner="local")


def test_data_parallel_needs_the_ray_runner():
    with pytest.raises(ValueError, match=r"data_parallel_size=2: one engine per worker needs the Ray task runner"):
        check_parallelism(EngineConfig(data_parallel_size=2), gpus=0, task_runner="local")
    check_parallelism(EngineConfig(data_parallel_size=2), gpus=0, task_runner="ray")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only refusal")
def test_building_an_engine_checks_before_loading_anything(tmp_path):
    cfg = tiny_config(tmp_path, engine={"kind": "vllm", "tensor_parallel_size": 2})
    with pytest.raises(ValueError, match=r"tensor_parallel_size=2 needs 2 GPUs"):
        ENGINES["vllm"](cfg, tmp_path / "no-checkpoint", lambda: None)
