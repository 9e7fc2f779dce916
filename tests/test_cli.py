"""The `coevo` CLI: machine-readable eval, and bad problem files that fail loudly and write nothing."""

import json
import re

import pytest
import yaml
from typer.testing import CliRunner

from coevo.cli import app

from .conftest import TINY, TINY_PARAMS


def _params(tmp_path, **extra) -> str:
    raw = yaml.safe_load(TINY_PARAMS.read_text())
    for section, values in {**TINY, **extra}.items():
        raw.setdefault(section, {}).update(values) if isinstance(values, dict) else raw.__setitem__(section, values)
    raw["run"]["out_dir"] = str(tmp_path / "run")
    raw["problems"]["data_dir"] = str(tmp_path / "data")
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def test_eval_json_reports_metrics_per_family(tmp_path, tiny_policy_dir):
    problems = tmp_path / "mine.jsonl"
    problems.write_text(
        '{"id": "a", "prompt": "2+2=", "answer": 4, "family": "add"}\n{"id": "b", "prompt": "3*3=", "answer": '
        '"9", "family": "mul"}\n'
    )
    result = CliRunner().invoke(
        app, ["eval", str(tiny_policy_dir), "--problems", str(problems), "--params", _params(tmp_path), "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["n"] == 2
    assert set(report["metrics"]) >= {"eval/acc", "eval/acc/add", "eval/acc/mul", "eval/pass@2"}


def test_eval_of_a_file_without_answers_under_the_verifier_is_refused_naming_it(tmp_path, tiny_policy_dir):
    """`coevo eval --problems` loads a user file as training does: without answers, the default
    `rewards:` (the verifier) has nothing to judge by, and the file is named before any model loads."""
    problems = tmp_path / "no-answers.jsonl"
    problems.write_text('{"prompt": "2+2=", "solution": "4"}\n{"prompt": "3*3=", "solution": "9"}\n')
    result = CliRunner().invoke(
        app, ["eval", str(tiny_policy_dir), "--problems", str(problems), "--params", _params(tmp_path), "--json"]
    )
    assert result.exit_code == 2, result.output
    assert f"{problems}: field 'answer': missing column" in result.output
    assert "without `verifier`" in result.output


BAD_FILES = {
    "missing column": (
        '{"id": "a", "prompt": "1+1=", "answer": 2}\n{"id": "b", "prompt": "2+2="}\n',
        "line 2.*'answer'",
    ),
    "wrong type": ('{"id": "a", "prompt": "1+1=", "answer": [2]}\n', "line 1.*'answer'"),
    "empty prompt": (
        '{"id": "a", "prompt": "1+1=", "answer": 2}\n{"id": "b", "prompt": "  ", "answer": 3}\n',
        "line 2.*'prompt'",
    ),
    "duplicate id": (
        '{"id": "a", "prompt": "1+1=", "answer": 2}\n{"id": "a", "prompt": "2+2=", "answer": 4}\n',
        "line 2.*'id'",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_problems_file_names_row_and_field_and_writes_nothing(tmp_path, case):
    text, pattern = BAD_FILES[case]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(text)
    params = _params(tmp_path, problems={"source": "file", "path": str(bad)})
    result = CliRunner().invoke(app, ["prepare", "--params", params])
    assert result.exit_code == 2
    assert str(bad) in result.output

    assert re.search(pattern, result.output), result.output
    assert not (tmp_path / "data").exists()
    assert not (tmp_path / "run").exists()


def test_a_broken_params_file_with_json_is_one_json_error_object_and_exit_2(tmp_path):
    bad = tmp_path / "params.yaml"
    bad.write_text("run: [out_dir\n")  # not YAML
    result = CliRunner().invoke(app, ["train", "--params", str(bad), "--json"])
    assert result.exit_code == 2
    report = json.loads(result.stdout)  # stdout is exactly one JSON object
    assert set(report) == {"error", "setting", "exit_code"} and str(bad) in report["error"] and report["exit_code"] == 2
    assert "invalid parameters" in result.stderr and "invalid parameters" not in result.stdout
    wrong = _params(tmp_path, run={"iterations": "many"})
    result = CliRunner().invoke(app, ["train", "--params", wrong, "--json"])
    assert result.exit_code == 2 and json.loads(result.stdout)["setting"] == "run.iterations"


def test_errors_go_to_stderr_without_json(tmp_path):
    result = CliRunner().invoke(app, ["prepare", "--params", str(tmp_path / "absent.yaml")])
    assert result.exit_code == 2 and result.stdout == "" and "absent.yaml" in result.stderr


def test_eval_latest_before_any_run_says_which_command_makes_one(tmp_path):
    result = CliRunner().invoke(app, ["eval", "latest", "--params", _params(tmp_path)])
    assert result.exit_code == 2
    assert "no run in" in result.stderr and "`coevo train`" in result.stderr
    assert "not a Hugging Face checkpoint" not in result.stderr


def test_prepare_prints_a_table_of_every_split_it_writes_never_a_dict(tmp_path):
    params = _params(tmp_path)
    result = CliRunner().invoke(app, ["prepare", "--params", params])
    assert result.exit_code == 0, result.output
    assert "{" not in result.stdout and "'" not in result.stdout
    written = sorted(path.stem for path in (tmp_path / "data").glob("*.parquet"))
    assert written == ["test", "train", "val"]
    counts = json.loads(CliRunner().invoke(app, ["prepare", "--params", params, "--json"]).stdout)
    for split in written:
        assert re.search(rf"{split}\s.*\b{counts[split]:,}\b", result.stdout), result.stdout
    assert counts["val"] == yaml.safe_load(open(params))["problems"]["n_val"]


def test_one_checkpoint_gets_one_pass_at_k_in_training_and_in_coevo_eval(tmp_path):
    """The eval seed rule (docs/evaluation.md): checkpoint N is sampled with eval_seed(seed, N) in training's
    evaluation and in `coevo eval`, so the summary's pass@k and `coevo eval`'s agree exactly."""
    params = _params(
        tmp_path,
        run={"iterations": 1},
        bootstrap={"steps": 200},
        eval={"every": 1, "pass_k": 4},
        sampling={"max_new_tokens": 4, "temperature": 1.5},
    )
    trained = CliRunner().invoke(app, ["train", "--plain", "--params", params, "--json"])
    assert trained.exit_code == 0, trained.output
    summary = json.loads(trained.stdout)
    for key, checkpoint in (("initial_eval", summary["checkpoints"][0]), ("final_eval", summary["final_checkpoint"])):
        evaluated = CliRunner().invoke(app, ["eval", checkpoint, "--params", params, "--json"])
        assert evaluated.exit_code == 0, evaluated.output
        metrics = json.loads(evaluated.stdout)["metrics"]
        pass_keys = [k for k in metrics if k.startswith("eval/pass@4")]
        assert pass_keys and {k: metrics[k] for k in pass_keys} == {k: summary[key][k] for k in pass_keys}
        assert 0 < metrics["eval/pass@4"] < 1, metrics  # sampled answers that a seed can change


def test_bootstrap_says_what_it_made_in_a_sentence(tmp_path, tiny_policy_dir):
    result = CliRunner().invoke(app, ["bootstrap", "--params", _params(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "{" not in result.stdout and "'kind'" not in result.stdout
    boot = tmp_path / "run" / "bootstrap"
    assert re.search(rf"initial policy {re.escape(str(boot))}: the tiny arithmetic warm start, 30 steps", result.stdout)
    assert "final loss" in result.stdout and "parameters" in result.stdout
    (tmp_path / "mine").mkdir()
    mine = _params(tmp_path / "mine", policy={"checkpoint": str(tiny_policy_dir)})
    result = CliRunner().invoke(app, ["bootstrap", "--params", mine])
    assert result.exit_code == 0, result.output
    assert f"the checkpoint {tiny_policy_dir}, copied as checkpoint 0" in result.stdout
