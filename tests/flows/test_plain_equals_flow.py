"""`coevo train --plain` and the Prefect flow run the same stages (docs/pipeline.md, "What one iteration does"): with
the same params they produce the same checkpoints (weights sha256), co-evolver versions and metrics. The flow
run also publishes one `coevo-iteration` table artifact per iteration holding that iteration's metrics
and skill counts (docs/pipeline.md, "Prefect"), read back here through the Prefect client."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterKey
from typer.testing import CliRunner

from coevo.cli import app
from coevo.coevolvers.base import read_manifest
from coevo.config import deep_merge
from coevo.layout import RunLayout
from coevo.model.checkpoint import read_meta
from flows.train import train_flow

from ..conftest import TINY, TINY_PARAMS


def params_file(tmp_path: Path, name: str) -> Path:
    """params.yaml shrunk to TINY, with its own run directory, data and MLflow store."""
    raw = yaml.safe_load(TINY_PARAMS.read_text())
    own = {
        "run": {"out_dir": str(tmp_path / name / "run")},
        "problems": {"data_dir": str(tmp_path / name / "data")},
        "tracking": {"mlflow_uri": f"sqlite:///{tmp_path / name / 'mlflow.db'}", "experiment": "plain-vs-flow"},
        "rollout": {  # enough passes that iteration 1 already writes skills; rounds drawn until groups are mixed
            "problems_per_iter": 8,
            "dynamic_sampling": {"enabled": True, "max_rounds": 1},
        },
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(deep_merge(deep_merge(raw, TINY), own)))
    return path


def outcome(params: Path) -> dict:
    """What a run produced: weights and co-evolver hashes per iteration, metrics without stage times."""
    cfg = yaml.safe_load(params.read_text())
    layout, iterations = RunLayout(cfg["run"]["out_dir"]), range(cfg["run"]["iterations"] + 1)
    lines = (layout.root / "metrics.jsonl").read_text().splitlines()
    summary = json.loads((layout.root / "summary.json").read_text())
    return {
        "weights": [read_meta(layout.checkpoint(it))["weights_sha256"] for it in iterations],
        "coevolver": [read_manifest(layout.coevolver(it))["content_hash"] for it in iterations],
        "metrics": [{k: v for k, v in json.loads(line).items() if not k.startswith("time/")} for line in lines],
        "eval": (summary["initial_eval"], summary["final_eval"]),
    }


def iteration_tables(flow_run_id) -> dict[int, list[dict]]:
    """The flow run's coevo-iteration table artifacts, by iteration."""
    artifacts = ArtifactFilter(
        key=ArtifactFilterKey(any_=["coevo-iteration"]), flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])
    )
    with get_client(sync_client=True) as client:
        found = client.read_artifacts(artifact_filter=artifacts)
    tables = {}
    for artifact in found:
        assert artifact.type == "table" and artifact.description.startswith("coevo iteration ")
        data = json.loads(artifact.data) if isinstance(artifact.data, str) else artifact.data
        tables[int(artifact.description.rsplit(" ", 1)[1])] = data
    return tables


def test_plain_driver_equals_the_flow_and_the_flow_publishes_each_iteration(prefect_server, tmp_path):
    flow_params, plain_params = params_file(tmp_path, "flow"), params_file(tmp_path, "plain")
    state = train_flow(str(flow_params), return_state=True)
    assert state.is_completed(), state
    result = CliRunner().invoke(app, ["train", "--plain", "--params", str(plain_params), "--json"])
    assert result.exit_code == 0, result.output

    flow, plain = outcome(flow_params), outcome(plain_params)
    assert (
        flow["weights"][-1] != flow["weights"][0] and len(set(flow["coevolver"])) == 3
    )  # the policy moved, the bank changed every iteration
    assert plain == flow
    assert all("rollout/ds_groups_kept" in line for line in flow["metrics"])  # dynamic sampling ran in both

    tables = iteration_tables(state.state_details.flow_run_id)
    assert sorted(tables) == [1, 2]
    layout = RunLayout(yaml.safe_load(flow_params.read_text())["run"]["out_dir"])
    for it, line in enumerate((layout.root / "metrics.jsonl").read_text().splitlines(), start=1):
        report = json.loads(layout.report(it).read_text())
        rows = {row["metric"]: row["value"] for row in tables[it]}
        expected = {k: round(v, 4) for k, v in json.loads(line).items()}
        expected |= {f"skills/{key}": len(report[key]) for key in ("admitted", "rejected", "retired")}
        assert rows == expected
