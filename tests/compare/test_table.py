"""The comparison table's readout rules and arithmetic on records built by hand (coevo/compare/table.py),
and the order a sitting runs its arms in (coevo/compare/results.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from coevo.compare.results import interleaved
from coevo.compare.spec import Arm, Spec
from coevo.compare.table import build_table, markdown, readout


def _spec(**budget) -> Spec:
    arms = [Arm("ref", Path("params.yaml"), {}, 1), Arm("new", Path("params.yaml"), {}, 2)]
    base = {"iterations": None, "train_seconds": None, "max_iterations": None}
    return Spec(Path("s.yaml"), "t", [0], arms, "ref", eval_every=1, overrides={}, **(base | budget))


def _marker(arm: str, step_seconds: list[float], accs: list[float], passes: list[list[int]]) -> dict:
    """A finished run: one step per iteration (all of it in `rollout`), an evaluation after each."""
    steps = [
        {
            "iteration": i + 1,
            "seconds": {"rollout": s, "verify": 0.0, "coevolve": 0.0, "update": 0.0, "eval": 0.5},
            "zero_var_share": 0.5,
        }
        for i, s in enumerate(step_seconds)
    ]
    clock = [0.0]
    for s in step_seconds:
        clock.append(clock[-1] + s)
    curve = [
        {
            "iteration": i,
            "train_seconds": clock[i],
            "acc": accs[i],
            "verdicts": {f"p{j}": bool(v) for j, v in enumerate(passes[i])},
        }
        for i in range(len(accs))
    ]
    return {"arm": arm, "seed": 0, "identity": "x", "record": {"steps": steps, "curve": curve}}


def test_equal_training_seconds_reads_each_arm_at_its_last_evaluation_within_the_budget():
    spec = _spec(train_seconds=3.0, max_iterations=3)
    # ref: clock 0, 1, 2, 3 -> read at iteration 3 (3.0 <= 3.0); new: clock 0, 2, 4, 6 -> iteration 1
    ref = _marker(
        "ref", [1.0, 1.0, 1.0], [0.0, 0.25, 0.5, 0.5], [[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0]]
    )
    new = _marker(
        "new", [2.0, 2.0, 2.0], [0.0, 0.75, 1.0, 1.0], [[0, 0, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1]]
    )
    assert readout(spec, ref["record"]["curve"])["iteration"] == 3
    assert readout(spec, new["record"]["curve"])["iteration"] == 1
    table = build_table(spec, [new, ref])
    rows = {r["arm"]: r for r in table["runs"]}
    assert (rows["ref"]["final_acc"], rows["new"]["final_acc"]) == (0.5, 0.75)
    assert rows["new"]["stage_seconds"] == {"rollout": 6.0, "verify": 0.0, "coevolve": 0.0, "update": 0.0, "eval": 1.5}
    # paired at the readouts: new passes p0 p1 p2, ref p0 p1 -> e = [0, 0, 1, 0], d = 0.25
    vs = table["arms"][1]["vs_reference"]
    assert vs["mean_diff"] == pytest.approx(0.25) and vs["seeds"][0]["diff"] == pytest.approx(0.25)
    assert [a["arm"] for a in table["arms"]] == ["ref", "new"]  # spec order, whatever the markers' order
    assert "+25.0" in markdown(table)


def test_a_budget_some_run_never_reached_reads_every_run_at_the_smallest_runs_total():
    """ref's three iterations take 3 s, new's 6 s: under a 10 s budget neither reaches it, and reading
    each at its last evaluation would compare ref at 3 s with new at 6 s. Both are read at 3 s."""
    ref = _marker(
        "ref", [1.0, 1.0, 1.0], [0.0, 0.25, 0.5, 0.5], [[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0]]
    )
    new = _marker(
        "new", [2.0, 2.0, 2.0], [0.0, 0.75, 1.0, 1.0], [[0, 0, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1]]
    )
    short = build_table(_spec(train_seconds=10.0, max_iterations=3), [ref, new])
    assert not any(r["budget_reached"] for r in short["runs"]) and "budget not reached" in markdown(short)
    assert short["budget"]["read_at_train_seconds"] == 3.0 and "all read at 3.0 s" in markdown(short)
    rows = {r["arm"]: r for r in short["runs"]}
    assert (rows["ref"]["readout_iteration"], rows["new"]["readout_iteration"]) == (3, 1)
    # paired at those readouts (as under a 3 s budget): new passes p0 p1 p2, ref p0 p1 -> +0.25
    assert short["arms"][1]["vs_reference"]["mean_diff"] == pytest.approx(0.25)
    # a budget every run reached reads at the budget and says nothing more
    assert "read_at_train_seconds" not in build_table(_spec(train_seconds=3.0, max_iterations=3), [ref, new])["budget"]


def test_equal_iterations_reads_the_evaluation_after_the_last_iteration():
    spec = _spec(iterations=2)
    ref = _marker("ref", [1.0, 1.0], [0.0, 0.25, 0.5], [[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0]])
    new = _marker("new", [9.0, 9.0], [0.0, 0.5, 0.25], [[0, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 1]])
    table = build_table(spec, [ref, new])
    assert [r["readout_iteration"] for r in table["runs"]] == [2, 2]
    # new at iteration 2: p3 only; ref: p0 p1 -> e = [-1, -1, 0, 1], d = -0.25
    assert table["arms"][1]["vs_reference"]["mean_diff"] == pytest.approx(-0.25)
    assert table["complete"] and table["arms"][1]["time_ratio"]["ratio"] is None  # 2 steps each: below 5
    # each arm against its own iteration 0 (nothing passed): ref gains p0 p1 = +50, new p3 = +25
    assert [a["gain"]["mean_diff"] for a in table["arms"]] == [pytest.approx(0.5), pytest.approx(0.25)]
    assert "+50.0" in markdown(table)


def _with_validation(marker: dict, val_passes: list[list[int]]) -> dict:
    """The marker with validation verdicts at each evaluation (validation problems v0, v1, ...)."""
    for point, passes in zip(marker["record"]["curve"], val_passes):
        point["val_verdicts"] = {f"v{j}": bool(v) for j, v in enumerate(passes)}
        point["val_acc"] = sum(passes) / len(passes)
    return marker


def test_validation_is_paired_at_the_same_readouts_as_the_test_split_and_only_where_every_run_kept_it():
    """Read after iteration 1 of 2, test and validation disagree on purpose: new is 25 points ahead of
    ref on test but 50 behind on validation (at iteration 2, not read, it would be 50 ahead). A choice
    made on the table reads the validation column."""
    spec = _spec(iterations=1)
    ref = _marker("ref", [1.0, 1.0], [0.0, 0.25, 0.5], [[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0]])
    new = _marker("new", [9.0, 9.0], [0.0, 0.5, 0.25], [[0, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 1]])
    _with_validation(ref, [[0, 0], [1, 0], [0, 0]])
    _with_validation(new, [[0, 0], [0, 0], [1, 0]])
    table = build_table(spec, [ref, new])
    assert table["arms"][1]["vs_reference"]["mean_diff"] == pytest.approx(0.25)
    assert table["arms"][1]["val_vs_reference"]["mean_diff"] == pytest.approx(-0.5)
    assert [r["val_acc"] for r in table["runs"]] == [0.5, 0.0]
    assert "| s0:+25.0 | -50.0 [" in markdown(table)  # the validation column, beside the test split's
    del ref["record"]["curve"][1]["val_verdicts"]  # a run evaluated before validation verdicts were kept
    older = build_table(spec, [ref, new])
    assert older["arms"][1]["val_vs_reference"] is None and "| s0:+25.0 | - |" in markdown(older)


def test_arms_take_turns_going_first_by_the_seeds_place_in_the_spec_whatever_the_sitting_runs():
    """Seeds run one per sitting (`--seed 1`, then `--seed 2`) must still rotate which arm goes first,
    or the reference always runs first and meets the sitting's load first."""
    spec = replace(_spec(iterations=1), seeds=[0, 1, 2])
    whole = interleaved(spec, [0, 1, 2])
    assert whole == [("ref", 0), ("new", 0), ("new", 1), ("ref", 1), ("ref", 2), ("new", 2)]
    assert interleaved(spec, [1]) == whole[2:4] and interleaved(spec, [2, 1]) == whole[4:] + whole[2:4]


def _seeded(marker: dict, seed: int, spec_sha256: str | None = None) -> dict:
    marker = {**marker, "seed": seed}
    if spec_sha256 is not None:
        marker["spec_sha256"] = spec_sha256
    return marker


def test_every_mean_over_seeds_is_a_t_interval_named_in_the_table_with_its_seed_count_and_p_value():
    """Three seeds: the test difference, the gain over iteration 0 and the validation difference all
    take the seed-level t-interval; the markdown says which method and how many seeds, with p."""
    spec = replace(_spec(iterations=1), seeds=[0, 1, 2], sha256="ab" * 32)
    markers = []
    for seed, new_final in enumerate(([1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0])):  # new - ref: 0, +25, +50
        ref = _marker("ref", [1.0], [0.0, 0.25], [[0, 0, 0, 0], [1, 0, 0, 0]])
        new = _marker("new", [1.0], [0.0, sum(new_final) / 4], [[0, 0, 0, 0], new_final])
        _with_validation(ref, [[0, 0], [1, 0]])
        _with_validation(new, [[0, 0], [1, 0]])
        markers += [_seeded(ref, seed, spec.sha256), _seeded(new, seed, spec.sha256)]
    table = build_table(spec, markers)
    new = table["arms"][1]
    # per-seed differences 0, 0.25, 0.5: mean 0.25, sd 0.25, se 0.144, t(0.975, 2) = 4.303 -> half 0.621,
    # clipped below at -1: [-0.371, 0.871]; t = 1.732, p (df 2) = 0.225
    vs = new["vs_reference"]
    assert (vs["method"], vs["n_seeds"]) == ("t over seeds", 3)
    assert vs["ci95"] == pytest.approx([-0.371, 0.871], abs=1e-3) and vs["p_value"] == pytest.approx(0.225, abs=1e-3)
    # the gain over iteration 0 (+25, +50, +75: the same spread) and validation (all 0) take the same rule
    assert new["gain"]["method"] == "t over seeds" and new["gain"]["ci95"] == pytest.approx([-0.121, 1.0], abs=1e-3)
    assert new["val_vs_reference"]["ci95"] == [0.0, 0.0] and new["val_vs_reference"]["p_value"] == 1.0
    md = markdown(table)
    assert "Student t over the per-seed paired differences (df = seeds - 1)" in md and "seeds [0, 1, 2]" in md
    assert "| new | 3 |" in md and "+25.0 [-37.1, +87.1] p 0.23 |" in md
    assert "Spec sha256 abababababab: every run was made under this version" in md
    assert table["spec_sha256"] == spec.sha256 and all(r["spec_sha256"] == spec.sha256 for r in table["runs"])


def test_one_seed_is_marked_and_runs_without_a_recorded_spec_hash_still_enter():
    """A one-seed table marks its interval as problem sampling only; markers written before runs kept
    the spec's hash (the committed ones) still load, and the table says they have none."""
    spec = replace(_spec(iterations=1), sha256="cd" * 32)
    ref = _marker("ref", [1.0], [0.0, 0.25], [[0, 0, 0, 0], [1, 0, 0, 0]])
    new = _marker("new", [1.0], [0.0, 0.5], [[0, 0, 0, 0], [1, 1, 0, 0]])
    table = build_table(spec, [ref, _seeded(new, 0, "ef" * 32)])
    assert table["arms"][1]["vs_reference"]["method"].startswith("one seed")
    md = markdown(table)
    assert "(1 seed: problems only)" in md
    assert "runs made under another version of it: new s0" in md
    assert "runs made before the spec's hash was recorded: ref s0" in md


def test_a_table_of_runs_that_all_predate_the_spec_hash_says_so_once():
    spec = replace(_spec(iterations=1), sha256="12" * 32)
    ref = _marker("ref", [1.0], [0.0, 0.25], [[0, 0, 0, 0], [1, 0, 0, 0]])
    new = _marker("new", [1.0], [0.0, 0.5], [[0, 0, 0, 0], [1, 1, 0, 0]])
    md = markdown(build_table(spec, [ref, new]))
    assert "Spec sha256 121212121212; every run was made before runs recorded the spec's hash." in md
