"""HumanEval in the sandbox: all 164 canonical solutions pass; a wrong solution derived from each
(the canonical one with its return value changed) fails; the jsonl loader names file, line, field."""

from __future__ import annotations

import json

import pytest

from coevo.code.problems import humaneval_problems, load_code_file, program_of
from coevo.problems.loader import ProblemsFileError
from coevo.sandbox import Job, Limits, run_jobs

# Wraps the entry point so every return value changes type-appropriately (True <-> False, n -> n + 1,
# s -> s + "?", [..] -> [..] + [None], ...); recursive calls go through the wrapper too.
PERTURB = """

def _coevo_perturb(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "?"
    if isinstance(value, (list, tuple)):
        return type(value)(list(value) + [None])
    if isinstance(value, dict):
        return {**value, "?": None}
    return 0 if value is None else None

_coevo_original = {entry}

def {entry}(*args, **kwargs):
    return _coevo_perturb(_coevo_original(*args, **kwargs))
"""


@pytest.fixture(scope="module")
def humaneval():
    return humaneval_problems()


def test_all_canonical_pass_and_every_derived_wrong_solution_fails(humaneval):
    assert len(humaneval) == 164 and humaneval["id"].is_unique
    right = [
        Job(program_of(p, s), tuple(t))
        for p, s, t in zip(humaneval["prompt"], humaneval["solution"], humaneval["tests"])
    ]
    wrong = [
        Job(program_of(p, s) + PERTURB.replace("{entry}", e), tuple(t))
        for p, s, e, t in zip(humaneval["prompt"], humaneval["solution"], humaneval["entry_point"], humaneval["tests"])
    ]
    verdicts = run_jobs(right + wrong, Limits(wall_s=20, cpu_s=10, per_test_s=10))
    canonical, derived = verdicts[:164], verdicts[164:]
    not_passing = {pid: v.summary() for pid, v in zip(humaneval["id"], canonical) if not v.passed}
    passing_wrong = [pid for pid, v in zip(humaneval["id"], derived) if v.passed]
    assert not_passing == {}
    assert passing_wrong == []
    assert {v.status for v in derived} <= {"failed", "timeout", "crashed"}
    assert sum(v.status == "failed" for v in derived) >= 150  # almost all fail an assertion, not by accident


def test_code_jsonl_errors_name_file_line_and_field(tmp_path):
    good = {
        "task_id": "t/0",
        "prompt": "def f(x):\n",
        "entry_point": "f",
        "test": "def check(c):\n    assert c(1) == 2\n",
        "canonical_solution": "    return x + 1\n",
    }
    lines = [
        json.dumps(good),
        "{not json",
        json.dumps({**good, "task_id": "t/1", "entry_point": 3}),
        json.dumps({k: v for k, v in good.items() if k != "test"} | {"task_id": "t/2"}),
        json.dumps({**good, "prompt": "   "} | {"task_id": "t/3"}),
        json.dumps(good),
    ]
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ProblemsFileError) as err:
        load_code_file(path)
    message = str(err.value)
    for expected in (
        "line 2: invalid JSON",
        "line 3, field 'entry_point': wrong type int",
        "line 4, field 'test': missing",
        "line 5, field 'prompt': empty prompt",
        "line 6, field 'task_id': duplicate id 't/0' (first at line 1)",
    ):
        assert f"{path}: {expected}" in message
    path.write_text(json.dumps(good) + "\n")
    frame = load_code_file(path)
    assert frame.loc[0, "tests"] == [good["test"] + "\ncheck(f)\n"] and frame.loc[0, "family"] == "code"
