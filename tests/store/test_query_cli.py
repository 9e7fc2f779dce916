"""`coevo query`: which catalog it reads (--catalog, --run, --params), why one is missing and what to do,
and an id the catalog does not hold (exit 2, naming the ids it holds and how to list them)."""

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from coevo.cli import app
from coevo.store.catalog import Catalog

from .test_catalog import write_iteration


def catalog_run(directory: Path) -> Path:
    """A run directory whose catalog holds iterations 1 and 2 (hand-made shards, ingested as the flow does)."""
    with Catalog(directory / "catalog.duckdb") as cat:
        for iteration in (1, 2):
            cat.ingest_iteration(iteration, *write_iteration(directory, iteration))
    return directory


def query(*args: str):
    return CliRunner().invoke(app, ["query", *args])


def test_run_and_params_name_the_catalog(tmp_path):
    run = catalog_run(tmp_path / "run")
    expected = json.loads(query("pass-rate", "--catalog", str(run / "catalog.duckdb"), "--json").stdout)
    assert expected and json.loads(query("pass-rate", "--run", str(run), "--json").stdout) == expected
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"run": {"out_dir": str(run)}}))
    result = query("pass-rate", "--params", str(params), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == expected


def test_a_plain_run_says_it_keeps_no_catalog(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"iteration": 1}\n')
    result = query("pass-rate", "--run", str(run))
    assert result.exit_code == 2
    assert "coevo train --plain" in result.stderr and "keeps none" in result.stderr
    assert str(run / "metrics.jsonl") in result.stderr


def test_no_run_yet_says_which_command_makes_one(tmp_path):
    result = query("problem", "p-add-1", "--run", str(tmp_path / "nothing"))
    assert result.exit_code == 2
    assert "no run in" in result.stderr and "`coevo train` makes one" in result.stderr


def test_an_unknown_problem_id_is_an_error_naming_the_ids(tmp_path):
    run = catalog_run(tmp_path / "run")
    result = query("problem", "no-such-id", "--run", str(run))
    assert result.exit_code == 2
    assert "no problem 'no-such-id'" in result.stderr and "p-add-1" in result.stderr and "--ids" in result.stderr
    assert result.stdout == ""
    listed = query("problem", "--ids", "--run", str(run), "--json")
    assert listed.exit_code == 0, listed.output
    ids = [row["problem_id"] for row in json.loads(listed.stdout)]
    assert "p-add-1" in ids and ids == sorted(set(ids))
    known = query("problem", ids[0], "--run", str(run), "--json")
    assert known.exit_code == 0 and json.loads(known.stdout)


def test_an_unknown_skill_id_is_an_error(tmp_path):
    run = catalog_run(tmp_path / "run")
    result = query("skill", "zz", "--run", str(run))
    assert result.exit_code == 2 and "no skill 'zz'" in result.stderr and "s1" in result.stderr
    missing = query("skill", "--run", str(run))
    assert missing.exit_code == 2 and "--ids" in missing.stderr
