"""The pass@k curve (coevo/evaluation.py, `coevo eval --pass-curve N`): the unbiased estimator on numbers
derived by hand, its intervals, the paired base-vs-trained difference, and the curve of the tiny
policy drawn through the CLI and the bench script's pairing."""

from __future__ import annotations

import json
import sys
from math import comb
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coevo.evaluation import CURVE_K, curve_difference, pass_at_k, pass_curve

from .conftest import ROOT
from .test_cli import _params


def test_the_estimator_matches_the_hand_derivation():
    # n = 4 samples, c = 2 correct, k = 2: of the C(4, 2) = 6 pairs, only the C(2, 2) = 1 pair of the
    # two wrong samples misses, so pass@2 = 1 - 1/6 = 5/6
    assert pass_at_k(4, 2, 2) == pytest.approx(5 / 6)
    # n = 16, c = 1, k = 4: 1 - C(15, 4) / C(16, 4) = 1 - 1365 / 1820 = 0.25 (= k / n with one correct)
    assert pass_at_k(16, 1, 4) == pytest.approx(0.25)
    # n = 16, c = 4, k = 2: 1 - C(12, 2) / C(16, 2) = 1 - 66 / 120 = 0.45
    assert pass_at_k(16, 4, 2) == pytest.approx(0.45)
    # pass@1 is the share correct; none correct is 0; k above the wrong samples (k > n - c) is 1
    assert pass_at_k(16, 5, 1) == pytest.approx(5 / 16) and pass_at_k(16, 0, 16) == 0.0
    assert pass_at_k(16, 13, 4) == 1.0 and pass_at_k(16, 16, 1) == 1.0
    for c in range(17):  # the product form equals the binomial form everywhere
        for k in range(1, 17):
            assert pass_at_k(16, c, k) == pytest.approx(1 - comb(16 - c, k) / comb(16, k), abs=1e-12)
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k(8, 2, 9)


def test_the_curve_averages_problems_and_its_intervals_resample_them():
    # two problems, 16 samples each: one always right, one never -> pass@k = 0.5 at every k; a
    # resample of the 2 problems holds 0, 1 or 2 right ones (1/4, 1/2, 1/4): percentiles 0 and 1
    curve = pass_curve({"a": 16, "b": 0}, 16)
    assert curve["k"] == list(range(1, CURVE_K + 1)) and curve["pass_at_k"] == [0.5] * CURVE_K
    assert curve["ci95"][0] == [0.0, 1.0]
    # one problem with 1 of 16 right: pass@k = k / 16, a single problem's interval is the point
    single = pass_curve({"a": 1}, 16)
    assert single["pass_at_k"] == pytest.approx([k / 16 for k in range(1, 17)])
    assert single["ci95"][3] == pytest.approx([0.25, 0.25])
    with pytest.raises(ValueError, match="at least 16 samples"):
        pass_curve({"a": 1}, 8)


def test_the_difference_is_paired_by_problem():
    # the same counts on other problems swap: each problem differs by +-1 at every k, mean 0; paired, the
    # interval spans the per-problem differences' resampled means ([-1, 1] for 2 problems), unpaired
    # means of two identical curves would give the point 0
    base, trained = pass_curve({"a": 16, "b": 0}, 16), pass_curve({"a": 0, "b": 16}, 16)
    diff = curve_difference(trained, base)
    assert diff["diff"] == [0.0] * CURVE_K and diff["ci95"][0] == [-1.0, 1.0]
    assert curve_difference(base, base)["ci95"][15] == [0.0, 0.0]
    with pytest.raises(ValueError, match="same problems"):
        curve_difference(pass_curve({"c": 3}, 16), base)


@pytest.fixture(scope="module")
def curve_run(tiny_policy_dir, tmp_path_factory):
    """`coevo eval --pass-curve 16 --json` on the tiny policy: (params, result)."""
    from coevo.cli import app

    tmp = tmp_path_factory.mktemp("curve")
    params = _params(tmp)
    result = CliRunner().invoke(app, ["eval", str(tiny_policy_dir), "--params", params, "--pass-curve", "16", "--json"])
    assert result.exit_code == 0, result.output
    return params, json.loads(result.stdout)


def test_the_tiny_policy_curve_through_the_cli(curve_run):
    params, result = curve_run
    curve = result["pass_curve"]
    assert curve["samples_per_problem"] == 16 and curve["problems"] == result["n"] == len(curve["correct"])
    # pass@1 is the mean share of correct samples; the curve never falls with k; each interval holds its point
    counts = list(curve["correct"].values())
    assert curve["pass_at_k"][0] == pytest.approx(sum(counts) / (16 * len(counts)))
    assert all(a <= b + 1e-12 for a, b in zip(curve["pass_at_k"], curve["pass_at_k"][1:]))
    assert all(low <= p <= high for p, (low, high) in zip(curve["pass_at_k"], curve["ci95"]))
    # pass@16 is the share of problems with any correct sample among the 16
    assert curve["pass_at_k"][15] == pytest.approx(sum(c > 0 for c in counts) / len(counts))
    assert 0 < sum(counts) < 16 * len(counts)  # the tiny policy solves some samples, not all: a real curve


def test_the_default_evaluation_draws_no_curve_and_too_few_samples_are_refused(curve_run, tiny_policy_dir):
    from coevo.cli import app

    params, with_curve = curve_run
    plain = CliRunner().invoke(app, ["eval", str(tiny_policy_dir), "--params", params, "--json"])
    assert plain.exit_code == 0, plain.output
    result = json.loads(plain.stdout)
    assert "pass_curve" not in result and result["metrics"] == with_curve["metrics"]
    refused = CliRunner().invoke(app, ["eval", str(tiny_policy_dir), "--params", params, "--pass-curve", "8"])
    assert refused.exit_code == 2 and "needs at least 16 samples" in " ".join(refused.output.split())


def test_the_bench_script_pairs_base_and_trained_on_the_same_problems(curve_run, tiny_policy_dir, tmp_path):
    """bench/pass_curve.py with the same checkpoint as base and trained: the same samples (same sampling
    seed), so every paired difference is exactly 0, and the table has one row per k."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import pass_curve as bench
    finally:
        sys.path.remove(str(ROOT / "bench"))
    params, _ = curve_run
    result = bench.compare(str(tiny_policy_dir), str(tiny_policy_dir), params, {}, 16, None)
    assert result["base"]["correct"] == result["trained"]["correct"]
    assert result["difference"]["diff"] == [0.0] * CURVE_K
    assert all(ci == [0.0, 0.0] for ci in result["difference"]["ci95"])
    from coevo.evaluation import curve_markdown

    table = curve_markdown({"base": result["base"], "trained": result["trained"]}, result["difference"])
    assert table.count("\n") == 2 + CURVE_K and "| 16 |" in table and Path(result["base"]["checkpoint"]).is_dir()
