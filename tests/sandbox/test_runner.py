"""Mode selection, order-preserving parallel runs, and the private working directory."""

from __future__ import annotations

import os

import pytest

from coevo.sandbox import Job, Limits, isolation_for, namespaces_available, run_job, run_jobs

from .conftest import require_mode


def test_namespaces_sandbox_runs_on_this_machine():
    """CI's machine must run the real isolation: fails with the probe's reason where it cannot."""
    require_mode("namespaces")
    assert isolation_for("namespaces").promises() >= {"network", "files", "parent", "fork"}


def test_auto_contains_a_hostile_program_on_this_machine(tmp_path):
    """ "auto" must pick an isolation that actually isolates here: a program that writes outside its
    directory, reads the parent's files and signals its parent changes nothing (a probe that wrongly
    says no falls back to rlimits, where all three succeed as root; one that wrongly says yes breaks the run)."""
    require_mode("namespaces")
    secret, pwned = tmp_path / "secret.txt", tmp_path / "pwned.txt"
    secret.write_text("hunter2")
    program = (
        "import os, signal\n"
        f"for act in (lambda: open({str(pwned)!r}, 'w').write('x'), lambda: print(open({str(secret)!r}).read()),\n"
        f"            lambda: os.kill({os.getpid()}, signal.SIGCONT)):\n"
        "    try:\n        act()\n        print('escaped')\n    except OSError as e:\n        print('blocked', "
        "type(e).__name__)\n"
        "print('pid', os.getpid())\n"
    )
    verdict = run_job(Job(program, ("pass",)), Limits(wall_s=10), mode="auto")
    assert verdict.passed and verdict.mode == "namespaces", verdict.summary()
    assert verdict.output.count("blocked") == 3 and "escaped" not in verdict.output, verdict.output
    assert "pid 2\n" in verdict.output  # its own pid namespace: the supervisor is init (1), the program's process 2
    assert not pwned.exists() and "hunter2" not in verdict.output


def test_probe_fails_closed_where_unshare_is_missing_or_refused(tmp_path, monkeypatch):
    """No `unshare`, or one that cannot create namespaces, makes the probe say no (auto -> rlimits)."""
    monkeypatch.setenv("PATH", str(tmp_path))
    assert namespaces_available.__wrapped__() is False  # bypass the once-per-process cache
    refused = tmp_path / "unshare"
    refused.write_text("#!/bin/sh\necho 'unshare: unshare failed: Operation not permitted' >&2\nexit 1\n")
    refused.chmod(0o755)
    assert namespaces_available.__wrapped__() is False


def test_unknown_mode_is_rejected():
    with pytest.raises(ValueError, match="unknown sandbox mode 'docker'"):
        isolation_for("docker")


def test_parallel_runs_keep_order_and_the_working_directory_is_private_and_removed():
    jobs = [Job(f"def f():\n    return {i}\n", (f"assert f() == {i}", "assert f() == -1")) for i in range(6)]
    jobs.append(
        Job(
            "import os\nprint('cwd', os.getcwd(), sorted(os.listdir('.')))\nopen('scratch.txt', 'w').write('x')",
            ("pass",),
        )
    )
    verdicts = run_jobs(jobs, Limits(wall_s=10), mode="rlimits", workers=3)
    assert [v.outcomes for v in verdicts[:6]] == [("pass", "fail")] * 6
    line = next(line for line in verdicts[6].output.splitlines() if line.startswith("cwd "))
    _, cwd, listing = line.split(" ", 2)
    assert listing == "[]" and cwd.endswith("/work") and not os.path.exists(cwd)  # empty, then removed
