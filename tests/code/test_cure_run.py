"""CURE in the one loop: the tiny policy as solver and unit tester on the synthetic code family
(`rollout.roles: [solver, tester]`, `coevolver.kind: unit_tests`), through the plain driver and the
Prefect flow. Real parts throughout: the HF engine, the sandbox, the catalog, MLflow, Prefect."""

from __future__ import annotations

import json
import shutil

import mlflow
import numpy as np
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from coevo.cli import app
from coevo.code import problems as code_problems
from coevo.code.execution import cure_frame
from coevo.coevolvers.base import read_manifest
from coevo.coevolvers.unit_tests import TestBank
from coevo.config import ConfigError, deep_merge
from coevo.driver import train
from coevo.errors import InputError
from coevo.model.checkpoint import load_policy, read_meta
from coevo.stages.in_force import in_force
from coevo.stages.prepare import prepare_stage
from coevo.stages.verify import verify_stage
from coevo.store.catalog import Catalog, IterationFiles
from coevo.store.lineage import read_record, verify_lineage
from coevo.update.stage import build_training_set
from schemas.problems import read_problems
from schemas.rewards import parse_details, read_rewards
from schemas.rollouts import read_rollouts

from ..conftest import tiny_config
from ..flows.test_resume import _kill_at_pause, _run

CURE = {
    "problems": {"source": "code-synth"},
    # a warm start that solves some problems, so that tables are decidable and the bank admits tests
    "code": {
        "warm_start_steps": 400,
        "warm_start_lr": 1e-2,
        "warm_start_batch": 16,
        "synth": {"n_train": 40, "n_test": 6},
    },
    # 8 samples per role: enough testers for the bank to admit some whatever the float32 kernels
    "rollout": {"problems_per_iter": 4, "group_size": 8, "roles": ["solver", "tester"]},
    "coevolver": {"kind": "unit_tests"},
    "sampling": {"max_new_tokens": 8},
    "policy": {"shape": {"max_position": 96}},
    "optim": {"lr": 1e-3},
}


@pytest.fixture(scope="module")
def cure_run(tmp_path_factory):
    cfg = tiny_config(tmp_path_factory.mktemp("cure"), **CURE)
    return cfg, train(cfg)


def test_both_roles_are_sampled_rewarded_and_trained_a_group_per_problem_and_role(cure_run):
    cfg, summary = cure_run
    out = cfg.run.out_dir
    assert summary["iterations"] == 2
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    for it in (1, 2):
        rollouts = read_rollouts(out / "rollouts" / f"iter_{it:04d}.parquet")
        rewards = read_rewards(out / "rewards" / f"iter_{it:04d}.parquet")
        assert (rollouts["role"] == rewards["role"]).all() and len(rollouts) == 4 * 2 * 8  # problems x roles x G
        assert rollouts.groupby(["problem_id", "role"]).size().eq(8).all()
        tester = rollouts[rollouts["role"] == "tester"]
        train_split = read_problems(cfg.problems.data_dir / "train.parquet").set_index("id")
        assert list(tester["question"]) == [
            code_problems.tester_prompt(train_split.at[p, "prompt"]) for p in tester["problem_id"]
        ]
        for role, details, passed, reward in zip(
            rewards["role"], rewards["details"], rewards["passed"], rewards["reward"]
        ):
            facts = parse_details(details)
            assert facts["role"] == role
            if role == "solver":
                k, n = map(int, facts["passed"].split("/"))
                assert passed == (facts["verdict"] == "passed") == (facts["correct"] == "1") and reward == k / n
            else:
                assert passed == (facts["accurate"] == facts["decidable"] == "1")
        line = metrics[it - 1]
        assert line["policy/groups_total"] == 8  # one group per problem and role
        assert line["verify/pass_rate"] == pytest.approx(rewards.loc[rewards["role"] == "solver", "passed"].mean())
        assert {"verify/tester/reward_mean", "verify/tester_accuracy", "verify/tester_reference_accuracy"} <= set(line)
    assert_bank_grows(cfg)


def assert_bank_grows(cfg) -> None:
    """The bank starts empty and takes exactly the tester samples the rewards called accurate, decidable
    and rejecting a wrong solution; every version validates against its manifest."""
    out = cfg.run.out_dir
    banks = [TestBank.load(out / "coevolver" / f"iter_{it:04d}", cfg.coevolver_list[0], 0) for it in (0, 1, 2)]
    sizes = [bank.size() for bank in banks]
    assert sizes[0] == 0 < sizes[2], sizes
    for it in (1, 2):
        rollouts = read_rollouts(out / "rollouts" / f"iter_{it:04d}.parquet")
        rewards = read_rewards(out / "rewards" / f"iter_{it:04d}.parquet")
        facts = dict(zip(rewards["rollout_id"], map(parse_details, rewards["details"])))
        admissible = {
            (r.problem_id, code_problems.generated_test(r.completion))
            for r in rollouts.itertuples()
            if r.role == "tester"
            and facts[r.rollout_id]["accurate"] == facts[r.rollout_id]["decidable"] == "1"
            and int(facts[r.rollout_id]["rejected"]) >= 1
        }
        new = {(p, e["test"]) for p, entries in banks[it].tests.items() for e in entries if e["added_iter"] == it}
        report = json.loads((out / "reports" / f"iter_{it:04d}.json").read_text())
        assert new <= admissible and len(new) == len(report["admitted"])


def test_the_update_trains_the_roles_train_roles_lists(cure_run):
    cfg, _ = cure_run
    out = cfg.run.out_dir
    policy = load_policy(out / "checkpoints" / "iter_0001")
    rollouts = read_rollouts(out / "rollouts" / "iter_0002.parquet")
    rewards = read_rewards(out / "rewards" / "iter_0002.parquet")
    for roles in (["solver"], ["tester"], ["solver", "tester"]):
        trained = tiny_config(cfg.run.out_dir.parent / "roles", **deep_merge(CURE, {"rollout": {"train_roles": roles}}))
        data, stats = build_training_set(policy, rollouts, rewards, trained, keep_all_groups=True)
        assert stats["policy/groups_total"] == 4 * len(roles)
        assert set(rollouts.set_index("rollout_id").loc[data.rollout_ids, "role"]) == set(roles)


def test_the_bank_in_force_joins_the_pass_table_of_the_verification_stage(cure_run, tmp_path):
    """Co-evolver version 1, replaced by a bank holding a test no solution passes for every problem of
    iteration 2, is what iteration 2's verification stage runs: every solver sample fails bank test 0."""
    cfg, _ = cure_run
    shutil.copytree(cfg.run.out_dir, tmp_path / "run")
    shutil.copytree(cfg.problems.data_dir, tmp_path / "data")
    copy = tiny_config(tmp_path, **CURE)
    rollouts = read_rollouts(copy.run.out_dir / "rollouts" / "iter_0002.parquet")
    bank = TestBank(copy.coevolver_list[0], 0)
    bank.tests = {pid: [{"test": "assert f(0)=='z'", "added_iter": 1, "rejected": 1}] for pid in rollouts["problem_id"]}
    bank.save(copy.run.out_dir / "coevolver" / "iter_0001")
    table = verify_stage(
        copy, in_force(copy, 2, prepare_stage(copy)), str(copy.run.out_dir / "rollouts" / "iter_0002.parquet")
    )
    rewards = read_rewards(table.path)
    solver = rewards[rewards["role"] == "solver"]
    assert [parse_details(d)["bank_fail"] for d in solver["details"]] == ["0"] * len(solver)


def test_the_bank_is_in_the_lineage_and_the_catalog(cure_run):
    cfg, _ = cure_run
    out = cfg.run.out_dir
    record = read_record(out / "checkpoints" / "iter_0002")
    version = read_manifest(out / "coevolver" / "iter_0002")
    assert (
        record["coevolver"]["kind"] == "unit_tests" and record["coevolver"]["content_hash"] == version["content_hash"]
    )
    assert verify_lineage(out / "checkpoints" / "iter_0002") == []
    files = [
        IterationFiles(it, out / "rollouts" / f"iter_{it:04d}.parquet", out / "rewards" / f"iter_{it:04d}.parquet",
                       out / "reports" / f"iter_{it:04d}.json")
        for it in (1, 2)
    ]  # fmt: skip
    with Catalog(tmp := out / "catalog-test.duckdb") as catalog:
        catalog.ingest(files)
        passes = catalog.pass_rate_by_family()
    shown = CliRunner().invoke(app, ["query", "unit-tests", "--catalog", str(tmp), "--json"])
    assert shown.exit_code == 0, shown.output
    listed = json.loads(shown.output)
    bank = TestBank.load(out / "coevolver" / "iter_0002", cfg.coevolver_list[0], 0)
    admitted = {(r["problem_id"], r["test"]) for r in listed if r["event"] == "admitted"}
    assert {(p, e["test"]) for p, entries in bank.tests.items() for e in entries} <= admitted
    solver = pd.concat([read_rewards(f.rewards) for f in files])
    solver = solver[solver["role"] == "solver"]
    assert passes["n"].sum() == len(solver)  # the pass-rate view counts the solver's samples only


def test_generated_truth_reads_no_ground_truth_test(cure_run):
    """Under code.cure.truth: generated the rewards come from the generated and bank tests alone:
    replacing every hidden test changes no reward (under hidden it does)."""
    cfg, _ = cure_run
    out = cfg.run.out_dir
    rollouts = read_rollouts(out / "rollouts" / "iter_0002.parquet")
    train_split = read_problems(cfg.problems.data_dir / "train.parquet")
    broken = train_split.assign(answer=[_with_hidden_tests(a, ["assert False"]) for a in train_split["answer"]])
    bank = TestBank.load(out / "coevolver" / "iter_0001", cfg.coevolver_list[0], 0).tests_for
    for truth, same in (("generated", True), ("hidden", False)):
        cure = cfg.code.cure.model_copy(update={"truth": truth})
        run_cfg = cfg.model_copy(update={"code": cfg.code.model_copy(update={"cure": cure})})
        real, metrics = cure_frame(rollouts, train_split, bank, run_cfg)
        fake, _ = cure_frame(rollouts, broken, bank, run_cfg)
        assert np.array_equal(real["reward"], fake["reward"]) is same, truth
        assert np.array_equal(real["passed"], fake["passed"]) is same, truth
        assert metrics["verify/coder_pass_rate"] > 0  # the hidden tests still measure the solver


def _with_hidden_tests(answer: str, tests: list[str]) -> str:
    decoded = json.loads(answer)
    return json.dumps({**decoded, "tests": tests}, sort_keys=True)


def test_a_generated_test_that_hangs_or_forks_is_a_verdict_never_a_crash(cure_run):
    """Two tester samples that sleep and fork: the solutions that run them get a sandbox verdict, their
    ground-truth verdicts stay what they were (the hidden tests run first), and neither test passes."""
    cfg, _ = cure_run
    out = cfg.run.out_dir
    rollouts = read_rollouts(out / "rollouts" / "iter_0001.parquet")
    rollouts = rollouts[rollouts["problem_id"] == rollouts["problem_id"].iloc[0]].reset_index(drop=True)
    testers = rollouts.index[rollouts["role"] == "tester"][:2]
    hostile = rollouts.copy()
    hostile.loc[testers, "completion"] = [
        "0)=='z' or __import__('time').sleep(60)",
        "0)=='z' or __import__('os').fork()",
    ]
    sandbox = cfg.code.sandbox.model_copy(update={"wall_s": 2.0, "per_test_s": 0.2})
    quick = cfg.model_copy(update={"code": cfg.code.model_copy(update={"sandbox": sandbox})})
    train_split = read_problems(cfg.problems.data_dir / "train.parquet")
    calm, _ = cure_frame(rollouts, train_split, lambda p: [], quick)
    rewards, _ = cure_frame(hostile, train_split, lambda p: [], quick)
    solver = rewards["role"] == "solver"
    truth = [{k: parse_details(d)[k] for k in ("verdict", "passed")} for d in rewards.loc[solver, "details"]]
    assert truth == [{k: parse_details(d)[k] for k in ("verdict", "passed")} for d in calm.loc[solver, "details"]]
    assert not rewards.loc[testers, "passed"].any()


def test_a_role_the_problems_cannot_serve_is_refused_before_training(tmp_path):
    cfg = tiny_config(tmp_path, rollout={"roles": ["solver", "tester"]}, coevolver={"kind": "none"})
    with pytest.raises(InputError, match=r"train.parquet row 0 \(problem '[^']+', family '(add|mul)'\).*'tester'"):
        prepare_stage(cfg)
    with pytest.raises(ConfigError, match=r"rollout.train_roles: \['tester'\] not sampled"):
        tiny_config(tmp_path, rollout={"train_roles": ["tester"]})
    with pytest.raises(ConfigError, match="unit_tests keeps the tester role's tests"):
        tiny_config(tmp_path, coevolver={"kind": "unit_tests"})
    with pytest.raises(ConfigError, match=r"co-evolver kinds \['skill_bank'\] read every rollout as the solver's"):
        tiny_config(tmp_path, problems={"source": "code-synth"}, rollout={"roles": ["solver", "tester"]})


def test_a_cure_flow_and_a_killed_plain_run_agree_on_weights_and_bank(prefect_server, tmp_path):
    """The flow runs through and logs each bank version to MLflow; the plain driver is SIGKILLed in
    iteration 2's co-evolution (report written, bank version not) and continued. Same metrics (stage
    times aside), the same final weights and the same bank."""
    runs = {}
    for runner, options in {"flow": [], "plain": ["--plain"]}.items():
        cfg = tiny_config(tmp_path / runner, **CURE)
        raw = cfg.model_dump(mode="json")
        raw["tracking"] |= {"mlflow_uri": f"sqlite:///{tmp_path / runner / 'mlflow.db'}", "experiment": "cure"}
        params = tmp_path / runner / "params.yaml"
        params.parent.mkdir(parents=True, exist_ok=True)
        params.write_text(yaml.safe_dump(raw))
        if runner == "plain":
            _kill_at_pause(_run(str(params), "coevolve:2", flags=("--plain",)), "coevolve:2")
            assert not (cfg.run.out_dir / "coevolver" / "iter_0002").exists()
            options = [*options, "--continue", "--set", "run.iterations=1"]  # iteration 2, where the kill fell
        result = CliRunner().invoke(app, ["train", *options, "--params", str(params), "--json"])
        assert result.exit_code == 0, result.output
        lines = (cfg.run.out_dir / "metrics.jsonl").read_text().splitlines()
        runs[runner] = (
            [{k: v for k, v in json.loads(line).items() if not k.startswith("time/")} for line in lines],
            read_meta(cfg.run.out_dir / "checkpoints" / "iter_0002")["weights_sha256"],
            read_manifest(cfg.run.out_dir / "coevolver" / "iter_0002")["content_hash"],
        )
    assert runs["plain"] == runs["flow"]
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'flow' / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("cure").experiment_id])
    for it in (1, 2):
        logged = {a.path for a in client.list_artifacts(run.info.run_id, f"coevolver/iter_{it:04d}")}
        assert {f"coevolver/iter_{it:04d}/tests.jsonl", f"coevolver/iter_{it:04d}/manifest.json"} <= logged
