"""No checkpoint shares a mutable file with another or with the user's model, and no checkpoint vouches
for bytes nobody checked (coevo/model/checkpoint.py, coevo/io.py `clone_file`).

The reproductions of issue 44: with hard links, one in-place write into the newest checkpoint rewrote
every older one and the user's model; a child of a damaged parent recorded the parent's hashes for
bytes that no longer had them. Runs use `policy.frozen`, so every update takes no optimizer step and
each checkpoint is made from its parent's files (`unchanged_from`): the path that used to link them.
"""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path

import pytest

from coevo.driver import train
from coevo.io import hash_file
from coevo.layout import RunLayout
from coevo.model.checkpoint import (
    META,
    TRAINER_STATE,
    WEIGHTS,
    DamagedCheckpointError,
    damaged_files,
    load_policy,
    read_meta,
    save_checkpoint,
)
from coevo.stages.resume import latest_complete
from coevo.store.lineage import verify_lineage
from tests.conftest import TINY_PARAMS, tiny_config

FROZEN = {"frozen": True}  # no optimizer step: every checkpoint is made from its parent's files


def hashes(directory: Path) -> dict[str, str]:
    return {p.name: hash_file(p) for p in sorted(directory.iterdir()) if p.is_file()}


def quietly(cfg, **kwargs) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return train(cfg, **kwargs)


@pytest.fixture(scope="module")
def user_run(tmp_path_factory, tiny_policy_dir):
    """A 3-iteration frozen run bootstrapped from a user's model directory (a copy of the tiny policy)."""
    tmp = tmp_path_factory.mktemp("user_run")
    user = tmp / "user"
    shutil.copytree(tiny_policy_dir, user)
    cfg = tiny_config(tmp, policy={"checkpoint": str(user), **FROZEN}, run={"iterations": 3})
    quietly(cfg)
    return cfg, user


def test_in_place_write_into_the_newest_checkpoint_leaves_older_ones_and_the_users_model_intact(user_run):
    """`load_policy(newest).model.save_pretrained(newest)` (and the tokenizer's, and a byte write into
    its weights) rewrites the newest checkpoint's files in place: every older checkpoint and the
    user's model keep their bytes, and lineage --verify passes on each of them."""
    cfg, user = user_run
    layout = RunLayout(cfg.run.out_dir)
    assert all(read_meta(layout.checkpoint(k)).get("unchanged_from") for k in (1, 2, 3))
    user_before = hashes(user)
    before = {k: hashes(layout.checkpoint(k)) for k in (0, 1, 2)}
    newest = layout.checkpoint(3)
    policy = load_policy(newest, "cpu")
    policy.model.config.note = "edited in place"  # config.json's bytes change
    policy.model.save_pretrained(newest)
    policy.tokenizer.padding_side = "left"
    policy.tokenizer.save_pretrained(newest)
    with (newest / WEIGHTS).open("r+b") as fh:  # in place: the same inode
        fh.seek(-1, os.SEEK_END)
        fh.write(b"\x01")
    with (newest / TRAINER_STATE).open("r+b") as fh:
        fh.write(b"\x00")
    assert hashes(user) == user_before
    assert {k: hashes(layout.checkpoint(k)) for k in (0, 1, 2)} == before
    for k in (0, 1, 2):
        assert verify_lineage(layout.checkpoint(k)) == [], k
    damaged = {Path(m.path).name for m in verify_lineage(newest) if m.what == "checkpoint file"}
    assert {"config.json", WEIGHTS} <= damaged and all(Path(m.path).parent == newest for m in verify_lineage(newest))
    boot = layout.checkpoint(0)
    with (boot / WEIGHTS).open("r+b") as fh:  # and a write into checkpoint 0 never reaches the user's file
        fh.write(b"\x00")
    assert hashes(user) == user_before


def test_a_damaged_parent_is_named_and_never_copied_forward(tmp_path, tiny_policy_dir):
    """A child made from a parent whose config.json was written into in place: the save fails naming
    the parent's file, and nothing is written under the child's name."""
    parent = tmp_path / "parent"
    shutil.copytree(tiny_policy_dir, parent)
    policy = load_policy(parent, "cpu")
    (parent / "config.json").write_text((parent / "config.json").read_text().replace("}", ', "x": 1}', 1))
    child = tmp_path / "child"
    with pytest.raises(DamagedCheckpointError, match=r"parent: config\.json no longer has the sha256") as caught:
        save_checkpoint(child, policy, {"iteration": 1}, unchanged_from=parent)
    assert caught.value.damaged == ["config.json"] and not child.exists()
    assert not list(tmp_path.glob(".child.*"))  # its temporary directory is gone too


def test_a_damaged_bootstrap_is_made_again_and_no_child_vouches_for_it(tmp_path):
    """config.json of checkpoint 0 written into in place after a run: `--continue` names the damage
    (a warning), makes checkpoint 0 again, and every new checkpoint's files have the sha256 its
    coevo.json records (the child never copies the parent's recorded hashes for unchecked bytes)."""
    cfg = tiny_config(tmp_path, policy=FROZEN, run={"iterations": 1})
    quietly(cfg)
    layout = RunLayout(cfg.run.out_dir)
    shutil.rmtree(layout.checkpoint(1))  # the resume must restart from the bootstrap
    config = layout.checkpoint(0) / "config.json"
    config.write_text(config.read_text().replace("}", ', "x": 1}', 1))
    with pytest.warns(UserWarning, match=r"bootstrap: config\.json no longer has the sha256 .* making it again"):
        train(cfg, continue_latest=True)
    assert damaged_files(layout.checkpoint(0)) == [] and damaged_files(layout.checkpoint(1)) == []
    assert verify_lineage(layout.checkpoint(1)) == []


def test_resume_checks_the_bootstrap_like_every_checkpoint(tmp_path):
    """Every later checkpoint unusable and checkpoint 0 damaged: `latest_complete` names it rather
    than restarting a run from it."""
    cfg = tiny_config(tmp_path, policy=FROZEN, run={"iterations": 1})
    quietly(cfg)
    layout = RunLayout(cfg.run.out_dir)
    (layout.checkpoint(1) / TRAINER_STATE).unlink()
    with (layout.checkpoint(0) / "tokenizer_config.json").open("a") as fh:
        fh.write(" ")
    with pytest.raises(DamagedCheckpointError, match=r"bootstrap: tokenizer_config\.json no longer has"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            latest_complete(cfg)


def test_orphan_temporary_directories_are_removed_at_the_next_start(tmp_path):
    """What a SIGKILLed writer leaves (`.iter_NNNN.XXXXXXXX.tmp` holding a checkpoint's files, the
    `.NAME.old` aside of a directory being replaced) is removed when the run next starts, and named."""
    cfg = tiny_config(tmp_path, policy=FROZEN, run={"iterations": 1})
    quietly(cfg)
    layout = RunLayout(cfg.run.out_dir)
    orphans = [
        layout.checkpoint(1).parent / ".iter_0002.k1ll3d00.tmp",
        layout.coevolver(1).parent / ".iter_0002.k1ll3d00.tmp",
        layout.root / ".bootstrap.old",
    ]
    for orphan in orphans:
        orphan.mkdir()
        (orphan / META).write_text("{}")
    with pytest.warns(UserWarning, match=r"removed 3 temporary directories a killed writer left") as caught:
        train(cfg, continue_latest=True)
    said = " ".join(str(w.message) for w in caught)
    assert all(str(orphan) in said and not orphan.exists() for orphan in orphans)


def test_a_writer_sigkilled_mid_checkpoint_leaves_a_temporary_directory_the_next_start_removes(tmp_path):
    """A real kill: `coevo train --plain` SIGKILLed while checkpoint 1's files sit in their temporary
    directory (coevo/faults.py "write" point); nothing is published under iter_0001, and the next
    `--continue` removes the orphan, naming it, before it trains iteration 1 again."""
    import signal
    import subprocess
    import sys

    import yaml

    from tests.conftest import TINY

    raw = yaml.safe_load(TINY_PARAMS.read_text())
    for section, values in {**TINY, "run": {**TINY["run"], "iterations": 1}}.items():
        raw[section].update(values)
    raw["run"]["out_dir"], raw["problems"]["data_dir"] = str(tmp_path / "run"), str(tmp_path / "data")
    raw["tracking"]["mlflow_uri"] = f"sqlite:///{tmp_path / 'mlflow.db'}"
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(raw))
    env = {k: v for k, v in os.environ.items() if k != "COEVO_PAUSE"} | {
        "COEVO_PAUSE": "write:checkpoints/iter_0001:300"
    }
    command = [sys.executable, "-m", "coevo.cli", "train", "--plain", "--params", str(params), "--json"]
    process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True)
    for line in process.stderr:
        if line.strip() == "coevo-pause write checkpoints/iter_0001":
            os.killpg(process.pid, signal.SIGKILL)
            break
    process.wait()
    checkpoints = tmp_path / "run" / "checkpoints"
    orphans = list(checkpoints.glob(".iter_0001.*.tmp"))
    assert len(orphans) == 1 and (orphans[0] / WEIGHTS).is_file() and not (checkpoints / "iter_0001").exists()
    cfg = tiny_config(tmp_path, run={"iterations": 1}, tracking={"mlflow_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"})
    with pytest.warns(UserWarning, match=r"removed 1 temporary directory a killed writer left") as caught:
        train(cfg, continue_latest=True)
    assert any(str(orphans[0]) in str(w.message) for w in caught)
    assert not orphans[0].exists() and verify_lineage(checkpoints / "iter_0001") == []


def test_the_flow_remakes_a_damaged_bootstrap_its_cache_points_at(prefect_server, tmp_path):
    """The Prefect flow run again over a run whose checkpoint 0 was written into: its cached bootstrap
    result is not trusted (the task runs again and remakes it), so the run restarts from intact bytes."""
    import yaml

    from flows.train import train_flow
    from tests.conftest import TINY

    raw = yaml.safe_load(TINY_PARAMS.read_text())
    for section, values in {**TINY, "run": {**TINY["run"], "iterations": 1}}.items():
        raw[section].update(values)
    raw["policy"].update(FROZEN)
    raw["run"]["out_dir"], raw["problems"]["data_dir"] = str(tmp_path / "run"), str(tmp_path / "data")
    raw["tracking"]["mlflow_uri"] = f"sqlite:///{tmp_path / 'mlflow.db'}"
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(raw))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        train_flow(str(params))
        layout = RunLayout(tmp_path / "run")
        config = layout.checkpoint(0) / "config.json"
        config.write_text(config.read_text().replace("}", ', "x": 1}', 1))
        train_flow(str(params), continue_latest=True)  # iteration 2, from checkpoint 1
    assert damaged_files(layout.checkpoint(0)) == [] and verify_lineage(layout.checkpoint(2)) == []
