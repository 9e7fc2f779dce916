"""params.yaml's comments are the field descriptions of coevo/config/, and it lists every setting (as does
examples/tiny.yaml, the tiny policy's full params file)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from coevo.config import Config
from coevo.params_comments import nested_model, rewrite
from tests.conftest import TINY_PARAMS
from tests.mutations import ROOT

FULL_FILES = pytest.mark.parametrize("params", [ROOT / "params.yaml", TINY_PARAMS], ids=["params.yaml", "tiny.yaml"])


def settings(model, prefix=()):
    """Every setting path of a model, through nested models (not into lists of them)."""
    for name, field in model.model_fields.items():
        path = (*prefix, name)
        yield path
        child = nested_model(field.annotation)
        if child is not None and "list" not in str(field.annotation):
            yield from settings(child, path)


@FULL_FILES
def test_params_yaml_comments_are_the_config_descriptions(params):
    text = params.read_text()
    stale = [(old, new) for old, new in zip(text.splitlines(), rewrite(text).splitlines()) if old != new]
    assert not stale, (
        f"{params.name} comments differ from coevo/config/ (run python -m coevo.params_comments {params}):\n"
        + "\n".join(f"- {old}\n+ {new}" for old, new in stale)
    )


@FULL_FILES
def test_params_yaml_lists_every_setting(params):
    raw = yaml.safe_load(params.read_text())
    missing = []
    for path in settings(Config):
        node = raw
        for part in path:
            if not isinstance(node, dict) or part not in node:
                missing.append(".".join(path))
                break
            node = node[part]
    assert not missing, f"settings missing from {params.name}: {missing}"


def test_rewrite_changes_comments_only(tmp_path):
    text = (
        "# header\n"
        "seed: 3  # old words\n"
        "run:\n"
        "  out_dir: 'runs/a # not a comment'  # stale\n"
        "rewards:\n"
        "  - function: verifier  # stale\n"
        "    weight: 2.0\n"
        "\n"
        "  # a comment line stays\n"
    )
    new = rewrite(text)
    assert yaml.safe_load(new) == yaml.safe_load(text)
    lines = new.splitlines()
    assert lines[0] == "# header" and lines[-1] == "  # a comment line stays"
    assert lines[1] == f"seed: 3  # {Config.model_fields['seed'].description}"
    assert lines[3].startswith("  out_dir: 'runs/a # not a comment'  # Directory for checkpoints")
    assert "A built-in reward" in lines[5] and "# " in lines[6]
    # the command rewrites the file in place
    path = tmp_path / "params.yaml"
    path.write_text(text)
    subprocess.run(
        [sys.executable, "-m", "coevo.params_comments", str(path)], cwd=ROOT, check=True, capture_output=True
    )
    assert path.read_text() == new


def test_a_coevolver_list_gets_each_entrys_comments():
    """`coevolver` as a list of mappings: each entry's keys carry CoevolverConfig's descriptions."""
    text = "coevolver:\n  - kind: curriculum\n    frozen: true\n  - kind: skill_bank\n"
    entry = Config.model_fields["coevolver"]
    kind = nested_model(entry.annotation).model_fields["kind"].description
    lines = rewrite(text).splitlines()
    assert lines[0] == f"coevolver:  # {entry.description}"
    assert lines[1] == f"  - kind: curriculum  # {kind}" and lines[3] == f"  - kind: skill_bank  # {kind}"
    assert lines[2].startswith("    frozen: true  # Ablation")
