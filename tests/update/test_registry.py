"""The objective registry: lookup by name, duplicates and unknown names rejected."""

import pytest

from coevo.config import ObjectiveConfig
from coevo.update.objectives import GRPO, Objective, build_objective, objective_names, register_objective, registry


@pytest.fixture
def scratch_registry(monkeypatch):
    """A copy of the registry, so test registrations do not leak into other tests."""
    monkeypatch.setattr(registry.OBJECTIVES, "_entries", dict(registry.OBJECTIVES._entries))


def test_importing_the_package_registers_grpo():
    assert "grpo" in objective_names()


def test_build_objective_from_config():
    objective = build_objective(ObjectiveConfig(name="grpo", clip_high=0.3))
    assert isinstance(objective, GRPO)
    assert isinstance(objective, Objective)
    assert objective.name == "grpo"
    assert objective.cfg.clip_high == 0.3
    assert not objective.needs_reference
    assert build_objective(ObjectiveConfig(kl_coef=0.1)).needs_reference


def test_duplicate_registration_is_rejected(scratch_registry):
    with pytest.raises(ValueError, match="'grpo'"):

        @register_objective("grpo")
        class Other:
            pass


def test_new_objective_registers_and_builds(scratch_registry):
    @register_objective("constant")
    class Constant:
        needs_reference = False

        def __init__(self, cfg):
            self.cfg = cfg

    assert objective_names() == ["constant", "ess", "grpo", "opsa", "opsd", "rlsd", "sdar"]
    built = build_objective(ObjectiveConfig(name="constant"))
    assert isinstance(built, Constant) and built.name == "constant"
    with pytest.raises(ValueError, match="'constant'"):
        register_objective("constant")(type("Again", (), {}))


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown objective 'nope'.*grpo"):
        build_objective(ObjectiveConfig(name="nope"))
