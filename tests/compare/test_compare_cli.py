"""`coevo compare` through the CLI on a 2-arm x 2-seed tiny spec, on the real Prefect test server and
a real MLflow store: killed with SIGKILL after its first arm run finished, rerun to completion (the
finished run restored, not retrained: same inode and mtime of its checkpoint files), the table with
intervals, the figure, the parent MLflow run with 4 nested runs; then partial result sets merged.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pytest
import yaml
from prefect.settings import PREFECT_API_URL
from rich.console import Console

from coevo import progress
from coevo.config import deep_merge
from flows.compare import compare_flow

from ..conftest import ROOT, TINY, TINY_PARAMS

ARMS = ("grpo", "curriculum")
SEEDS = (0, 1)


def _write_spec(tmp: Path) -> Path:
    params = deep_merge(yaml.safe_load(TINY_PARAMS.read_text()), TINY)
    (tmp / "tiny.yaml").write_text(yaml.safe_dump(params))
    spec = {
        "name": "tiny",
        "params": str(tmp / "tiny.yaml"),
        "seeds": list(SEEDS),
        "iterations": 3,  # 2 seeds x 3 iterations: 6 measured steps per arm, enough for a timing ratio
        "eval_every": 1,
        "reference": "grpo",
        "tracking": {"mlflow_uri": f"sqlite:///{tmp / 'mlflow.db'}", "experiment": "compare-test"},
        "arms": [
            {"name": "grpo", "set": {"coevolver.kind": "none"}},
            {"name": "curriculum", "set": {"coevolver.kind": "curriculum"}},
        ],
    }
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _cli(*args: str, pause: str | None = None) -> subprocess.Popen:
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(), "PYTHONPATH": str(ROOT)}
    env.pop("COEVO_PAUSE", None)
    if pause:
        env["COEVO_PAUSE"] = f"{pause}:300"
    command = [sys.executable, "-m", "coevo.cli", "compare", *args]
    return subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )


def _checkpoint_stamps(run_dir: Path) -> dict[str, tuple[int, int]]:
    files = [p for d in ("bootstrap", "checkpoints") for p in (run_dir / d).rglob("*") if p.is_file()]
    return {p.relative_to(run_dir).as_posix(): (p.stat().st_ino, p.stat().st_mtime_ns) for p in files}


@pytest.fixture(scope="module")
def complete(prefect_server, tmp_path_factory):
    """The comparison killed after its first arm run, then rerun to the end: (dir, stamps, CLI result)."""
    tmp = tmp_path_factory.mktemp("compare")
    spec, out = _write_spec(tmp), tmp / "out"
    first = _cli(str(spec), "--out", str(out), pause="compare-arm:grpo-seed0")
    deadline = time.monotonic() + 600
    for line in first.stderr:  # the first arm run has finished (its record written, nested) and the flow waits
        if line.strip() == "coevo-pause compare-arm grpo-seed0":
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
            break
        assert time.monotonic() < deadline
    else:
        pytest.fail(f"the comparison ended before its first arm run finished: exit {first.wait()}")
    finished = sorted(p.parent.name for p in out.glob("runs/*/compare_arm.json"))
    assert finished == ["grpo-seed0"] and not (out / "table.json").exists()
    stamps = _checkpoint_stamps(out / "runs" / "grpo-seed0")
    assert any(k.startswith("checkpoints/iter_0003/") for k in stamps)

    rerun = _cli(str(spec), "--out", str(out), "--json")
    stdout, stderr = rerun.communicate(timeout=900)
    assert rerun.returncode == 0, stderr[-3000:]
    return spec, out, stamps, json.loads(stdout)


def test_killed_comparison_reruns_restoring_finished_arm_runs_and_reports_intervals(complete):
    spec, out, stamps, result = complete
    # the arm run finished before the kill was restored, not retrained: the same files
    assert _checkpoint_stamps(out / "runs" / "grpo-seed0") == stamps
    assert result["complete"] and sorted(Path(p).name for p in result["files"].values()) == [
        "compare.png",
        "table.json",
        "table.md",
    ]

    table = json.loads((out / "table.json").read_text())
    assert sorted((r["arm"], r["seed"]) for r in table["runs"]) == sorted((a, s) for a in ARMS for s in SEEDS)
    assert all(r["readout_iteration"] == 3 and r["n_test"] == TINY["problems"]["n_test"] for r in table["runs"])
    assert all([p["iteration"] for p in r["curve"]] == [0, 1, 2, 3] for r in table["runs"])
    vs = next(a for a in table["arms"] if a["arm"] == "curriculum")["vs_reference"]
    low, high = vs["ci95"]
    assert low <= vs["mean_diff"] <= high and [row["seed"] for row in vs["seeds"]] == list(SEEDS)
    ratio = next(a for a in table["arms"] if a["arm"] == "curriculum")["time_ratio"]
    assert ratio["ratio"] > 0 and ratio["ci95"][0] <= ratio["ratio"] <= ratio["ci95"][1]
    # the per-seed difference is the two arms' accuracies at the readout
    for row in vs["seeds"]:
        accs = {r["arm"]: r["final_acc"] for r in table["runs"] if r["seed"] == row["seed"]}
        assert row["diff"] == pytest.approx(accs["curriculum"] - accs["grpo"])
    # validation rides along from each evaluation record into the table, paired like test
    assert all(r["val_acc"] is not None for r in table["runs"])
    val = next(a for a in table["arms"] if a["arm"] == "curriculum")["val_vs_reference"]
    assert val["ci95"][0] <= val["mean_diff"] <= val["ci95"][1] and [row["seed"] for row in val["seeds"]] == list(SEEDS)
    assert "[95% CI]" in (out / "table.md").read_text()
    assert (out / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # MLflow: the parent run (FINISHED, with the table and figure) and its 4 nested arm runs
    client = mlflow.MlflowClient(f"sqlite:///{spec.parent / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("compare-test").experiment_id
    parent = client.get_run(result["parent_run_id"])
    assert parent.info.status == "FINISHED"
    children = client.search_runs([experiment], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert sorted(r.info.run_name for r in children) == sorted(f"{a}-seed{s}" for a in ARMS for s in SEEDS)
    assert all(r.info.status == "FINISHED" and "eval/acc" in r.data.metrics for r in children)
    assert len(client.search_runs([experiment])) == 5  # the rerun continued the same parent, no duplicate runs
    logged = {a.path for a in client.list_artifacts(parent.info.run_id, "compare")}
    assert logged == {"compare/table.json", "compare/table.md", "compare/compare.png"}
    assert parent.data.metrics["compare/curriculum/diff"] == pytest.approx(vs["mean_diff"])


def _copy_seed(out: Path, seed: int, to: Path) -> Path:
    for arm in ARMS:
        shutil.copytree(out / "runs" / f"{arm}-seed{seed}", to / "runs" / f"{arm}-seed{seed}", symlinks=True)
    return to


def _without_timings(table: dict) -> dict:
    """The table less what the clock measured (seconds, timing ratios)."""
    text = json.dumps(table, sort_keys=True)
    strip = {"readout_train_seconds", "train_seconds", "stage_seconds", "step_seconds", "time_ratio"}

    def clean(node):
        if isinstance(node, dict):
            return {k: clean(v) for k, v in node.items() if k not in strip}
        if isinstance(node, list):
            return [clean(v) for v in node]
        return node

    return clean(json.loads(text))


def test_partial_result_sets_merge_into_the_complete_table(complete, tmp_path):
    spec, out, _, _ = complete
    whole = json.loads((out / "table.json").read_text())
    # result sets made elsewhere (here: the same runs, each seed's in its own directory): merged with
    # nothing left to run, they give exactly the complete run's table
    merged = compare_flow(
        str(spec),
        str(tmp_path / "merged"),
        merge=[str(_copy_seed(out, 0, tmp_path / "a")), str(_copy_seed(out, 1, tmp_path / "b"))],
    )
    assert not (tmp_path / "merged" / "runs").exists()  # nothing trained
    assert (tmp_path / "merged" / "table.json").read_text() == (out / "table.json").read_text()
    assert merged["complete"]

    # a partial comparison run for real (seed 0 only, another sitting), merged with seed 1's set:
    # the same table but for what the clock measured
    part = compare_flow(str(spec), str(tmp_path / "part0"), seeds=[0])
    assert not part["complete"] and sorted(r["seed"] for r in part["table"]["runs"]) == [0, 0]
    again = compare_flow(str(spec), str(tmp_path / "merged2"), merge=[str(tmp_path / "part0"), str(tmp_path / "b")])
    assert _without_timings(again["table"]) == _without_timings(whole)

    # a results directory as committed to the repository (its runs' compare_arm.json only, their
    # MLflow runs in another machine's store), rerun in place: nothing to train, the same table
    carried = tmp_path / "carried"
    for marker in out.glob("runs/*/compare_arm.json"):
        (carried / marker.parent.relative_to(out)).mkdir(parents=True)
        shutil.copy2(marker, carried / marker.relative_to(out))
    shown = io.StringIO()
    with progress.LineReporter(Console(file=shown, width=200), every=0) as reporter, progress.reporting(reporter):
        rerun = compare_flow(str(spec), str(carried))
    assert rerun["complete"] and (carried / "table.json").read_text() == (out / "table.json").read_text()
    # each arm run is shown as it is run (here restored), with the count of runs
    lines = [line.split("] ", 1)[1] for line in shown.getvalue().splitlines()]
    cells = len(ARMS) * len(SEEDS)
    for arm in ARMS:
        for seed in SEEDS:
            assert (
                sum(re.fullmatch(rf"{arm} seed {seed} \(\d of {cells}\) \.\.\.", line) is not None for line in lines)
                == 1
            )
    assert [line for line in lines if line.startswith("compare runs ")] == [
        f"compare runs {k}/{cells}" for k in range(cells)
    ]
