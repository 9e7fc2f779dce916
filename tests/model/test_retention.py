"""Checkpoint retention (run.retention): the keep rules, pruning to metadata, lineage through pruned
checkpoints, clear errors on loading one, and a flow resume past a pruned checkpoint that ends bit-identical.
Co-evolver versions are pruned with their checkpoints (manifest kept, same marker)."""

from __future__ import annotations

import json

import pytest
from safetensors.torch import load_file

from coevo.coevolvers.base import MANIFEST, PrunedCoevolverError, content_hash, load_coevolver, read_manifest
from coevo.config import ConfigError
from coevo.driver import train
from coevo.io import hash_file
from coevo.layout import RunLayout
from coevo.model.cache import cached_policy
from coevo.model.checkpoint import (
    PRUNED,
    TRAINER_STATE,
    WEIGHTS,
    PrunedCheckpointError,
    load_optimizer_state,
    load_policy,
    read_meta,
)
from coevo.model.retention import disk_bound_checkpoints, keep_set, prune_checkpoint, prune_coevolver
from coevo.stages.resume import latest_complete
from coevo.stages.retain import retain_stage
from coevo.store.lineage import lineage_chain, verify_lineage
from tests.conftest import tiny_config

# ---- the keep rules (a pure function over iteration numbers and accuracies) ----


def test_keep_last_every_and_the_bootstrap():
    its = list(range(0, 11))  # bootstrap + iterations 1..10
    assert keep_set(its, {}, keep_last=2, keep_every=4, keep_best=False) == {0, 4, 8, 9, 10}
    assert keep_set(its, {}, keep_last=1, keep_every=50, keep_best=False) == {0, 10}
    assert keep_set(its, {}, keep_last=None, keep_every=50, keep_best=False) == set(its)  # retention off


def test_keep_best_takes_the_earliest_of_equal_accuracies():
    its = list(range(0, 7))
    accs = {0: 0.1, 2: 0.5, 3: 0.4, 5: 0.5, 6: 0.2}
    assert keep_set(its, accs, keep_last=1, keep_every=50, keep_best=True) == {0, 2, 6}
    assert keep_set(its, accs, keep_last=1, keep_every=50, keep_best=False) == {0, 6}
    assert keep_set(its, {0: 0.9, 4: 0.1}, keep_last=1, keep_every=50, keep_best=True) == {
        0,
        6,
    }  # the bootstrap was best: kept anyway


def test_rules_are_monotone_so_replaying_an_earlier_retain_is_safe():
    """What the rules prune at iteration j (among 1..j) they also prune at every later iteration."""
    accs = {it: (it * 7 % 5) / 5 for it in range(0, 31)}
    for j in range(1, 31):
        at_j = set(range(j + 1)) - keep_set(list(range(j + 1)), {k: a for k, a in accs.items() if k <= j}, 2, 6, True)
        at_end = set(range(31)) - keep_set(list(range(31)), accs, 2, 6, True)
        assert at_j <= at_end, j


def test_disk_bound_counts():
    assert disk_bound_checkpoints(300, keep_last=2, keep_every=50, keep_best=True) == 2 + 6 + 1 + 1
    assert disk_bound_checkpoints(7, keep_last=1, keep_every=50, keep_best=False) == 1 + 1 + 0 + 1


@pytest.mark.parametrize(
    ("retention", "key"),
    [
        ({"keep_last": -1}, "keep_last"),
        ({"keep_last": 0}, "keep_last"),
        ({"keep_every": 0}, "keep_every"),
        ({"keep_bset": True}, "keep_bset"),
    ],
)
def test_bad_retention_params_name_the_key(tmp_path, retention, key):
    with pytest.raises(ConfigError, match=rf"run\.retention\.{key}"):
        tiny_config(tmp_path, run={"retention": retention})
    with pytest.raises(ValueError, match="keep_last must be >= 1"):
        keep_set([0, 1], {}, keep_last=0, keep_every=1, keep_best=False)


# ---- a real tiny run with retention ----


@pytest.fixture(scope="module")
def pruned_run(tmp_path_factory):
    """The plain driver, 4 iterations, keep_last 1, keep_every 3, keep_best on (evaluated every iteration)."""
    cfg = tiny_config(
        tmp_path_factory.mktemp("retained"),
        run={"iterations": 4, "retention": {"keep_last": 1, "keep_every": 3, "keep_best": True}},
    )
    train(cfg)
    return cfg, RunLayout(cfg.run.out_dir)


def test_pruning_leaves_metadata_and_a_marker(pruned_run):
    cfg, layout = pruned_run
    evals = {it: json.loads(layout.evals(it).read_text()) for it in range(0, 5)}
    accs = {it: e["metrics"]["val/acc"] for it, e in evals.items()}  # keep_best reads validation, never test
    best = min((it for it in accs if accs[it] == max(accs.values())))
    kept = {0, 3, 4, best}
    for it in range(1, 5):
        directory = layout.checkpoint(it)
        meta = read_meta(directory)
        assert meta["iteration"] == it and meta["lineage"]["iteration"] == it
        if it in kept:
            assert (directory / WEIGHTS).is_file() and not (directory / PRUNED).exists()
        else:
            marker = json.loads((directory / PRUNED).read_text())
            assert not (directory / WEIGHTS).exists() and not (directory / TRAINER_STATE).exists()
            assert marker["files"][WEIGHTS] == meta["weights_sha256"] == meta["files"][WEIGHTS]
            assert (directory / "config.json").is_file()  # small metadata stays
            assert (
                not (directory / "tokenizer.json").exists()
                and marker["files"]["tokenizer.json"] == meta["files"]["tokenizer.json"]
            )  # the vocabulary goes
    assert (layout.checkpoint(4) / TRAINER_STATE).is_file()  # the newest keeps what a resume needs
    assert (layout.checkpoint(0) / WEIGHTS).is_file()
    assert retain_stage(cfg, 4).pruned == ()  # idempotent: nothing left to prune
    with pytest.raises(ValueError, match="never pruned"):
        prune_checkpoint(layout.checkpoint(0), 0)


def test_lineage_walks_through_pruned_checkpoints_and_verifies(pruned_run):
    _, layout = pruned_run
    chain = lineage_chain(layout.checkpoint(4))
    assert [entry["lineage"]["iteration"] for entry in chain] == [4, 3, 2, 1, 0]
    assert [entry["pruned"] for entry in chain] == [
        not (layout.checkpoint(it) / WEIGHTS).is_file() for it in (4, 3, 2, 1, 0)
    ]
    assert any(entry["pruned"] for entry in chain)
    assert verify_lineage(layout.checkpoint(4)) == []


def test_verify_still_catches_tampering(pruned_run, tmp_path):
    import shutil

    _, layout = pruned_run
    copy = tmp_path / "run"
    shutil.copytree(layout.root, copy, ignore=shutil.ignore_patterns(".prefect-results"))
    tampered = RunLayout(copy)
    weights = tampered.checkpoint(3) / WEIGHTS  # kept (every 3rd)
    weights.write_bytes(weights.read_bytes()[:-4] + b"\0\0\0\0")
    pruned = next(it for it in (1, 2) if (tampered.checkpoint(it) / PRUNED).is_file())
    marker = json.loads((tampered.checkpoint(pruned) / PRUNED).read_text())
    marker["files"][WEIGHTS] = "0" * 64  # a marker that does not match what coevo.json recorded
    (tampered.checkpoint(pruned) / PRUNED).write_text(json.dumps(marker))
    found = {(m.what, m.path) for m in verify_lineage(tampered.checkpoint(4))}
    assert ("checkpoint file", str(weights)) in found
    assert ("pruned file", str(tampered.checkpoint(pruned) / WEIGHTS)) in found
    assert ("parent link", str(tampered.checkpoint(3))) in found  # checkpoint 4's parent weights changed


def test_loading_a_pruned_checkpoint_is_a_clear_error(pruned_run):
    cfg, layout = pruned_run
    pruned = next(it for it in (1, 2) if (layout.checkpoint(it) / PRUNED).is_file())
    directory = layout.checkpoint(pruned)
    for load in (
        lambda: load_policy(directory),
        lambda: cached_policy(directory, cfg),
        lambda: load_optimizer_state(directory, None),
    ):
        with pytest.raises(
            PrunedCheckpointError, match=rf"{directory}: its weights were pruned by checkpoint retention"
        ):
            load()


def test_latest_complete_skips_pruned_checkpoints(tmp_path):
    cfg = tiny_config(tmp_path, run={"iterations": 3, "retention": {"keep_last": 2, "keep_best": False}})
    train(cfg)
    layout = RunLayout(cfg.run.out_dir)
    assert latest_complete(cfg) == 3 and (layout.checkpoint(1) / PRUNED).is_file()
    prune_checkpoint(layout.checkpoint(3), 3)
    assert latest_complete(cfg) == 2
    prune_checkpoint(layout.checkpoint(2), 2)
    assert latest_complete(cfg) == 0  # the bootstrap


# ---- resume past a pruned checkpoint (the Prefect flow), bit-identical ----


def test_flow_resume_retrains_after_the_newest_kept_checkpoint_bit_identically(prefect_server, tmp_path):
    """A finished 4-iteration flow run loses checkpoint 4's weights; the same command again restores
    iterations 1-3 from the cache (their checkpoints pruned or kept), re-runs the update of iteration 4
    from checkpoint 3 instead of trusting its cached result, and writes the same weights."""
    from flows.train import train_flow

    cfg, params = _flow_run(tmp_path, iterations=4, keep_last=2, experiment="retention")
    layout = RunLayout(cfg.run.out_dir)
    assert [(layout.checkpoint(it) / PRUNED).is_file() for it in (1, 2, 3, 4)] == [True, True, False, False]
    expected = load_file(layout.checkpoint(4) / WEIGHTS)
    recorded = hash_file(layout.checkpoint(4) / WEIGHTS)
    prune_checkpoint(layout.checkpoint(4), 4)

    train_flow(str(params))
    assert hash_file(layout.checkpoint(4) / WEIGHTS) == recorded
    final = load_file(layout.checkpoint(4) / WEIGHTS)
    assert all((final[k] == expected[k]).all() for k in expected)
    assert not (layout.checkpoint(4) / PRUNED).exists()
    assert verify_lineage(layout.checkpoint(4)) == []


def test_coevo_eval_of_a_pruned_checkpoint_exits_cleanly_naming_it(pruned_run, tmp_path):
    from typer.testing import CliRunner

    from coevo.cli import app

    cfg, layout = pruned_run
    pruned = next(it for it in (1, 2) if (layout.checkpoint(it) / PRUNED).is_file())
    params = tmp_path / "params.yaml"
    params.write_text(json.dumps(cfg.model_dump(mode="json")))
    result = CliRunner().invoke(app, ["eval", str(layout.checkpoint(pruned)), "--params", str(params)])
    assert result.exit_code == 2
    assert "pruned by checkpoint retention" in result.output and f"iter_{pruned:04d}" in result.output


def test_coevo_lineage_shows_pruned_weights_and_verifies(pruned_run):
    from typer.testing import CliRunner

    from coevo.cli import app

    _, layout = pruned_run
    result = CliRunner().invoke(app, ["lineage", str(layout.checkpoint(4)), "--verify"])
    assert result.exit_code == 0, result.output
    assert "weights pruned by retention" in result.output and "every hash matches" in result.output


# ---- co-evolver versions go with their checkpoints ----


def test_coevolver_versions_are_pruned_with_their_checkpoints(pruned_run):
    cfg, layout = pruned_run
    for it in range(0, 5):
        version, manifest = layout.coevolver(it), read_manifest(layout.coevolver(it))
        present = {p.relative_to(version).as_posix() for p in version.rglob("*") if p.is_file()}
        if (layout.checkpoint(it) / PRUNED).is_file():
            assert present == {MANIFEST, PRUNED}, it
            assert json.loads((version / PRUNED).read_text())["files"] == manifest["files"]
            with pytest.raises(
                PrunedCoevolverError, match=rf"{version}: this co-evolver version's files were pruned by retention"
            ):
                load_coevolver(version, cfg.coevolver_list[0], cfg.seed)
        else:  # the bootstrap's version and those of kept checkpoints stay whole and loadable
            assert present == {MANIFEST, *manifest["files"]}, it
            load_coevolver(version, cfg.coevolver_list[0], cfg.seed)
    assert any((layout.coevolver(it) / PRUNED).is_file() for it in (1, 2))
    assert retain_stage(cfg, 4).coevolver_pruned == ()  # idempotent
    with pytest.raises(ValueError, match="never pruned"):
        prune_coevolver(layout.coevolver(0), 0)


def test_prune_coevolver_deletes_listed_files_at_any_depth(tmp_path):
    """A list of co-evolvers saves each member in a subdirectory: every listed file goes, and the
    subdirectories it empties; a crash after the marker is finished by the next call."""
    version = tmp_path / "iter_0003"
    files = {"0-curriculum/values.json": b"[1, 2]", "1-skill_bank/deep/skills.json": b"{}", "top.json": b"1"}
    for name, data in files.items():
        (version / name).parent.mkdir(parents=True, exist_ok=True)
        (version / name).write_bytes(data)
    (version / "1-skill_bank" / "notes.txt").write_text("not listed")
    hashes = {name: hash_file(version / name) for name in files}
    (version / MANIFEST).write_text(
        json.dumps({"kind": "list", "format": 1, "files": hashes, "content_hash": content_hash(hashes)})
    )
    (version / "top.json").unlink()  # as if a kill came between the marker and the deletions ...
    (version / PRUNED).write_text(json.dumps({"iteration": 3, "files": {"top.json": hashes["top.json"]}}))
    assert prune_coevolver(version, 3) == ["0-curriculum/values.json", "1-skill_bank/deep/skills.json"]
    assert sorted(p.relative_to(version).as_posix() for p in version.rglob("*")) == [
        "1-skill_bank",
        "1-skill_bank/notes.txt",
        MANIFEST,
        PRUNED,
    ]
    assert json.loads((version / PRUNED).read_text())["files"] == hashes  # ... the marker lists all three
    assert prune_coevolver(version, 3) == []
    (version / MANIFEST).write_text(json.dumps({"kind": "list", "format": 1, "files": {"../outside.json": "0" * 64}}))
    with pytest.raises(ValueError, match=r"manifest.json: lists '../outside.json', not a file inside the version"):
        prune_coevolver(version, 3)


def test_verify_reports_pruned_coevolvers_as_pruned_and_catches_tampered_ones(pruned_run, tmp_path):
    import shutil

    _, layout = pruned_run
    chain = lineage_chain(layout.checkpoint(4))
    assert [entry["coevolver_pruned"] for entry in chain] == [
        (layout.coevolver(it) / PRUNED).is_file() for it in (4, 3, 2, 1, 0)
    ]
    assert any(entry["coevolver_pruned"] for entry in chain)
    copy = tmp_path / "run"
    shutil.copytree(layout.root, copy, ignore=shutil.ignore_patterns(".prefect-results"))
    tampered = RunLayout(copy)
    kept = tampered.coevolver(3)  # checkpoint 3 is kept (every 3rd): so is its co-evolver version
    name = sorted(read_manifest(kept)["files"])[0]
    (kept / name).write_bytes((kept / name).read_bytes() + b" ")
    pruned = next(it for it in (1, 2) if (tampered.coevolver(it) / PRUNED).is_file())
    marker = json.loads((tampered.coevolver(pruned) / PRUNED).read_text())
    first = sorted(marker["files"])[0]
    marker["files"][first] = "0" * 64  # a marker that does not match the manifest
    (tampered.coevolver(pruned) / PRUNED).write_text(json.dumps(marker))
    found = {(m.what, m.path) for m in verify_lineage(tampered.checkpoint(4))}
    assert {("co-evolver file", str(kept / name)), ("pruned file", str(tampered.coevolver(pruned) / first))} <= found
    assert {path.rsplit("/", 1)[0] for _, path in found} == {
        str(kept),
        str(tampered.coevolver(pruned)),
    }  # the other pruned versions pass


def test_coevo_lineage_shows_pruned_coevolver_versions(pruned_run):
    from typer.testing import CliRunner

    from coevo.cli import app

    _, layout = pruned_run
    result = CliRunner().invoke(app, ["lineage", str(layout.checkpoint(4)), "--verify"])
    assert result.exit_code == 0, result.output
    assert "(files pruned by retention)" in result.output


def test_flow_resume_past_pruned_coevolver_versions_remakes_them_bit_identically(prefect_server, tmp_path):
    """keep_last 1: checkpoints and co-evolver versions 1-2 are pruned; checkpoint 3's weights are then
    truncated, so the newest intact kept checkpoint is the bootstrap. The same flow again re-makes
    co-evolver versions 1-2 (their cached results point at pruned versions) and re-trains 1-3 from
    the bootstrap: the same versions and the same final weights."""
    from flows.train import train_flow

    cfg, params = _flow_run(tmp_path, iterations=3, keep_last=1, experiment="retention-coevolver")
    layout = RunLayout(cfg.run.out_dir)
    assert [(layout.coevolver(it) / PRUNED).is_file() for it in (0, 1, 2, 3)] == [False, True, True, False]
    versions = {it: read_manifest(layout.coevolver(it))["content_hash"] for it in (1, 2, 3)}
    recorded = hash_file(layout.checkpoint(3) / WEIGHTS)
    weights = layout.checkpoint(3) / WEIGHTS
    weights.write_bytes(weights.read_bytes()[:-8])  # truncated: not resumable from
    with pytest.warns(UserWarning, match="not resuming from it"):
        assert latest_complete(cfg) == 0

    train_flow(str(params))
    assert hash_file(layout.checkpoint(3) / WEIGHTS) == recorded
    for it in (1, 2):  # re-made whole (the cached retain does not prune them again until a later iteration)
        assert not (layout.coevolver(it) / PRUNED).exists()
        assert (
            load_coevolver(layout.coevolver(it), cfg.coevolver_list[0], cfg.seed).save(tmp_path / f"again{it}")
            == versions[it]
        )
    assert read_manifest(layout.coevolver(3))["content_hash"] == versions[3]
    assert verify_lineage(layout.checkpoint(3)) == []


def test_coevo_eval_with_a_pruned_coevolver_version_exits_cleanly_naming_it(pruned_run, tmp_path):
    from typer.testing import CliRunner

    from coevo.cli import app

    cfg, layout = pruned_run
    pruned = next(it for it in (1, 2) if (layout.coevolver(it) / PRUNED).is_file())
    params = tmp_path / "params.yaml"
    params.write_text(json.dumps(cfg.model_dump(mode="json")))
    result = CliRunner().invoke(
        app,
        ["eval", str(layout.checkpoint(4)), "--params", str(params), "--coevolver", str(layout.coevolver(pruned))],
        env={"COLUMNS": "400"},
    )
    assert result.exit_code == 2, result.output
    assert "files were pruned by retention" in result.output and f"coevolver/iter_{pruned:04d}" in result.output


def _flow_run(tmp_path, iterations: int, keep_last: int, experiment: str):
    """A finished flow run of `iterations` (checkpoint logged at the end) under retention keep_last;
    returns its config and the params file a resume re-runs."""
    from flows.train import train_flow

    overrides = {
        "run": {
            "iterations": iterations,
            "checkpoint_every": iterations,
            "out_dir": str(tmp_path / "run"),
            "retention": {"keep_last": keep_last, "keep_best": False},
        },
        "problems": {"data_dir": str(tmp_path / "data")},
        "tracking": {
            "mlflow_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
            "experiment": experiment,
            "model_name": "tiny",
        },
        "pipeline": {"retries": 0, "retry_delay_s": 0.1},
        "objective": {"drop_zero_variance": False},  # every group trained: the weights move each iteration
    }
    cfg = tiny_config(tmp_path, **overrides)
    params = tmp_path / "params.yaml"
    params.write_text(json.dumps(cfg.model_dump(mode="json")))  # JSON is YAML
    train_flow(str(params))
    return cfg, params


def test_keep_best_reads_validation_accuracy_not_test(tmp_path):
    from coevo.model.retention import read_evals

    scores = [(0.0, 0.0), (0.9, 0.1), (0.1, 0.6), (0.5, 0.2)]  # (eval/acc on test, val/acc) per iteration
    for it, (test_acc, val_acc) in enumerate(scores):
        record = {"iteration": it, "weights_sha256": f"w{it}", "metrics": {"eval/acc": test_acc, "val/acc": val_acc}}
        (tmp_path / f"iter_{it:04d}.json").write_text(json.dumps(record))
    accs = read_evals(tmp_path, [0, 1, 2, 3], {it: f"w{it}" for it in range(4)})
    assert accs == {it: val for it, (_, val) in enumerate(scores)}
    assert keep_set([0, 1, 2, 3], accs, keep_last=1, keep_every=100, keep_best=True) == {
        0,
        2,
        3,
    }  # best by validation (2), not by test (1)
