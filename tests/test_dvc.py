"""dvc.yaml end to end in a temporary git repository: repro, push to a local remote, pull in a clone."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import yaml
from prefect.settings import PREFECT_API_URL

from .conftest import ROOT, TINY, TINY_PARAMS

OUT, DATA = "runs/tiny", "data/tiny"
MODEL = "models/smollm2-135m-instruct"  # the import-model stage's output (params.yaml's policy.checkpoint)
# Settings the train stage reads that an explicit params list once missed (dvc.yaml): each changed
# after a repro must make `dvc status` report the stage changed.
TRAIN_READS = {
    "prompt.instruction.math": "Answer with digits.",
    "coevolver": [{"kind": "curriculum"}, {"kind": "skill_bank"}],
    "policy.lora.rank": 8,
    "pipeline.shards": 2,
    "seed": 1,
}


def _sh(*args: str, cwd: Path, env: dict | None = None) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "project"
    repo.mkdir()
    # The project's dvc.yaml for the tiny policy, which imports no model: without the import-model stage
    # (the default run's SmolLM2) and the bootstrap's dependency on its output.
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    del stages["stages"]["import-model"]
    stages["stages"]["bootstrap"]["deps"].remove(MODEL)
    (repo / "dvc.yaml").write_text(yaml.safe_dump(stages, sort_keys=False))
    raw = yaml.safe_load(TINY_PARAMS.read_text())
    for section, values in TINY.items():
        raw[section].update(values)
    raw["tracking"]["mlflow_uri"] = "sqlite:///mlflow.db"
    raw["run"]["out_dir"], raw["problems"]["data_dir"] = OUT, DATA  # not the defaults: dvc.yaml's paths follow params
    (repo / "params.yaml").write_text(yaml.safe_dump(raw))
    (repo / ".gitignore").write_text("mlflow.db\n")
    _sh("git", "init", "-q", cwd=repo)
    _sh("git", "config", "user.email", "ci@coevo", cwd=repo)
    _sh("git", "config", "user.name", "ci", cwd=repo)
    return repo


def _repro_killed_at(dvc: str, repo: Path, env: dict, pause: str) -> None:
    """`dvc repro` with the flow paused at `pause` (coevo/faults.py), then SIGKILLed with its stage."""
    log = (repo.parent / "killed-repro.log").open("w")
    process = subprocess.Popen(
        [dvc, "repro"],
        cwd=repo,
        env={**env, "COEVO_PAUSE": f"{pause}:300"},
        stdout=log,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    for line in process.stderr:
        if line.strip() == f"coevo-pause {pause.replace(':', ' ')}":
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return
    raise AssertionError(f"dvc repro ended (exit {process.wait()}) without reaching {pause}")


def _stamps(repo: Path, paths: tuple[str, ...]) -> dict:
    return {p: ((repo / p).stat().st_ino, (repo / p).stat().st_mtime_ns) for p in paths}


def test_killed_repro_continues_on_the_next_repro_then_push_and_pull_in_a_fresh_clone(prefect_server, tmp_path):
    """The project's own dvc.yaml and .dvc/config: a `dvc repro` killed in iteration 2's policy update,
    then `dvc repro` again continues the run (train's outputs `persist`; the flow restores iteration 1
    from its task results instead of recomputing it), then push, a fresh clone, pull."""
    dvc = str(Path(sys.executable).with_name("dvc"))
    env = {
        **os.environ,
        "PREFECT_API_URL": PREFECT_API_URL.value(),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    env.pop("COEVO_PAUSE", None)
    repo = _repo(tmp_path)
    _sh(dvc, "init", "-q", cwd=repo)
    shutil.copy(ROOT / ".dvc" / "config", repo / ".dvc" / "config")  # the default remote as shipped
    _repro_killed_at(dvc, repo, env, "update:2")
    # what iteration 1's tasks wrote (a re-run task writes under a temporary name and renames: new inode);
    # not the checkpoint's weights, which DVC's "unprotect" of a persisted output replaces by a copy of
    # the same bytes (a new inode) before the stage runs again
    first = _stamps(
        repo,
        tuple(
            f"{OUT}/{p}"
            for p in (
                "rollouts/iter_0001.parquet",
                "rewards/iter_0001.parquet",
                "reports/iter_0001.json",
                "checkpoints/iter_0001/coevo.json",
            )
        ),
    )
    assert not (repo / f"{OUT}/checkpoints/iter_0002").exists()
    _sh(dvc, "repro", cwd=repo, env=env)
    assert _stamps(repo, tuple(first)) == first  # iteration 1 restored, not written again

    lock = yaml.safe_load((repo / "dvc.lock").read_text())
    assert set(lock["stages"]) == {"prepare", "bootstrap", "train", "evaluate"}
    summary = json.loads((repo / f"{OUT}/summary.json").read_text())
    assert summary["iterations"] == TINY["run"]["iterations"]
    assert "eval/acc" in json.loads((repo / f"{OUT}/eval.json").read_text())["metrics"]
    assert "up to date" in _sh(dvc, "status", cwd=repo, env=env).lower()
    _assert_train_stage_tracks(dvc, repo, env)
    data_md5 = next(out["md5"] for out in lock["stages"]["prepare"]["outs"] if out["path"] == DATA)
    lineage = json.loads((repo / f"{OUT}/checkpoints/iter_0002/coevo.json").read_text())["lineage"]
    assert lineage["data"]["dvc_md5"] == data_md5  # lineage names the data by its DVC hash
    _assert_mlflow_dataset_digest_is(repo / "mlflow.db", data_md5)

    _sh("git", "add", "-A", cwd=repo)
    _sh("git", "commit", "-qm", "pipeline", cwd=repo)
    _sh(dvc, "push", "-q", cwd=repo, env=env)
    clone = tmp_path / "clone"
    _sh("git", "clone", "-q", str(repo), str(clone), cwd=tmp_path)
    _sh(dvc, "pull", "-q", cwd=clone, env=env)
    for path in (
        f"{DATA}/train.parquet",
        f"{OUT}/bootstrap/model.safetensors",
        f"{OUT}/coevolver/iter_0002/manifest.json",
    ):
        assert (clone / path).read_bytes() == (repo / path).read_bytes()
    assert "up to date" in _sh(dvc, "status", cwd=clone, env=env).lower()


def _assert_train_stage_tracks(dvc: str, repo: Path, env: dict) -> None:
    """Each setting of TRAIN_READS, changed in params.yaml after a repro, makes `dvc status` report the
    train stage's params changed; params.yaml is restored after each."""
    original = (repo / "params.yaml").read_text()
    for dotted, value in TRAIN_READS.items():
        raw = yaml.safe_load(original)
        *parents, leaf = dotted.split(".")
        node = raw
        for key in parents:
            node = node[key]
        node[leaf] = value
        (repo / "params.yaml").write_text(yaml.safe_dump(raw))
        status = json.loads(_sh(dvc, "status", "--json", "train", cwd=repo, env=env))
        # e.g. {"train": [{"changed deps": {"params.yaml": {"prompt": "modified"}}}]}
        changed = {
            key
            for entry in status.get("train", [])
            if isinstance(entry, dict)
            for group in entry.values()
            for key in group.get("params.yaml", {})
        }
        assert dotted.split(".")[0] in changed, (
            f"dvc status does not see {dotted} changed for the train stage: {status}"
        )
    (repo / "params.yaml").write_text(original)


def _assert_mlflow_dataset_digest_is(db: Path, data_md5: str) -> None:
    """docs/pipeline.md (MLflow): the problem data is an MLflow dataset input whose digest is its DVC hash (here, the
    hash `dvc repro` itself wrote into dvc.lock), for both splits of the flow's one run."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert len(runs) == 1
    inputs = runs[0].inputs.dataset_inputs
    assert sorted(i.dataset.name for i in inputs) == ["problems", "problems-test"]
    assert {i.dataset.digest for i in inputs} == {data_md5}


def test_dvc_dir_hash_matches_what_dvc_records(tmp_path):
    from coevo.tracking.dvc import dvc_dir_md5

    repo = _repo(tmp_path)
    _sh(str(Path(sys.executable).with_name("dvc")), "init", "-q", cwd=repo)
    data = repo / "mydata"  # not a dvc.yaml output, so `dvc add` may track it
    data.mkdir(parents=True)
    (data / "train.parquet").write_bytes(b"train rows")
    (data / "nested").mkdir()
    (data / "nested" / "test.parquet").write_bytes(b"test rows")
    _sh(str(Path(sys.executable).with_name("dvc")), "add", "-q", "mydata", cwd=repo)
    recorded = yaml.safe_load((repo / "mydata.dvc").read_text())["outs"][0]["md5"]
    assert dvc_dir_md5(data) == recorded


def test_the_imported_model_is_the_one_params_yaml_trains():
    """dvc.yaml's import-model stage and the Makefile's `train` prerequisite write the directory
    params.yaml's policy.checkpoint names, and the bootstrap stage depends on it."""
    from coevo.config import load_config

    checkpoint = load_config(ROOT / "params.yaml").policy.checkpoint
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    assert str(checkpoint) == MODEL
    assert stages["import-model"]["cmd"].endswith(f"--out {MODEL}")
    assert [next(iter(out)) for out in stages["import-model"]["outs"]] == [MODEL]
    assert MODEL in stages["bootstrap"]["deps"]
    assert f"MODEL := {MODEL}\n" in (ROOT / "Makefile").read_text()
