import re
import types
import typing
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from coevo.config import Config, ConfigError, load_config, parse_overrides

from .conftest import ROOT, TINY_PARAMS


def _mapping_model(annotation) -> type[BaseModel] | None:
    """The model a field takes as one mapping: X, or the X of `X | list[X]` (`coevolver`)."""
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    for arg in typing.get_args(annotation) if union else (annotation,):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def _walk(model: type[BaseModel], prefix: str = ""):
    for name, field in model.model_fields.items():
        yield prefix + name, field
        if (sub := _mapping_model(field.annotation)) is not None:
            yield from _walk(sub, prefix + name + ".")


@pytest.mark.parametrize("params", [ROOT / "params.yaml", TINY_PARAMS], ids=["params.yaml", "tiny.yaml"])
def test_params_yaml_is_valid_and_complete(params):
    cfg = load_config(params)
    raw = yaml.safe_load(params.read_text())
    for dotted, _ in _walk(Config):
        node = raw
        for part in dotted.split("."):
            assert part in node, f"{params.name} lacks {dotted}: it must list every knob"
            node = node[part]
    assert cfg.rollouts_per_iter == cfg.rollout.problems_per_iter * cfg.rollout.group_size


def test_the_tiny_params_are_the_defaults():
    """examples/tiny.yaml (the tests' base) holds exactly the defaults of coevo/config/: a params file
    that leaves a key out gets the tiny policy's value, as the examples' headers say."""
    assert load_config(TINY_PARAMS).model_dump() == Config().model_dump()


def test_every_field_is_documented():
    undocumented = [dotted for dotted, field in _walk(Config) if not field.description]
    assert undocumented == []


def test_unknown_key_is_an_error_naming_file_and_key(tmp_path: Path):
    path = tmp_path / "params.yaml"
    path.write_text("rollout:\n  group_sise: 8\n")
    expected = r"params.yaml: rollout.group_sise: unknown setting .* did you mean rollout.group_size\?"
    with pytest.raises(ConfigError, match=expected):
        load_config(path)


def test_a_set_override_is_blamed_on_set_and_a_nested_typo_gets_the_closest_key(tmp_path: Path):
    path = tmp_path / "params.yaml"
    path.write_text("coevolver:\n  kind: curriculum\n")
    with pytest.raises(ConfigError) as raised:
        load_config(path, parse_overrides(["run.iteration=2", "coevolver.curriculum.alpah=0.1"]))
    assert str(raised.value).splitlines() == [
        "--set: run.iteration: unknown setting (Extra inputs are not permitted); did you mean run.iterations?",
        "--set: coevolver.curriculum.alpah: unknown setting (Extra inputs are not permitted); did you mean "
        "coevolver.curriculum.alpha?",
    ]


def test_a_yaml_error_names_the_file_line_and_column(tmp_path: Path):
    path = tmp_path / "params.yaml"
    path.write_text("seed: 1\nrun:\n  out_dir: runs/x\n  iterations: : 3\n")
    expected = rf"^{re.escape(str(path))}:4:15: cannot read: not valid YAML: mapping values"
    with pytest.raises(ConfigError, match=expected):
        load_config(path)


def test_wrong_type_and_cross_field_errors(tmp_path: Path):
    path = tmp_path / "params.yaml"
    path.write_text("rollout:\n  group_size: many\n")
    with pytest.raises(ConfigError, match="rollout.group_size"):
        load_config(path)
    path.write_text("problems:\n  min_digits: 3\n  max_digits: 2\n")
    with pytest.raises(ConfigError, match="min_digits"):
        load_config(path)


def test_the_params_yaml_lists_the_coevolver_knobs():
    assert "coevolver.curriculum.proposer.enabled" in dict(_walk(Config))  # the walk above reaches them


def test_renamed_keys_are_errors_naming_the_new_key(tmp_path: Path):
    path = tmp_path / "params.yaml"
    path.write_text("eval:\n  with_skills: false\n")
    with pytest.raises(ConfigError, match=r"params.yaml: eval: with_skills: renamed; write `with_context` instead"):
        load_config(path)
    path.write_text("coevolvers:\n  - kind: curriculum\n  - kind: skill_bank\n")
    with pytest.raises(
        ConfigError, match=r"params.yaml: coevolvers: no longer a setting; write the list under `coevolver`"
    ):
        load_config(path)
    path.write_text("eval:\n  with_context: false\ncoevolver:\n  - kind: curriculum\n  - kind: skill_bank\n")
    cfg = load_config(path)
    assert not cfg.eval.with_context and [entry.kind for entry in cfg.coevolver_list] == ["curriculum", "skill_bank"]


def test_derived_values():
    cfg = Config.model_validate(
        {"rollout": {"problems_per_iter": 3, "group_size": 6}, "problems": {"min_digits": 2, "max_digits": 4}}
    )
    assert cfg.rollouts_per_iter == 18
    assert cfg.levels == [2, 3, 4]
