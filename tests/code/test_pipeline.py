"""Code problems through the ordinary pipeline (`coevo train`): the code warm start as the bootstrap,
verification under the configured sandbox, evaluation by the family's verifier, the Prefect flow.
Real parts throughout: the tiny policy, the HF engine, the sandbox, Prefect's test server, MLflow."""

from __future__ import annotations

import json

import mlflow
import pandas as pd
import pytest

from coevo.code.problems import (
    from_problems_frame,
    generate_synthetic,
    to_problems_frame,
)
from coevo.code.verifier import CodeVerifier
from coevo.coevolvers import build_coevolver
from coevo.coevolvers.writers import SkillDraft
from coevo.config import deep_merge
from coevo.driver import train
from coevo.evaluation import evaluate, greedy_completions
from coevo.model.bootstrap import bootstrap_policy
from coevo.model.checkpoint import load_policy
from coevo.prepare import prepare_problems
from coevo.records import Artifact, Splits
from coevo.rollout.engines.hf import HFEngine
from coevo.rollout.prompting import render_prompt
from coevo.stages.prepare import bootstrap_key
from coevo.verification.stage import score_rows, verify_rollouts
from flows.train import train_flow
from schemas.problems import read_problems
from schemas.rewards import parse_details, read_rewards
from tests.conftest import TINY, TINY_PARAMS, tiny_config

# code-synth at test size: 2 held-out problems per family, a short warm start that already solves some
CODE = {
    "problems": {"source": "code-synth"},
    "code": {
        "warm_start_steps": 120,
        "warm_start_lr": 1e-2,
        "warm_start_batch": 16,
        "synth": {"n_train": 40, "n_test": 6},
    },
    "sampling": {"max_new_tokens": 6},  # "x*9" + <eos> fits; the longest prompt (49 tokens) + 6 fits max_position 64
}
FAMILIES = ("code-add", "code-sub", "code-mul")


@pytest.fixture(scope="module")
def code_run(tmp_path_factory):
    """Two iterations of the plain driver on code-synth (bootstrap, rollout 4x4, verify, skill bank, update, eval)."""
    cfg = tiny_config(tmp_path_factory.mktemp("code-run"), **CODE)
    return cfg, train(cfg)


def test_plain_driver_trains_on_code_problems(code_run):
    cfg, summary = code_run
    boot = summary["bootstrap"]
    assert boot["kind"] == "code" and boot["steps"] == 120 and boot["final_loss"] < 2.0 and not boot["note"]
    for it in (1, 2):
        rewards = read_rewards(cfg.run.out_dir / "rewards" / f"iter_{it:04d}.parquet")
        assert len(rewards) == cfg.rollouts_per_iter and set(rewards["verifier"]) == {"code_tests"}
        for details, passed in zip(rewards["details"], rewards["passed"]):
            facts = parse_details(details)
            assert facts["verdict"] in ("passed", "failed", "timeout", "memory", "crashed", "invalid")
            assert facts["mode"] in ("namespaces", "rlimits") and passed == (facts["verdict"] == "passed")
    for point in summary["curve"]:  # the bootstrap and both iterations
        assert {f"eval/{name}/{family}" for name in ("acc", "acc_context", "pass@2") for family in FAMILIES} <= set(
            point
        )


def test_evaluate_judges_code_rows_by_running_them(code_run):
    cfg, summary = code_run
    test = read_problems(cfg.problems.data_dir / "test.parquet")
    decoded = from_problems_frame(test)
    # score_rows: the reference solutions pass, the same off by one fail, a math row in the batch is matched exactly
    math = pd.DataFrame({"id": ["m1"], "family": ["add"], "level": [1], "prompt": ["2+2="], "answer": ["4"]})
    rows = pd.concat([test, test, math], ignore_index=True)
    rewards = score_rows(rows, [*decoded["solution"], *(s + "+1" for s in decoded["solution"]), "4"], cfg)
    assert [r.passed for r in rewards] == [True] * len(test) + [False] * len(test) + [True]
    assert [r.verifier for r in rewards] == ["code_tests"] * 2 * len(test) + ["math_exact"]
    # evaluate() on the trained policy agrees with the code verifier run directly on its greedy completions
    engine = HFEngine(load_policy(summary["final_checkpoint"], "cpu"))
    metrics = evaluate(engine, test, cfg, seed=0)
    completions = greedy_completions(engine, list(test["prompt"]), cfg.sampling.max_new_tokens)
    direct = CodeVerifier.from_config(cfg.code.sandbox).score(decoded, completions)
    assert metrics["eval/acc"] == pytest.approx(sum(r.passed for r in direct) / len(test))
    assert metrics["eval/acc"] == summary["final_eval"]["eval/acc"]


def test_sandbox_settings_reach_the_verdicts(tmp_path):
    train_split, _ = generate_synthetic(["code-add"], 1, 1, 4, 4, seed=0)
    problem, solution = train_split.loc[0, "id"], train_split.loc[0, "solution"]
    completions = [
        solution,
        "next(x for x in iter(int, 1) if x)",
        f"{solution} if bytearray(200 << 20) else 0",
    ]  # right, endless, 200 MiB
    rollouts = pd.DataFrame(
        {"rollout_id": ["r0", "r1", "r2"], "iteration": 1, "problem_id": problem, "completion": completions}
    )
    tight = tiny_config(
        tmp_path, code={"sandbox": {"mode": "rlimits", "wall_s": 1.0, "per_test_s": 0.3, "memory_mb": 64}}
    )
    verdicts = [parse_details(d) for d in verify_rollouts(rollouts, to_problems_frame(train_split), tight)["details"]]
    assert [v["verdict"] for v in verdicts] == ["passed", "timeout", "memory"]
    assert {v["mode"] for v in verdicts} == {"rlimits"}
    roomy = tiny_config(tmp_path)  # params.yaml's 512 MiB: the same allocation passes
    assert verify_rollouts(rollouts.iloc[[2]], to_problems_frame(train_split), roomy)["passed"].tolist() == [True]


def test_bootstrap_without_synthetic_problems_starts_untrained_and_says_so(tmp_path):
    cfg = tiny_config(tmp_path, problems={"source": "humaneval"})
    prepare_problems(cfg)
    with pytest.warns(UserWarning, match="policy.checkpoint"):
        _, meta = bootstrap_policy(cfg, read_problems(cfg.problems.data_dir / "train.parquet"))
    assert meta["bootstrap"]["kind"] == "code" and meta["bootstrap"]["steps"] == 0
    assert "humaneval train split" in meta["bootstrap"]["note"]


def test_bootstrap_key_follows_the_warm_start_of_the_source(tmp_path):
    split = Artifact("data/train.parquet", "0")
    data = Splits(split, split, split, dvc_md5="0")  # the key reads the DVC hash only

    def key(**overrides) -> str:
        return bootstrap_key(tiny_config(tmp_path, **overrides), data)

    arithmetic, code = key(), key(problems={"source": "code-synth"})
    assert key(code={"sandbox": {"wall_s": 1.0}, "warm_start_steps": 7, "synth": {"n_hidden": 2}}) == arithmetic
    assert key(bootstrap={"steps": 7}) != arithmetic
    assert key(problems={"source": "code-synth"}, code={"sandbox": {"wall_s": 1.0}}, bootstrap={"steps": 7}) == code
    assert key(problems={"source": "code-synth"}, code={"warm_start_steps": 7}) != code
    assert key(problems={"source": "code-synth"}, code={"synth": {"warm_start_families": ["code-add"]}}) != code


def test_a_code_worked_example_renders_as_context_and_stays_out_of_the_program(tmp_path):
    """The skill bank on code problems: a worked example (prompt + verified completion, two lines)
    is retrieved for another problem of its family and rendered before its question; the verifier
    still runs the bare problem's program."""
    cfg = tiny_config(tmp_path, problems={"source": "code-synth"}, code={"synth": {"n_train": 6, "n_test": 1}})
    problems = to_problems_frame(prepare_problems(cfg)[0])
    solved, other = (problems[problems["family"] == "code-add"].iloc[i] for i in (0, 1))
    bank = build_coevolver(cfg.coevolver_list[0], cfg.seed)
    sid = bank.add(SkillDraft(text=solved["prompt"] + "x+1", family="code-add", key=solved["prompt"], source="test"), 0)
    bank.skills[sid].move("active", 1, "admitted")
    context = bank.context_for(other.to_dict())
    assert (
        context == [solved["prompt"] + "x+1"] and bank.context_for(solved.to_dict()) == []
    )  # never on its own question
    assert render_prompt(other["prompt"], context) == f"{solved['prompt']}x+1\n{other['prompt']}"
    answer = json.loads(other["answer"])["solution"]
    rollouts = pd.DataFrame({"rollout_id": ["r0"], "iteration": 1, "problem_id": other["id"], "completion": [answer]})
    assert verify_rollouts(rollouts, problems, cfg)["passed"].tolist() == [True]


def test_prefect_flow_trains_on_code_problems(prefect_server, tmp_path):
    overrides = deep_merge(
        deep_merge(TINY, CODE),
        {
            "run": {"out_dir": str(tmp_path / "run")},
            "problems": {"data_dir": str(tmp_path / "data")},
            "tracking": {
                "mlflow_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
                "experiment": "code",
                "model_name": "tiny-code",
            },
            "pipeline": {"retries": 0},
        },
    )
    result = train_flow(str(TINY_PARAMS), overrides)
    assert result["last_iteration"] == 2
    client = mlflow.MlflowClient(overrides["tracking"]["mlflow_uri"])
    (run,) = client.search_runs([client.get_experiment_by_name("code").experiment_id])
    logged = set(run.data.metrics)
    assert {"eval/acc", "eval/pass_at_2", "verify/pass_rate"} <= logged  # MLflow spells pass@k pass_at_k
    assert {f"eval/acc/{family}" for family in FAMILIES} <= logged
    rewards = read_rewards(tmp_path / "run" / "rewards" / "iter_0002.parquet")
    assert set(rewards["verifier"]) == {"code_tests"} and all("verdict=" in d for d in rewards["details"])
