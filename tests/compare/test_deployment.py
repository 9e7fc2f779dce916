"""The nightly comparison deployment: the coevo-compare flow on a cron, each night in a dated directory."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from coevo.compare.spec import Arm, Spec
from flows.compare import compare_flow, nightly_deployment, results_dir


def test_nightly_deployment_runs_the_spec_on_its_cron_in_a_dated_directory(tmp_path):
    deployment = nightly_deployment(str(tmp_path / "spec.yaml"), str(tmp_path / "nightly"), "0 3 * * *", "compare-tiny")
    assert deployment.name == "compare-tiny" and deployment.flow_name == compare_flow.name == "coevo-compare"
    assert deployment.parameters == {
        "spec_file": str(tmp_path / "spec.yaml"),
        "out": str(tmp_path / "nightly"),
        "dated": True,
    }
    assert [s.schedule.cron for s in deployment.schedules] == ["0 3 * * *"]
    spec = Spec(Path("s.yaml"), "tiny", [0], [Arm("a", Path("params.yaml"), {}, 1)], "a", 2, None, None, None, {})
    night = datetime(2026, 12, 5, 3, 0, tzinfo=timezone.utc)
    assert results_dir(spec, str(tmp_path / "nightly"), True, night) == tmp_path / "nightly" / "2026-12-05"
    assert results_dir(spec, None, False) == Path("runs/compare/tiny")
