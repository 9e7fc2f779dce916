"""Reward functions (coevo/verification/rewards.py): real plugin modules imported from files, weights, components,
the user file's extra columns, and every bad input named by its `rewards[i]` entry."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pandas as pd
import pytest

from coevo.config import ConfigError
from coevo.problems.loader import load_problem_file
from coevo.problems.math_verifier import MathVerifier
from coevo.stages.prepare import prepare_stage
from coevo.stages.verify import reward_metrics
from coevo.verification.rewards import RewardError, check_rewards, reward_sources
from coevo.verification.stage import family_verdicts, score_rows, verify_rollouts

from .conftest import tiny_config

PLUGIN = """
SEEN = []  # the keyword arguments of each call, for the test to inspect


def shortness(completions, **columns):
    SEEN.append(sorted(columns))
    return [float(len(c)) for c in completions]


def difficulty(completions, difficulty, **columns):
    return difficulty  # a user-file column, None where a row has none


def half_or_none(completions, answer, **columns):
    return [None if a == "5" else 0.5 for a in answer]


def wrong_length(completions, **columns):
    return [1.0] * (len(completions) + 1)


def words(completions, **columns):
    return ["high" for _ in completions]


def nan(completions, **columns):
    return [float("nan") for _ in completions]


def scalar(completions, **columns):
    return 1.0


def broken(completions, **columns):
    raise KeyError("label")


NOT_A_FUNCTION = 3
"""


@pytest.fixture
def plugin(tmp_path, monkeypatch) -> str:
    """A plugin module written to a fresh working directory (not on sys.path before), by its unique name."""
    name = f"user_rewards_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(PLUGIN)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    return name


def rows(answers=("7", "12", "5")) -> pd.DataFrame:
    n = len(answers)
    return pd.DataFrame(
        {
            "id": [f"p{i}" for i in range(n)],
            "family": ["add"] * n,
            "level": [1] * n,
            "prompt": ["q="] * n,
            "answer": list(answers),
        }
    )


def test_plugin_from_the_working_directory_weights_and_components(tmp_path, plugin):
    cfg = tiny_config(
        tmp_path,
        rewards=[
            {"function": "verifier"},
            {"function": "format", "weight": 0.5},
            {"function": f"{plugin}:shortness", "weight": -0.1},
        ],
    )
    rewards = score_rows(rows(), ["7", "\\boxed{12}", "55"], cfg, prompts=["ctx\nq="] * 3)
    assert sys.path[0] == str(tmp_path)  # the working directory went first, as under `python -m`
    # verifier + 0.5 * format - 0.1 * len: "7" 1 + 0 - 0.1; "\boxed{12}" 1 + 0.5 - 1.0; "55" 0 + 0 - 0.2
    assert [r.reward for r in rewards] == pytest.approx([0.9, 0.5, -0.2])
    assert [r.components for r in rewards] == [
        {"verifier": 1.0, "format": 0.0, "shortness": 1.0},
        {"verifier": 1.0, "format": 1.0, "shortness": 10.0},
        {"verifier": 0.0, "format": 0.0, "shortness": 2.0},
    ]
    assert [r.passed for r in rewards] == [True, True, False]  # the verifier's verdicts, whatever the total
    assert {r.verifier for r in rewards} == {"math_exact"}
    assert sys.modules[plugin].SEEN == [
        [
            "answer",
            "completion_ids",
            "family",
            "id",
            "level",
            "log_extra",
            "log_metric",
            "prompt",
            "prompts",
            "trainer_state",
        ]
    ]  # TRL's arguments
    source = reward_sources(cfg)[0]
    assert source["path"] == str(tmp_path / f"{plugin}.py") and len(source["sha256"]) == 64


def test_without_a_verifier_entry_passed_is_the_total_against_the_threshold(tmp_path, plugin):
    cfg = tiny_config(
        tmp_path, rewards=[{"function": f"{plugin}:shortness", "weight": 0.5}], rewards_pass_threshold=1.0
    )
    rewards = score_rows(rows(), ["7", "12", "five"], cfg)
    assert [r.reward for r in rewards] == [0.5, 1.0, 2.0]
    assert [r.passed for r in rewards] == [False, True, True]
    assert {r.verifier for r in rewards} == {"shortness"} and {r.details for r in rewards} == {""}


def test_a_weight_zero_verifier_keeps_passed_meaning_correct(tmp_path, plugin):
    cfg = tiny_config(tmp_path, rewards=[{"function": f"{plugin}:shortness"}, {"function": "verifier", "weight": 0.0}])
    rewards = score_rows(rows(), ["7", "99", "5"], cfg)
    assert [r.reward for r in rewards] == [1.0, 2.0, 1.0]
    assert [r.passed for r in rewards] == [True, False, True]


def test_none_is_not_applicable_and_adds_nothing(tmp_path, plugin):
    cfg = tiny_config(
        tmp_path, rewards=[{"function": "verifier"}, {"function": f"{plugin}:half_or_none", "name": "half"}]
    )
    rewards = score_rows(rows(), ["7", "0", "5"], cfg)
    assert [r.reward for r in rewards] == [1.5, 0.5, 1.0]
    assert rewards[2].components == {"verifier": 1.0, "half": None}


def test_a_user_file_column_reaches_the_plugin(tmp_path, plugin):
    path = tmp_path / "mine.jsonl"
    lines = [
        {"id": "a", "prompt": "2+2=", "answer": 4, "difficulty": 0.25},
        {"id": "b", "prompt": "3+3=", "answer": 6, "difficulty": 0.75},
        {"id": "c", "prompt": "1+1=", "answer": 2},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    problems = load_problem_file(path)
    cfg = tiny_config(tmp_path, rewards=[{"function": "verifier"}, {"function": f"{plugin}:difficulty", "weight": 2.0}])
    rollouts = pd.DataFrame(
        {"rollout_id": ["r0", "r1", "r2"], "iteration": 1, "problem_id": ["a", "b", "c"], "completion": ["4", "5", "2"]}
    )
    table = verify_rollouts(rollouts, problems, cfg)
    assert table["reward"].tolist() == [1.5, 1.5, 1.0]  # verifier + 2 x difficulty (none for c)
    assert [json.loads(c) for c in table["components"]] == [
        {"verifier": 1.0, "difficulty": 0.25},
        {"verifier": 0.0, "difficulty": 0.75},
        {"verifier": 1.0, "difficulty": None},
    ]
    metrics = reward_metrics(rollouts.assign(family="math"), table)
    assert metrics["verify/reward/verifier"] == pytest.approx(2 / 3)
    assert metrics["verify/reward/difficulty"] == pytest.approx(0.5)  # the mean over rows where it applies


def test_default_rewards_are_the_family_verifiers_unchanged(tmp_path):
    cfg = tiny_config(tmp_path)  # params.yaml's rewards: the verifier alone, weight 1
    problems = rows(("7", "-3", "12", "40", "8"))
    completions = ["7", "= -3", "1 2", "\\boxed{40}", "x"]
    alone = MathVerifier().score(list(problems["answer"]), completions)
    rewards = score_rows(problems, completions, cfg)
    assert [(r.reward, r.passed, r.verifier, r.details) for r in rewards] == [
        (a.reward, a.passed, a.verifier, a.details) for a in alone
    ]
    assert [r.reward for r in rewards] == [1.0, 1.0, 0.0, 1.0, 0.0]
    assert [r.components for r in rewards] == [{"verifier": a.reward} for a in alone]
    assert family_verdicts(problems, completions, cfg) == alone


@pytest.mark.parametrize(
    ("function", "match"),
    [
        (
            "no_such_module_for_coevo:f",
            r"rewards\[1\]\.function 'no_such_module_for_coevo:f': cannot import module 'no_such_module_for_coevo'",
        ),
        (
            "{plugin}:missing",
            r"rewards\[1\]\.function '{plugin}:missing': module '{plugin}' \(.*\) has no attribute 'missing'",
        ),
        (
            "{plugin}:NOT_A_FUNCTION",
            (
                r"rewards\[1\]\.function '{plugin}:NOT_A_FUNCTION': {plugin}:NOT_A_FUNCTION is not callable \(it is "
                r"a int\)"
            ),
        ),
        (
            "{plugin}:wrong_length",
            r"rewards\[1\]\.function '{plugin}:wrong_length' returned 4 values for 3 completions",
        ),
        (
            "{plugin}:words",
            r"rewards\[1\]\.function '{plugin}:words' returned 'high' \(str\) for completion 0 \(problem 'p0'\)",
        ),
        (
            "{plugin}:nan",
            r"rewards\[1\]\.function '{plugin}:nan' returned nan for completion 0 .* return None for 'not applicable'",
        ),
        ("{plugin}:scalar", r"rewards\[1\]\.function '{plugin}:scalar' returned a float; expected a list of 3 floats"),
        ("{plugin}:broken", r"rewards\[1\]\.function '{plugin}:broken' raised KeyError: 'label'"),
        (
            "verifyer",
            (
                r"rewards\[1\]\.function 'verifyer': no such built-in reward; built-ins: \['format', 'rubric', "
                r"'verifier'\]"
            ),
        ),
    ],
)
def test_bad_plugins_are_named_by_their_entry(tmp_path, plugin, function, match):
    cfg = tiny_config(tmp_path, rewards=[{"function": "verifier"}, {"function": function.format(plugin=plugin)}])
    with pytest.raises(RewardError, match=match.format(plugin=plugin)):
        score_rows(rows(), ["7", "12", "5"], cfg)


def test_config_rejects_malformed_entries(tmp_path):
    with pytest.raises(
        ConfigError,
        match=r"rewards\[0\]\.function: 'my rewards:f' is neither a built-in reward name nor 'module:function'",
    ):
        tiny_config(tmp_path, rewards=[{"function": "my rewards:f"}])
    with pytest.raises(ConfigError, match=r"rewards\[1\]\.name: 'format' is already the name of rewards\[0\]"):
        tiny_config(tmp_path, rewards=[{"function": "format"}, {"function": "pkg.mod:format"}])
    with pytest.raises(ConfigError, match=r"rewards\.0\.weight: Input should be a finite number"):
        tiny_config(tmp_path, rewards=[{"function": "verifier", "weight": math.nan}])


def test_prepare_stops_before_writing_or_rolling_out(tmp_path, plugin):
    unimportable = tiny_config(
        tmp_path / "a", rewards=[{"function": "verifier"}, {"function": "no_such_module_for_coevo:f"}]
    )
    with pytest.raises(RewardError, match=r"rewards\[1\]\.function"):
        prepare_stage(unimportable)
    assert not Path(unimportable.problems.data_dir).exists()  # nothing written
    wrong = tiny_config(tmp_path / "b", rewards=[{"function": f"{plugin}:wrong_length"}])
    with pytest.raises(
        RewardError,
        match=r"rewards\[0\]\.function .* returned 3 values for 2 completions \(a probe on 2 training problems",
    ):
        prepare_stage(wrong)
    assert not (Path(wrong.run.out_dir) / "rollouts").exists()
    check_rewards(
        tiny_config(tmp_path / "c", rewards=[{"function": f"{plugin}:shortness"}]), rows()
    )  # a sound plugin passes the probe


def test_a_run_with_a_plugin_keeps_components_metrics_and_the_plugin_in_lineage(tmp_path, plugin):
    import duckdb

    from coevo.driver import train
    from coevo.store.catalog import Catalog
    from coevo.store.lineage import read_record, verify_lineage
    from schemas.rewards import read_rewards

    rewards = [
        {"function": "verifier"},
        {"function": "format", "weight": 0.0},
        {"function": f"{plugin}:shortness", "weight": -0.01},
    ]
    cfg = tiny_config(tmp_path, rewards=rewards, run={"iterations": 1})
    train(cfg)
    out = cfg.run.out_dir
    table = read_rewards(out / "rewards" / "iter_0001.parquet")
    components = [json.loads(c) for c in table["components"]]
    assert [list(c) for c in components] == [["verifier", "format", "shortness"]] * len(table)
    assert table["reward"].tolist() == pytest.approx([c["verifier"] - 0.01 * c["shortness"] for c in components])
    assert table["passed"].tolist() == [c["verifier"] == 1.0 for c in components]
    metrics = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    assert metrics["verify/reward/shortness"] == pytest.approx(sum(c["shortness"] for c in components) / len(table))
    assert {"verify/reward/verifier", "verify/reward/format"} <= set(metrics)
    with Catalog(cfg.catalog_path) as catalog:
        catalog.ingest_iteration(1, out / "rollouts" / "iter_0001.parquet", out / "rewards" / "iter_0001.parquet")
    with duckdb.connect(str(cfg.catalog_path), read_only=True) as con:
        stored = con.sql("SELECT sum((components->>'shortness')::DOUBLE) FROM rewards").fetchall()[0][0]
    assert stored == pytest.approx(sum(c["shortness"] for c in components))
    checkpoint = out / "checkpoints" / "iter_0001"
    [recorded] = read_record(checkpoint)["reward_plugins"]
    assert recorded == {
        "function": f"{plugin}:shortness",
        "path": str(tmp_path / f"{plugin}.py"),
        "sha256": reward_sources(cfg)[0]["sha256"],
    }
    assert verify_lineage(checkpoint) == []
    (tmp_path / f"{plugin}.py").write_text(PLUGIN + "\n# edited after training\n")
    [changed] = verify_lineage(checkpoint)  # recorded by the checkpoint and the bootstrap, reported once
    assert (changed.what, changed.path, changed.expected) == (
        f"reward plugin {plugin}:shortness",
        recorded["path"],
        recorded["sha256"],
    )


def test_a_catalog_made_before_the_components_column_gains_it(tmp_path):
    import duckdb

    from coevo.store.catalog import Catalog

    path = tmp_path / "catalog.duckdb"
    with duckdb.connect(str(path)) as con:  # the rewards table as catalogs were created before
        con.execute(
            "CREATE TABLE rewards (rollout_id VARCHAR PRIMARY KEY, iteration BIGINT NOT NULL, problem_id VARCHAR NOT "
            "NULL,"
            " reward DOUBLE NOT NULL, passed BOOLEAN NOT NULL, verifier VARCHAR NOT NULL, details VARCHAR NOT NULL)"
        )
        con.execute("INSERT INTO rewards VALUES ('r0', 1, 'p0', 1.0, true, 'math_exact', '')")
    Catalog(path).close()
    with duckdb.connect(str(path), read_only=True) as con:
        assert con.sql("SELECT rollout_id, components FROM rewards").fetchall() == [("r0", "{}")]


def test_format_reward_wants_a_closed_box_or_a_closed_fence():
    from coevo.verification.rewards import format_reward

    completions = [
        "\\boxed{12}",
        "\\boxed{12",
        "\\boxed{ }",
        "12",
        "```python\ndef f():\n    return 1\n```",
        "```python\ndef f():",
        "def f(): return 1",
    ]
    families = ["add"] * 4 + ["humaneval"] * 3
    assert format_reward(completions, family=families) == [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0]
