"""Progress of long work (coevo/progress.py): a tiny plain run reports the bootstrap's steps and loss,
the evaluation of checkpoint 0 and each stage of each iteration while they run; its summary lines are
sentences, never a Python repr; `--json` and the Python API show no progress at all."""

import io
import json
import re

from rich.console import Console
from typer.testing import CliRunner

from coevo import progress
from coevo.cli import app
from coevo.driver import train

from .conftest import tiny_config
from .test_cli import _params

STAGES = ("in_force", "rollout", "verify", "coevolve", "update", "eval", "retain")


def test_the_bootstrap_and_every_stage_report_progress_while_they_run(tmp_path):
    cfg = tiny_config(tmp_path, run={"iterations": 2})
    shown, printed = io.StringIO(), io.StringIO()
    with progress.LineReporter(Console(file=shown, width=200), every=0) as reporter, progress.reporting(reporter):
        train(cfg, Console(file=printed, width=400))
    lines = [line.split("] ", 1)[1] for line in shown.getvalue().splitlines()]
    steps = [line for line in lines if line.startswith("warm-start steps ")]
    assert len(steps) == cfg.bootstrap.steps and re.fullmatch(r"warm-start steps 30/30 loss \d+\.\d{3}", steps[-1])
    between = lines[
        lines.index("bootstrap ...") : lines.index(next(x for x in lines if x.startswith("bootstrap done")))
    ]
    assert steps[0] in between and steps[-1] in between  # while the bootstrap runs, not after
    assert "evaluation of checkpoint 0 ..." in lines
    evaluation = lines[
        lines.index("iteration 2/2: eval ...") : lines.index(
            next(x for x in lines if x.startswith("iteration 2/2: eval done"))
        )
    ]
    n_test, n_val = cfg.problems.n_test, cfg.problems.n_val
    for shown in (f"greedy answers to {n_test} problems ...", f"greedy answers to {n_val} validation problems ..."):
        assert shown in evaluation, evaluation
    assert f"{cfg.eval.pass_k} samples of each of {n_test} problems (pass@{cfg.eval.pass_k}) ..." in evaluation
    for it in (1, 2):
        for stage in STAGES:
            begin = lines.index(f"iteration {it}/2: {stage} ...")
            done = [i for i, line in enumerate(lines) if line.startswith(f"iteration {it}/2: {stage} done in ")]
            assert len(done) == 1 and done[0] > begin
    assert "iterations 1/2" in lines
    text = printed.getvalue()
    assert "{" not in text and "'kind'" not in text, text
    assert re.search(r"initial policy \S+/bootstrap: the tiny arithmetic warm start, 30 steps \(all of them\)", text)
    assert re.search(r"checkpoint 0 \(the bootstrap, \S+/bootstrap\): held-out eval/acc \d\.\d{3}", text)


def test_no_progress_under_json_nor_in_the_python_api(tmp_path, capfd, monkeypatch):
    import coevo

    monkeypatch.setenv("COEVO_PROGRESS_EVERY", "0")  # a line at every start, count and end where shown
    params = _params(tmp_path, run={"iterations": 1})
    result = CliRunner().invoke(app, ["train", "--plain", "--params", params, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["iterations"] == 1
    assert "warm-start" not in result.output and "iteration 1/1" not in result.output
    capfd.readouterr()
    coevo.train(params=params, overrides={"run.out_dir": str(tmp_path / "api")}, plain=True)
    seen = capfd.readouterr()
    assert "warm-start" not in seen.out + seen.err and "iteration 1/1" not in seen.out + seen.err


def test_the_plain_cli_shows_progress_and_readable_lines(tmp_path, monkeypatch):
    monkeypatch.setenv("COEVO_PROGRESS_EVERY", "0")
    params = _params(tmp_path, run={"iterations": 1})
    result = CliRunner().invoke(app, ["train", "--plain", "--params", params])
    assert result.exit_code == 0, result.output
    for shown in ("bootstrap ...", "warm-start steps 30/30 loss", "iteration 1/1: rollout ...", "iteration 1/1: eval"):
        assert shown in result.stdout, result.stdout
    assert result.stdout.startswith(f"coevo train --plain: {params} -> ")
    assert "initial policy" in result.stdout and "held-out evaluation" in result.stdout
    header = next(line for line in result.stdout.splitlines() if "metric" in line)
    assert "checkpoint 0" in header and "checkpoint 1" in header
    assert not re.search(r"^\W*iteration\b", result.stdout, re.MULTILINE)  # no "iteration" row among the metrics
    assert "1 iteration (all of run.iterations) in " in result.stdout
    assert "{'" not in result.stdout
    # the gain on held-out problems, paired over them, from the two checkpoints' evaluation records
    before, after = (
        json.loads((tmp_path / "run" / "evals" / f"iter_{it:04d}.json").read_text())["verdicts"] for it in (0, 1)
    )
    n, gain = len(before), (sum(after.values()) - sum(before.values())) / len(before)
    said = re.search(
        r"held-out greedy accuracy (\S+) -> (\S+) on (\d+) problems training never saw: (\S+) points, "
        r"95% interval \[(\S+), (\S+)\] paired over those problems, McNemar p (\S+)",
        result.stdout,
    )
    assert said, result.stdout
    assert [float(x) for x in said.group(1, 2)] == [round(sum(v.values()) / n, 3) for v in (before, after)]
    assert int(said[3]) == n and float(said[4]) == round(100 * gain, 1)
    assert float(said[5]) <= float(said[4]) <= float(said[6]) and 0 <= float(said[7]) <= 1


def test_a_bad_progress_interval_is_an_error_naming_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("COEVO_PROGRESS_EVERY", "often")
    result = CliRunner().invoke(app, ["eval", "latest", "--params", _params(tmp_path)])
    assert result.exit_code == 2 and "COEVO_PROGRESS_EVERY='often'" in result.stderr


def test_import_model_shows_its_steps(tmp_path, monkeypatch):
    from .model.test_import_model import write_tiny_gguf

    monkeypatch.setenv("COEVO_PROGRESS_EVERY", "0")
    source = tmp_path / "tiny.gguf"
    write_tiny_gguf(source)
    result = CliRunner().invoke(app, ["import-model", str(source), "--out", str(tmp_path / "model")])
    assert result.exit_code == 0, result.output
    lines = [line.split("] ", 1)[-1] for line in result.stdout.splitlines()]
    steps = ["converting the GGUF weights to float32", "saving the Hugging Face directory", "verifying by reloading"]
    starts = [lines.index(f"{step} ...") for step in steps]
    assert starts == sorted(starts) and all(
        lines[i + 1].startswith(f"{step} done in ") for i, step in zip(starts, steps)
    )
    quiet = CliRunner().invoke(app, ["import-model", str(source), "--out", str(tmp_path / "again"), "--json"])
    assert quiet.exit_code == 0 and "verifying by reloading" not in quiet.output


def test_the_held_out_gain_is_the_later_checkpoint_against_the_earlier_paired_by_problem(tmp_path):
    """`gain_sentence` reads the two evaluation records and pairs their verdicts problem by problem."""
    from coevo.cli import gain_sentence
    from coevo.io import write_json
    from coevo.layout import RunLayout

    verdicts = {0: {f"p{i}": i < 10 for i in range(40)}, 5: {f"p{i}": i < 30 for i in range(40)}}  # 0.25 -> 0.75
    verdicts[5]["p0"] = False  # one problem lost: 9 + 20 of the 40 moved
    for it, seen in verdicts.items():
        write_json(RunLayout(tmp_path).evals(it), {"iteration": it, "verdicts": seen})
    said = gain_sentence(tmp_path, 0, 5)
    assert said.startswith("held-out greedy accuracy 0.250 -> 0.725 on 40 problems training never saw: +47.5 points")
    low, high = (float(x) for x in re.search(r"interval \[(\S+), (\S+)\]", said).groups())
    assert 0 < low < 47.5 < high
    assert gain_sentence(tmp_path, 0, 0) is None and gain_sentence(tmp_path, 0, 7) is None
