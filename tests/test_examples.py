"""The shipped examples load, and the co-evolving one is the configuration its figure was measured
with: the curriculum_proposer arm of bench/specs/smollm2_frontier_proposer.yaml, to the hash of what
it computes, but for how its validation split shares the same held-out problems."""

from __future__ import annotations

import pandas as pd
import pytest

from coevo.compare.spec import arm_config, identity, load_spec
from coevo.config import load_config
from coevo.prepare import build_all_splits

from .conftest import ROOT


@pytest.mark.parametrize("path", sorted((ROOT / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_each_example_loads(path):
    load_config(path)


def test_the_curriculum_example_is_the_measured_arm(monkeypatch, tmp_path):
    """The example keeps the default problems.val_split (every cell gives validation some problems)
    where the measured runs split test first: the same held-out problems, shared otherwise between
    test and validation, so the example trains on the measured arm's problems exactly (its proposer
    de-duplicates against test and validation together: the same set)."""
    monkeypatch.chdir(ROOT)  # the spec's params path is relative to the repository root
    spec = load_spec(ROOT / "bench" / "specs" / "smollm2_frontier_proposer.yaml")
    arm = next(arm for arm in spec.arms if arm.name == "curriculum_proposer")
    measured = arm_config(spec, arm, seed=0, run_dir=tmp_path / "run")
    example = load_config(ROOT / "examples" / "smollm2-curriculum.yaml")
    assert example.problems.val_split == "proportional" and measured.problems.val_split == "after_test"
    split_as_measured = example.problems.model_copy(update={"val_split": "after_test"})
    as_measured = example.model_copy(update={"problems": split_as_measured})
    assert identity(as_measured) == identity(measured)
    ours, theirs = build_all_splits(example), build_all_splits(measured)
    pd.testing.assert_frame_equal(ours["train"], theirs["train"])
    assert 1 in set(ours["val"]["level"]) and 1 not in set(theirs["val"]["level"])  # the setting reaches the split
    held = {split: set(ours[split]["prompt"]) for split in ("test", "val")}
    assert held["test"] | held["val"] == set(theirs["test"]["prompt"]) | set(theirs["val"]["prompt"])
