"""metrics.jsonl (coevo/metrics_log.py): a run starting at iteration `first` keeps the earlier
iterations' lines and drops the rest, a kill's torn last line is dropped, a damaged line elsewhere is
a clear error that leaves the file as it was."""

from __future__ import annotations

import json

import pytest

from coevo.errors import InputError
from coevo.metrics_log import MetricsLog


def _iterations(path) -> list[float]:
    return [json.loads(line)["iteration"] for line in path.read_text().splitlines()]


def test_a_run_from_first_keeps_the_earlier_lines_and_appends(tmp_path):
    log = MetricsLog(tmp_path, 1)
    for it in (1, 2, 3):
        log.append({"iteration": float(it), "verify/pass_rate": 0.5})
    MetricsLog(tmp_path, 3).append({"iteration": 3.0, "verify/pass_rate": 0.75})  # iteration 3 re-run
    assert _iterations(tmp_path / "metrics.jsonl") == [1.0, 2.0, 3.0]
    assert json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])["verify/pass_rate"] == 0.75
    MetricsLog(tmp_path, 1)
    assert (tmp_path / "metrics.jsonl").read_text() == ""


def test_a_torn_last_line_is_dropped_and_a_damaged_one_is_an_error(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"iteration": 1.0}\n{"iteration": 2.0}\n{"iterat')
    MetricsLog(tmp_path, 3).append({"iteration": 3.0})
    assert _iterations(path) == [1.0, 2.0, 3.0]

    damaged = '{"iteration": 1.0}\nnot json\n{"iteration": 2.0}\n'
    path.write_text(damaged)
    with pytest.raises(InputError, match=r"metrics.jsonl: line 2 is not JSON"):
        MetricsLog(tmp_path, 3)
    assert path.read_text() == damaged
