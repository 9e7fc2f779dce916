"""`coevo compare` refuses a bad spec with the spec file and line, before anything runs or is written."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from coevo.cli import app
from coevo.compare.results import finished_runs
from coevo.compare.runs import MARKER
from coevo.compare.spec import arm_config, identities, identity, load_spec
from coevo.io import hash_bytes

from ..conftest import ROOT, TINY_PARAMS, tiny_config

GOOD_ARMS = """arms:
  - name: grpo
    set: {coevolver.kind: none}
  - name: curriculum
    set: {coevolver.kind: curriculum}
"""


def _spec(body: str) -> str:
    return f"name: bad\nparams: {TINY_PARAMS}\n" + body


# (what is wrong, spec text, line the error must name, words it must say); line 1-2 are name/params
CASES = [
    (
        "unknown arm key",
        "seeds: [0]\niterations: 2\narms:\n  - name: a\n    sett: {coevolver.kind: none}\n",
        7,
        "unknown arm key 'sett'",
    ),
    ("unknown top key", "seeds: [0]\niterations: 2\nbudgte: 3\n" + GOOD_ARMS, 5, "unknown spec key 'budgte'"),
    ("empty seeds", "iterations: 2\nseeds: []\n" + GOOD_ARMS, 4, "no seeds"),
    ("missing seeds", "iterations: 2\n" + GOOD_ARMS, 1, "no seeds"),
    (
        "both budgets",
        "seeds: [0]\niterations: 2\ntrain_seconds: 30\nmax_iterations: 5\n" + GOOD_ARMS,
        5,
        "both budgets",
    ),
    ("neither budget", "seeds: [0]\n" + GOOD_ARMS, 1, "no budget"),
    (
        "override fails params validation",
        "seeds: [0, 1]\niterations: 2\narms:\n  - name: a\n    set:\n      coevolver.kind: none\n      optim.lr: -1\n",
        9,
        "optim.lr",
    ),
    (
        "override names no param",
        "seeds: [0]\niterations: 2\narms:\n  - name: a\n    set: {coevolver.kindd: none}\n",
        7,
        "coevolver.kindd",
    ),
    (
        "two arms with one name",
        "seeds: [0]\niterations: 2\narms:\n  - name: a\n  - name: b\n  - name: a\n",
        8,
        "two arms are named 'a'",
    ),
    (
        "override of what the comparison sets",
        "seeds: [0]\niterations: 2\narms:\n  - name: a\n    set: {run.out_dir: elsewhere}\n",
        7,
        "set by the comparison",
    ),
]


@pytest.mark.parametrize(("case", "body", "line", "words"), CASES, ids=[c[0] for c in CASES])
def test_bad_spec_names_file_and_line_and_writes_nothing(tmp_path, case, body, line, words):
    spec = tmp_path / "spec.yaml"
    spec.write_text(_spec(body))
    result = CliRunner().invoke(app, ["compare", str(spec), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert f"{spec}:{line}:" in text, text
    assert words in text, text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]  # no results directory, no MLflow store


def test_a_good_spec_reads_and_each_arm_gets_its_seed_and_directory(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(_spec("seeds: [3, 4]\niterations: 2\neval_every: 1\nset: {problems.n_test: 40}\n" + GOOD_ARMS))
    loaded = load_spec(spec)
    assert (loaded.name, loaded.seeds, loaded.reference, loaded.iterations) == ("bad", [3, 4], "grpo", 2)
    cfg = arm_config(loaded, loaded.arm("curriculum"), 4, tmp_path / "cell")
    assert (cfg.seed, cfg.run.out_dir, cfg.run.iterations, cfg.eval.every) == (4, tmp_path / "cell", 2, 1)
    assert (cfg.coevolver_list[0].kind, cfg.problems.n_test, cfg.problems.data_dir) == (
        "curriculum",
        40,
        tmp_path / "cell" / "data",
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]


@pytest.mark.parametrize("path", sorted((ROOT / "bench" / "specs").glob("*.yaml")), ids=lambda p: p.name)
def test_the_benchmark_specs_read_and_validate_every_arm(path, monkeypatch):
    monkeypatch.chdir(ROOT)  # their params paths are relative to the repository root
    spec = load_spec(path)
    assert spec.reference in [arm.name for arm in spec.arms]
    assert (spec.iterations is None) != (spec.train_seconds is None)  # one budget: equal iterations or equal seconds


@pytest.mark.parametrize("results", sorted((ROOT / "bench" / "results").glob("compare-*")), ids=lambda p: p.name)
def test_the_committed_results_still_enter_their_comparisons(results, monkeypatch):
    """Each committed arm run's identity is one its spec's arm gives now (runs finished before
    `coevolver` took lists and `eval.with_context` was named carry the earlier spelling's identity)."""
    monkeypatch.chdir(ROOT)
    name = json.loads((results / "table.json").read_text())["name"]
    spec = next(spec for spec in map(load_spec, sorted((ROOT / "bench" / "specs").glob("*.yaml"))) if spec.name == name)
    assert set(finished_runs(spec, [results])) == {
        (marker["arm"], marker["seed"])
        for marker in (json.loads(path.read_text()) for path in results.glob(f"runs/*/{MARKER}"))
    }


def _identity_without(cfg, *dotted: str, drop_below: bool = True) -> str:
    """The identity of `cfg`'s params with the `dotted` keys deleted, without rollout.dynamic_sampling,
    tools, environment, the roles' settings and the harness's turn limit (added last), with the removed
    code loop's settings and proposer.drop_below in place (0.05, as every run made before its removal held it;
    `drop_below=False`: a run made after it): what a run made before them carries."""
    params = cfg.model_dump(mode="json", exclude={"run": {"out_dir"}, "problems": {"data_dir"}, "tracking": True})
    if drop_below:
        params["coevolver"]["curriculum"]["proposer"]["drop_below"] = 0.05
    params["code"]["cure"]["bank_max_per_problem"] = 8  # the code loop's settings, removed with it
    params["code"] |= {"iterations": 20, "problems_per_iter": 8, "group_size": 8, "train_roles": ["coder", "tester"]}
    for key in (
        "rollout.dynamic_sampling",
        "tools",
        "environment",
        "problems.guess_levels",
        "bootstrap.tool_calls",
        "rollout.roles",
        "rollout.train_roles",
        "code.cure.truth",
        "prompt.instruction.tester",
        "coevolver.unit_tests",
        "coevolver.harness.turn_limit_share",
        "coevolver.harness.max_turns",
        *dotted,
    ):
        *parents, leaf = key.split(".")
        node = params
        for parent in parents:
            node = node[parent]
        del node[leaf]
    return hash_bytes(json.dumps(params, sort_keys=True).encode())


def test_a_setting_added_since_keeps_the_earlier_identity_only_where_it_computes_what_ran_before(tmp_path):
    """coevolver.harness.backtest_before came after runs were committed: a run without a harness, or with
    the earlier backtest (resample), still carries the identity of its params without the key (and
    without the keys added after it); a harness with the new default computes something else, and does not."""
    for coevolver, earlier in (
        ({"kind": "none"}, True),
        ({"kind": "harness", "harness": {"backtest_before": "resample"}}, True),
        ({"kind": "harness"}, False),
    ):
        cfg = tiny_config(tmp_path, coevolver=coevolver)
        without = _identity_without(cfg, "coevolver.harness.backtest_before", "problems.val_split")
        assert (without in identities(cfg)) is earlier, coevolver


def test_a_validation_split_keeps_the_earlier_identity_only_where_it_splits_as_runs_before_it_did(tmp_path):
    """problems.val_split came after runs were committed. A run that splits test first (after_test), or
    whose cells all hold both even shares (the tiny config: the two rules give the same quotas), still
    carries the identity without the key; the default on a mix whose 1-digit cells test would empty
    (the frontier's) splits otherwise, and does not."""
    frontier = {
        "families": ["add", "sub", "mul"],
        "min_digits": 1,
        "max_digits": 3,
        "n_train": 450,
        "n_test": 405,
        "n_val": 90,
    }
    for problems, earlier in (
        ({}, True),
        ({**frontier, "val_split": "after_test"}, True),
        (frontier, False),
    ):
        cfg = tiny_config(tmp_path, problems=problems)
        assert (_identity_without(cfg, "problems.val_split") in identities(cfg)) is earlier, problems


def test_a_removed_setting_is_read_from_earlier_runs_and_put_back_in_their_identity(tmp_path):
    """proposer.drop_below never changed a choice and was removed: params written with it still load
    (without it), and a run made before its removal, which held it, keeps its identity."""
    cfg = tiny_config(tmp_path, coevolver={"kind": "curriculum", "curriculum": {"proposer": {"drop_below": 0.05}}})
    assert "drop_below" not in cfg.model_dump()["coevolver"]["curriculum"]["proposer"]
    assert _identity_without(cfg) in identities(cfg)
    assert identity(cfg) in identities(cfg)
    assert _identity_without(cfg, drop_below=False) in identities(cfg)  # made after its removal, before sampling


def test_dynamic_sampling_keeps_the_earlier_identity_only_where_it_is_off(tmp_path):
    """rollout.dynamic_sampling came after runs were committed: off, a run carries the identity of its
    params without the key; on, it computes what no earlier run did."""
    for enabled in (False, True):
        cfg = tiny_config(tmp_path, rollout={"dynamic_sampling": {"enabled": enabled}})
        assert (_identity_without(cfg, drop_below=False) in identities(cfg)) is not enabled


def test_episodes_keep_the_earlier_identity_only_where_no_episode_runs(tmp_path):
    """tools and environment (and problems.guess_levels, bootstrap.tool_calls) came after runs were
    committed: without them a run carries the identity of its params without the keys; with a tool, it
    computes what no earlier run did, and so do the guessing games and the tool warm start."""
    chat = {"prompt": {"format": "chat"}, "coevolver": {"update_context": "keep"}}
    for tools in ([], ["coevo.environments.calculator:add"]):
        cfg = tiny_config(tmp_path, tools=tools, **chat)
        assert (_identity_without(cfg, drop_below=False) in identities(cfg)) is not bool(tools)
    games = tiny_config(
        tmp_path,
        problems={"source": "guessing"},
        environment={"factory": "coevo.environments.guessing:GuessingGame"},
        **chat,
    )
    assert _identity_without(games, drop_below=False) not in identities(games)
    tools = {"tools": ["coevo.environments.calculator:add"], **chat}
    warm = tiny_config(tmp_path, bootstrap={"tool_calls": {"steps": 5}}, **tools)
    assert _identity_without(warm, drop_below=False) not in identities(warm)  # a warm start no earlier run made


def test_roles_keep_the_earlier_identity_only_where_the_solver_is_the_one_role(tmp_path):
    """rollout.roles (and train_roles, code.cure.truth, coevolver.unit_tests) came after runs were
    committed, and the code loop's settings went: the solver alone carries the identity of the params
    as runs made before held them; the tester and its test bank compute what no earlier run did."""
    code = {"problems": {"source": "code-synth"}}
    for roles in (["solver"], ["solver", "tester"]):
        cfg = tiny_config(tmp_path, rollout={"roles": roles}, coevolver={"kind": "none"}, **code)
        assert (_identity_without(cfg, drop_below=False) in identities(cfg)) is (roles == ["solver"])


def test_a_seed_outside_the_spec_is_refused_before_anything_runs_and_the_spec_hash_is_its_bytes(tmp_path):
    """Seeds are fixed in the spec before the run: `--seed 7` with seeds [3, 4] is refused (exit 2,
    naming the spec and its seeds) and nothing is written; the spec's sha256, which every run records,
    is that of the file's bytes."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(_spec("seeds: [3, 4]\niterations: 2\n" + GOOD_ARMS))
    result = CliRunner().invoke(app, ["compare", str(spec), "--out", str(tmp_path / "out"), "--seed", "7"])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert f"--seed [7]: not among the seeds of {spec} ([3, 4])" in text and "fixed in its spec" in text, text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]
    assert load_spec(spec).sha256 == hash_bytes(spec.read_bytes())


def test_the_harness_turn_limit_keeps_the_earlier_identity_only_where_no_harness_runs_episodes(tmp_path):
    """coevolver.harness.turn_limit_share and max_turns came after runs were committed: a harness on
    one-turn samples carries the identity of its params without them; a harness on episodes computes
    what no earlier run did."""
    chat = {"prompt": {"format": "chat"}, "coevolver": {"kind": "harness", "update_context": "keep"}}
    plain = tiny_config(tmp_path, coevolver={"kind": "harness"})
    assert _identity_without(plain, drop_below=False) in identities(plain)
    episodes = tiny_config(tmp_path, tools=["coevo.environments.calculator:add"], **chat)
    params = episodes.model_dump(mode="json", exclude={"run": {"out_dir"}, "problems": {"data_dir"}, "tracking": True})
    del params["coevolver"]["harness"]["turn_limit_share"], params["coevolver"]["harness"]["max_turns"]
    assert hash_bytes(json.dumps(params, sort_keys=True).encode()) not in identities(episodes)
    assert identity(episodes) in identities(episodes)
