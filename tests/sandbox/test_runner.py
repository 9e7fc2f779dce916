"""Mode selection, order-preserving parallel runs, and the private working directory."""

from __future__ import annotations

import os

import pytest

from coevo.sandbox import Job, Limits, isolation_for, namespaces_available, run_jobs


def test_auto_picks_namespaces_exactly_when_the_probe_passes():
    assert isolation_for("auto").name == ("namespaces" if namespaces_available() else "rlimits")
    assert "network" in isolation_for("auto").promises() or not namespaces_available()
    with pytest.raises(ValueError, match="unknown sandbox mode 'docker'"):
        isolation_for("docker")


def test_parallel_runs_keep_order_and_the_working_directory_is_private_and_removed():
    jobs = [Job(f"def f():\n    return {i}\n", (f"assert f() == {i}", "assert f() == -1")) for i in range(6)]
    jobs.append(Job("import os\nprint('cwd', os.getcwd(), sorted(os.listdir('.')))\nopen('scratch.txt', 'w').write('x')", ("pass",)))
    verdicts = run_jobs(jobs, Limits(wall_s=10), mode="rlimits", workers=3)
    assert [v.outcomes for v in verdicts[:6]] == [("pass", "fail")] * 6
    line = next(line for line in verdicts[6].output.splitlines() if line.startswith("cwd "))
    _, cwd, listing = line.split(" ", 2)
    assert listing == "[]" and cwd.endswith("/work") and not os.path.exists(cwd)  # empty, then removed
