"""The shipped examples load, and the co-evolving one is the configuration its figure was measured
with: the curriculum arm of bench/specs/smollm2_frontier.yaml, to the hash of what it computes."""

from __future__ import annotations

import pytest

from coevo.compare.spec import arm_config, identity, load_spec
from coevo.config import load_config

from .conftest import ROOT


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_each_example_loads(path):
    load_config(path)


def test_the_curriculum_example_is_the_measured_arm(monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)  # the spec's params path is relative to the repository root
    spec = load_spec(ROOT / "bench" / "specs" / "smollm2_frontier.yaml")
    arm = next(arm for arm in spec.arms if arm.name == "curriculum")
    measured = arm_config(spec, arm, seed=0, run_dir=tmp_path / "run")
    assert identity(load_config(ROOT / "examples" / "smollm2-curriculum.yaml")) == identity(measured)
