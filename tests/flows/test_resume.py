"""SIGKILL the flow process mid-stage, run the same command again, and demand an exact resume.

A restart from scratch would give the same final weights and catalog (every stage is deterministic
and ingest/registration are idempotent), so the test also demands that the outputs of the stages
completed before the kill were restored, not recomputed: each is still the same file (inode and
modification time), where a recomputed stage replaces its output by an atomic rename.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pytest
import torch
import yaml
from prefect.settings import PREFECT_API_URL
from safetensors.torch import load_file

from coevo.coevolvers.base import read_manifest
from coevo.coevolvers.composite import member_reports
from coevo.config import deep_merge
from coevo.layout import RunLayout
from coevo.store.catalog import Catalog
from coevo.store.lineage import read_record, verify_lineage
from flows.train import train_flow

from ..conftest import TINY, TINY_PARAMS
from ..test_judge import GraderServer
from ..test_rubrics_run import grade

ITERATIONS = 3

# the output the killed stage had already written, which the resumed flow must write again
INTERRUPTED = {"coevolve:2": {"reports/iter_0002.json"}}


def _params(tmp_path, name: str, top: dict | None = None, merge: dict | None = None) -> tuple[str, dict]:
    """The run's params file (TINY, `top` replacing whole top-level sections, then `merge` merged
    into it) and its overrides."""
    raw = yaml.safe_load(TINY_PARAMS.read_text()) | (top or {})
    overrides = {
        **TINY,
        # keep_last 1: by the end of each run the weights of every checkpoint but the newest (and the
        # bootstrap) are pruned, so the resumed flow has to get past pruned checkpoints
        "run": {
            **TINY["run"],
            "iterations": ITERATIONS,
            "out_dir": str(tmp_path / name / "run"),
            "retention": {"keep_last": 1, "keep_every": 50, "keep_best": False},
        },
        "problems": {**TINY["problems"], "data_dir": str(tmp_path / name / "data")},
        "optim": {**TINY["optim"], "epochs": 20},  # a policy update long enough to be killed inside
        "tracking": {
            "mlflow_uri": f"sqlite:///{tmp_path / name / 'mlflow.db'}",
            "experiment": "resume",
            "model_name": "tiny",
        },
        "pipeline": {"retries": 0, "retry_delay_s": 0.1},
    }
    for section, values in overrides.items():
        raw[section].update(values)
    raw = deep_merge(raw, merge or {})
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path), overrides


def _run(params: str, pause: str | None, *python_options: str, flags: tuple[str, ...] = ()) -> subprocess.Popen:
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value()}
    env.pop("COEVO_PAUSE", None)
    if pause:
        env["COEVO_PAUSE"] = f"{pause}:300"
    command = [sys.executable, *python_options, "-m", "coevo.cli", "train", "--params", params, "--json", *flags]
    return subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )


def _kill_at_pause(process: subprocess.Popen, pause: str) -> None:
    point, where = pause.split(":")
    deadline = time.monotonic() + 600
    for line in process.stderr:
        if line.strip() == f"coevo-pause {point} {where}":
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return
        assert time.monotonic() < deadline
    pytest.fail(f"the flow ended without reaching {pause}: exit {process.wait()}")


def _stage_outputs(layout: RunLayout) -> dict[str, tuple[int, int]]:
    """(inode, mtime_ns) of every finished stage output on disk: shards, reports, evaluations,
    co-evolver versions and checkpoint metadata (temporary ".name.*.tmp" paths excluded)."""
    root = layout.root
    found = [
        *root.glob("rollouts/iter_*.parquet"),
        *root.glob("rewards/iter_*.parquet"),
        *root.glob("reports/iter_*.json"),
    ]
    found += [
        *root.glob("evals/iter_*.json"),
        *root.glob("coevolver/iter_*/**/*"),
        *root.glob("checkpoints/iter_*/coevo.json"),
    ]
    return {p.relative_to(root).as_posix(): (p.stat().st_ino, p.stat().st_mtime_ns) for p in found if p.is_file()}


def _pruned_since(layout: RunLayout, output: str) -> bool:
    """Whether retention deleted `output` (a co-evolver version's file, pruned with its checkpoint):
    absent and listed in its version's pruned.json."""
    path = layout.root / output
    if path.exists() or not output.startswith("coevolver/"):
        return False
    version = layout.root / Path(output).parts[0] / Path(output).parts[1]
    marker = version / "pruned.json"
    return marker.is_file() and path.relative_to(version).as_posix() in json.loads(marker.read_text())["files"]


def _assert_restored(layout: RunLayout, done: dict[str, tuple[int, int]], when: str) -> dict[str, tuple[int, int]]:
    """Every output in `done` is still the same file (restored from the cache, not recomputed)
    unless retention has pruned it since; the outputs on disk now."""
    after = _stage_outputs(layout)
    rewritten = sorted(p for p, stamp in done.items() if after.get(p) != stamp and not _pruned_since(layout, p))
    assert not rewritten, f"{when}: completed stages were recomputed, not restored: {rewritten}"
    return after


def _resume_restoring(params: str, layout: RunLayout, done: dict[str, tuple[int, int]], *python_options: str) -> str:
    """Run the same command again: it must finish and restore every output in `done`. Its stderr."""
    finished = _run(params, None, *python_options)
    _, err = finished.communicate(timeout=900)
    assert finished.returncode == 0, err[-3000:]
    _assert_restored(layout, done, "the finished run")
    return err


@pytest.fixture(scope="module")
def reference(prefect_server, tmp_path_factory):
    """An uninterrupted run of the same configuration."""
    tmp = tmp_path_factory.mktemp("reference")
    params, _ = _params(tmp, "reference")
    train_flow(params)
    return RunLayout(tmp / "reference" / "run")


# killed in iteration 2's co-evolution, then (the resumed run) in its policy update, then in the
# checkpoint write: each kill is resumed from what the runs before it completed, in stage order
KILLS = ["coevolve:2", "update:2", "write:checkpoints/iter_0002"]


def test_sigkill_then_same_command_resumes_exactly(prefect_server, reference, tmp_path):
    params, overrides = _params(tmp_path, "killed")
    layout = RunLayout(tmp_path / "killed" / "run")
    done: dict[str, tuple[int, int]] = {}
    for pause in KILLS:
        _kill_at_pause(_run(params, pause), pause)
        assert not layout.checkpoint(ITERATIONS).exists()
        after = _assert_restored(layout, done, f"killed at {pause}")
        done = {k: v for k, v in after.items() if k not in INTERRUPTED.get(pause, set())}
        # iteration 1 finished and iteration 2's rollout and verification did, at every kill
        assert {
            "rollouts/iter_0002.parquet",
            "rewards/iter_0002.parquet",
            "coevolver/iter_0001/manifest.json",
            "checkpoints/iter_0001/coevo.json",
        } <= set(done)

    # the last run, a whole default (local runner) flow process, also shows that the default neither
    # imports Ray nor (without it) starts it: `-X importtime` lists every module the process imported
    imported = _resume_restoring(params, layout, done, "-X", "importtime")
    assert "coevo.stages" in imported and not re.search(r"\| +ray(\.|$)", imported, re.MULTILINE)

    per_iter = TINY["rollout"]["problems_per_iter"] * TINY["rollout"]["group_size"]
    with Catalog(layout.root / "catalog.duckdb", read_only=True) as catalog:
        counts = catalog.counts()
    with Catalog(reference.root / "catalog.duckdb", read_only=True) as catalog:
        assert counts == catalog.counts()
    assert counts["rollouts"] == counts["rewards"] == ITERATIONS * per_iter
    assert verify_lineage(layout.checkpoint(ITERATIONS)) == []
    assert all((layout.checkpoint(it) / "pruned.json").is_file() for it in range(1, ITERATIONS))
    assert all(
        (layout.coevolver(it) / "pruned.json").is_file() for it in range(1, ITERATIONS)
    )  # pruned with their checkpoints
    final = load_file(layout.checkpoint(ITERATIONS) / "model.safetensors")
    expected = load_file(reference.checkpoint(ITERATIONS) / "model.safetensors")
    assert all(torch.equal(final[k], expected[k]) for k in expected)

    client = mlflow.MlflowClient(overrides["tracking"]["mlflow_uri"])
    versions = client.search_model_versions("name='tiny'")
    iterations = sorted(int(v.tags["coevo.iteration"]) for v in versions)
    assert iterations == sorted(set(iterations))  # no checkpoint registered twice
    run = client.search_runs([client.get_experiment_by_name("resume").experiment_id])
    assert len(run) == 1  # the resumed flow continued the same MLflow run
    logged = [a.path for a in client.list_artifacts(run[0].info.run_id, "checkpoints")]
    assert len(logged) == len(set(logged)) == len(iterations)


def test_continue_after_a_kill_restores_the_stages_the_partial_iteration_finished(prefect_server, tmp_path):
    """`coevo train --continue` starts iteration 2 from checkpoint 1 and co-evolver version 1 as they
    are on disk (coevo/loop.py `Position.saved`), the killed run from their stage records
    (`Position.after`): both key iteration 2's tasks by path and hash alone, so the rollouts and
    rewards the killed run finished are restored from the cache, not sampled again."""
    params, _ = _params(tmp_path, "killed")
    layout = RunLayout(tmp_path / "killed" / "run")
    _kill_at_pause(_run(params, "update:2"), "update:2")
    partial = ("rollouts/iter_0002", "rewards/iter_0002", "reports/iter_0002")
    done = {path: stamp for path, stamp in _stage_outputs(layout).items() if path.startswith(partial)}
    assert len(done) == 3, done
    resumed = _run(params, None, flags=("--continue",))
    _, err = resumed.communicate(timeout=900)
    assert resumed.returncode == 0, err[-3000:]
    _assert_restored(layout, done, "the --continue run")
    assert (layout.checkpoint(2) / "coevo.json").is_file()


def test_sigkill_mid_coevolution_with_four_coevolvers_resumes_exactly(prefect_server, loopback, tmp_path):
    """Curriculum, skill bank, rubric (judged reward, criteria rewritten by the writer) and harness in
    one run on the constraint problems, against a scripted judge on loopback: killed mid co-evolution,
    the resumed run's versions of every member, judge cache and weights match an uninterrupted run's,
    and the lineage names every member's version."""
    server = loopback(GraderServer(grade))
    writer = {"base_url": server.base_url, "model": "grader", "timeout_s": 10}
    members = [
        {"kind": "curriculum"},
        {"kind": "skill_bank"},
        {"kind": "rubrics", "writer": writer, "rubrics": {"min_groups": 1}},
        {"kind": "harness"},
    ]
    top = {"coevolver": members, "rewards": [{"function": "rubric"}]}  # members in this order
    merge = {
        "problems": {"source": "constraints"},
        "policy": {"shape": {"max_position": 128}},
        "sampling": {"max_new_tokens": 16},
    }
    train_flow(_params(tmp_path, "reference", top, merge)[0])
    reference = RunLayout(tmp_path / "reference" / "run")
    params, overrides = _params(tmp_path, "killed", top, merge)
    _kill_at_pause(_run(params, "coevolve:2"), "coevolve:2")
    layout = RunLayout(tmp_path / "killed" / "run")
    done = {k: v for k, v in _stage_outputs(layout).items() if k not in INTERRUPTED["coevolve:2"]}
    first = {"0-curriculum/state.json", "1-skill_bank/skills.jsonl", "2-rubrics/rubric.json", "3-harness/harness.json"}
    assert {f"coevolver/iter_0001/{member}" for member in first} <= set(done)
    assert not layout.coevolver(2).exists()  # killed between iteration 2's report and its versions

    _resume_restoring(params, layout, done)
    for it in range(ITERATIONS + 1):  # every version of every member, bit for bit (content hashes)
        assert read_manifest(layout.coevolver(it))["members"] == read_manifest(reference.coevolver(it))["members"]
    record = read_record(layout.checkpoint(ITERATIONS))["coevolver"]
    assert [(m["kind"], m["content_hash"]) for m in record["members"]] == [
        (m["kind"], m["content_hash"]) for m in read_manifest(layout.coevolver(ITERATIONS))["members"]
    ]
    assert [m["kind"] for m in record["members"]] == [m["kind"] for m in members]
    reports = [
        json.loads((layout.root / "reports" / f"iter_{it:04d}.json").read_text()) for it in range(1, ITERATIONS + 1)
    ]
    assert any(member_reports(report)[2]["retired"] for report in reports)  # the writer replaced a criterion
    client = mlflow.MlflowClient(overrides["tracking"]["mlflow_uri"])
    (run,) = client.search_runs([client.get_experiment_by_name("resume").experiment_id])
    for arm in member_reports(reports[-1])[0]["arms"]:  # the curriculum's value curves, one per category
        curve = client.get_metric_history(run.info.run_id, f"curriculum/value/{arm['category']}")
        assert {m.step: m.value for m in curve}[ITERATIONS] == pytest.approx(arm["value"])
    judged = sorted((layout.root / "judge" / "cache.jsonl").read_text().splitlines())
    assert judged == sorted((reference.root / "judge" / "cache.jsonl").read_text().splitlines())
    assert verify_lineage(layout.checkpoint(ITERATIONS)) == []
    final = load_file(layout.checkpoint(ITERATIONS) / "model.safetensors")
    expected = load_file(reference.checkpoint(ITERATIONS) / "model.safetensors")
    assert all(torch.equal(final[k], expected[k]) for k in expected)
