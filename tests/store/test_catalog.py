"""Catalog: real DuckDB files over real parquet shards; idempotent, transactional ingest; the documented queries."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from coevo.coevolvers import SkillBank, SkillDraft
from coevo.config import CoevolverConfig, SkillBankConfig
from coevo.io import hash_file
from coevo.store.catalog import TABLES, Catalog, IterationFiles
from coevo.store.query_cli import query_app
from schemas import SchemaError, write_rewards, write_rollouts

# rollout_id, problem_id, family, variant, probe_skill, skills, completion, reward (1.0 = passed)
ITERATIONS = {
    1: [
        ("r1-0", "p-add-1", "add", "solo", "", [], "3", 1.0),
        ("r1-1", "p-add-1", "add", "solo", "", [], "4", 0.0),
        ("r1-2", "p-add-2", "add", "base", "s1", [], "5", 0.0),
        ("r1-3", "p-add-2", "add", "base", "s1", [], "7", 1.0),
        ("r1-4", "p-add-2", "add", "probe", "s1", ["s1"], "7", 1.0),
        ("r1-5", "p-add-2", "add", "probe", "s1", ["s1"], "7", 1.0),
        ("r1-6", "p-mul-1", "mul", "solo", "", [], "12", 1.0),
        ("r1-7", "p-mul-1", "mul", "solo", "", [], "13", 0.0),
        ("r1-8", "p-mul-1", "mul", "solo", "", [], "14", 0.0),
    ],
    2: [
        ("r2-0", "p-add-1", "add", "base", "s1", [], "3", 1.0),
        ("r2-1", "p-add-1", "add", "probe", "s1", ["s1"], "2", 0.0),
        ("r2-2", "p-mul-1", "mul", "base", "s2", [], "12", 1.0),
        ("r2-3", "p-mul-1", "mul", "probe", "s2", ["s2"], "12", 1.0),
    ],
}
# The gaps are the iterations' matched groups: s1 on p-add-2 at 1: mean(1,1) - mean(0,1) = 0.5;
# s1 on p-add-1 at 2: 0 - 1 = -1.0 (utility 0.5*0.5 + 0.5*-1 = -0.25); s2 on p-mul-1 at 2: 1 - 1 = 0.0.
REPORTS = {
    1: {
        "iteration": 1,
        "frozen": False,
        "new_candidates": ["s2"],
        "measured": [{"id": "s1", "problem_id": "p-add-2", "gap": 0.5}],
        "admitted": [{"id": "s1", "utility": 0.5, "count": 1}],
        "rejected": [],
        "promoted": [],
        "retired": [],
        "counts": {"trial": 1, "active": 1, "stable": 0, "retired": 0},
    },
    2: {
        "iteration": 2,
        "frozen": False,
        "new_candidates": [],
        "measured": [
            {"id": "s1", "problem_id": "p-add-1", "gap": -1.0},
            {"id": "s2", "problem_id": "p-mul-1", "gap": 0.0},
        ],
        "admitted": [],
        "rejected": [{"id": "s2", "utility": 0.0, "count": 1}],
        "promoted": [],
        "retired": [{"id": "s1", "utility": -0.25, "reason": "low utility"}],
        "counts": {"trial": 0, "active": 0, "stable": 0, "retired": 2},
    },
}


def frames(iteration: int, rows: list[tuple]) -> tuple[pd.DataFrame, pd.DataFrame]:
    rollouts = pd.DataFrame(
        [
            {
                "rollout_id": rid,
                "iteration": iteration,
                "problem_id": pid,
                "family": family,
                "variant": variant,
                "probe_skill": probe,
                "skills": skills,
                "question": "q",
                "prompt": "\n".join([*skills, "q"]),
                "completion": completion,
                "prompt_ids": [1, 2],
                "completion_ids": [3],
                "sampling_logprobs": [-0.5],
                "finished": True,
                "policy_version": f"v{iteration}",
            }
            for rid, pid, family, variant, probe, skills, completion, _ in rows
        ]
    )
    rewards = pd.DataFrame(
        [
            {
                "rollout_id": rid,
                "iteration": iteration,
                "problem_id": pid,
                "reward": reward,
                "passed": reward == 1.0,
                "verifier": "exact",
                "details": "",
            }
            for rid, pid, *_, reward in rows
        ]
    )
    return rollouts, rewards


def write_iteration(
    directory: Path, iteration: int, rows: list[tuple] | None = None, report: dict | None = None
) -> tuple[Path, Path, Path]:
    """Shards and report of one iteration, written as the stages write them."""
    rollouts, rewards = frames(iteration, ITERATIONS[iteration] if rows is None else rows)
    name = f"iter_{iteration:04d}"
    paths = (
        directory / "rollouts" / f"{name}.parquet",
        directory / "rewards" / f"{name}.parquet",
        directory / "reports" / f"{name}.json",
    )
    write_rollouts(paths[0], rollouts)
    write_rewards(paths[1], rewards)
    paths[2].parent.mkdir(parents=True, exist_ok=True)
    paths[2].write_text(json.dumps(REPORTS[iteration] if report is None else report))
    return paths


def snapshot(path: Path) -> dict[str, pd.DataFrame]:
    """Every table's rows, ordered, with list cells as tuples (comparable)."""
    with duckdb.connect(str(path), read_only=True) as con:
        tables = {table: con.execute(f"SELECT * FROM {table} ORDER BY ALL").df() for table in TABLES}
    return {table: frame.map(lambda v: tuple(v) if isinstance(v, np.ndarray) else v) for table, frame in tables.items()}


def assert_same(a: dict[str, pd.DataFrame], b: dict[str, pd.DataFrame]) -> None:
    assert a.keys() == b.keys()
    for table in a:
        pd.testing.assert_frame_equal(a[table], b[table])


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A catalog with iterations 1 and 2 ingested (closed again), beside its shards."""
    with Catalog(tmp_path / "catalog.duckdb") as cat:
        for iteration in (1, 2):
            cat.ingest_iteration(iteration, *write_iteration(tmp_path, iteration))
    return tmp_path


# ---- ingest ----
def test_ingest_two_iterations_exact_counts(tmp_path):
    with Catalog(tmp_path / "catalog.duckdb") as cat:
        assert cat.counts() == {"rollouts": 0, "rewards": 0, "skill_events": 0, "curriculum_arms": 0}
        # skill events: 1: created s2, measured s1, admitted s1; 2: measured s1, s2, rejected s2, retired s1
        assert cat.ingest_iteration(1, *write_iteration(tmp_path, 1)) == {
            "rollouts": 9,
            "rewards": 9,
            "skill_events": 3,
            "curriculum_arms": 0,
        }
        assert cat.ingest_iteration(2, *write_iteration(tmp_path, 2)) == {
            "rollouts": 4,
            "rewards": 4,
            "skill_events": 4,
            "curriculum_arms": 0,
        }
        assert cat.counts() == {"rollouts": 13, "rewards": 13, "skill_events": 7, "curriculum_arms": 0}


def test_list_columns_are_duckdb_lists(run_dir):
    with duckdb.connect(str(run_dir / "catalog.duckdb"), read_only=True) as con:
        types = dict(
            con.execute(
                "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'rollouts'"
            ).fetchall()
        )
        skills = con.execute("SELECT skills FROM rollouts WHERE rollout_id = 'r1-4'").fetchone()[0]
    assert (
        types["skills"] == "VARCHAR[]"
        and types["prompt_ids"] == "BIGINT[]"
        and types["sampling_logprobs"] == "DOUBLE[]"
    )
    assert skills == ["s1"]


def test_reingest_same_iteration_changes_nothing(run_dir):
    path = run_dir / "catalog.duckdb"
    before = snapshot(path)
    with Catalog(path) as cat:
        cat.ingest_iteration(1, *write_iteration(run_dir, 1))
        assert cat.counts() == {"rollouts": 13, "rewards": 13, "skill_events": 7, "curriculum_arms": 0}
    assert_same(snapshot(path), before)


def test_reingest_replaces_the_iteration_rows(run_dir):
    """A resumed run that rewrote iteration 1 with fewer rows and no report: the old rows are gone, none doubled."""
    with Catalog(run_dir / "catalog.duckdb") as cat:
        rollouts, rewards, _ = write_iteration(run_dir, 1, rows=ITERATIONS[1][:2])
        assert cat.ingest_iteration(1, rollouts, rewards) == {
            "rollouts": 2,
            "rewards": 2,
            "skill_events": 0,
            "curriculum_arms": 0,
        }
        assert cat.counts() == {"rollouts": 6, "rewards": 6, "skill_events": 4, "curriculum_arms": 0}
        assert cat.problem_completions("p-add-2").empty


def _unpaired(directory: Path) -> tuple[tuple[Path, ...], str]:
    paths = write_iteration(directory, 2)
    _, rewards = frames(2, ITERATIONS[2])
    write_rewards(paths[1], rewards.iloc[1:])
    return paths, str(paths[1])


def _invalid_rollouts(directory: Path) -> tuple[tuple[Path, ...], str]:
    paths = write_iteration(directory, 2)
    rollouts, _ = frames(2, ITERATIONS[2])
    rollouts.loc[0, "variant"] = "sideways"
    rollouts.to_parquet(paths[0], index=False)  # bypasses write_rollouts' check, as a broken worker might
    return paths, str(paths[0])


def _other_iteration(directory: Path) -> tuple[tuple[Path, ...], str]:
    rows = [(rid.replace("r2", "r9"), *rest) for rid, *rest in ITERATIONS[2]]
    rollouts, rewards, report = write_iteration(directory, 2, rows=rows)
    write_rollouts(rollouts, frames(3, rows)[0])
    return (rollouts, rewards, report), str(rollouts)


def _clashing_rollout_id(directory: Path) -> tuple[tuple[Path, ...], str]:
    """r1-0 is stored under iteration 1: the delete of iteration 2 happens, the insert fails, all rolls back."""
    rows = [("r1-0", *ITERATIONS[2][0][1:]), *ITERATIONS[2][1:]]
    paths = write_iteration(directory, 2, rows=rows)
    return paths, str(paths[0])


def _bad_report(directory: Path) -> tuple[tuple[Path, ...], str]:
    report = {**REPORTS[2], "retired": [{"id": "s1", "utility": -0.25}]}  # a retirement without a reason
    paths = write_iteration(directory, 2, report=report)
    return paths, str(paths[2])


@pytest.mark.parametrize("batched", [False, True], ids=["alone", "in-a-batch"])
@pytest.mark.parametrize("broken", [_unpaired, _invalid_rollouts, _other_iteration, _clashing_rollout_id, _bad_report])
def test_failed_ingest_names_the_file_and_changes_nothing(run_dir, broken, batched):
    """Alone, or after a valid iteration in one batch (one merged INSERT per table): the error still
    names the broken iteration's file, and the valid iteration is not ingested either."""
    path = run_dir / "catalog.duckdb"
    before = snapshot(path)
    paths, culprit = broken(run_dir / "broken")
    batch = [IterationFiles(1, *write_iteration(run_dir / "valid", 1))] if batched else []
    with Catalog(path) as cat:
        with pytest.raises(SchemaError, match=culprit):
            cat.ingest([*batch, IterationFiles(2, *paths)])
        assert cat.counts() == {"rollouts": 13, "rewards": 13, "skill_events": 7, "curriculum_arms": 0}
    assert_same(snapshot(path), before)


def test_a_batch_ingests_as_its_iterations_one_by_one(run_dir, tmp_path):
    """One transaction for a batch holds exactly the rows of ingesting each iteration alone (run_dir)."""
    batch = [IterationFiles(iteration, *write_iteration(tmp_path / "shards", iteration)) for iteration in (1, 2)]
    with Catalog(tmp_path / "batched.duckdb") as cat:
        assert cat.ingest(batch) == {"rollouts": 13, "rewards": 13, "skill_events": 7, "curriculum_arms": 0}
        assert cat.ingest(batch) == {
            "rollouts": 13,
            "rewards": 13,
            "skill_events": 7,
            "curriculum_arms": 0,
        }  # idempotent
        assert cat.ingest([]) == {"rollouts": 0, "rewards": 0, "skill_events": 0, "curriculum_arms": 0}
    assert_same(snapshot(tmp_path / "batched.duckdb"), snapshot(run_dir / "catalog.duckdb"))


def test_a_batch_naming_an_iteration_twice_is_rejected(tmp_path):
    files = IterationFiles(1, *write_iteration(tmp_path, 1))
    with Catalog(tmp_path / "catalog.duckdb") as cat:
        with pytest.raises(SchemaError, match=r"names an iteration twice: \[1, 1\]"):
            cat.ingest([files, files])
        assert cat.counts() == {"rollouts": 0, "rewards": 0, "skill_events": 0, "curriculum_arms": 0}


def test_shards_validated_on_write_are_not_validated_again(tmp_path, monkeypatch):
    """A shard whose hash is the one its writer validated is read as is, with the same rows as a validated read."""
    paths = write_iteration(tmp_path, 1)
    with Catalog(tmp_path / "validated.duckdb") as cat:
        cat.ingest_iteration(1, *paths)
    monkeypatch.setattr("coevo.store.catalog.read_rollouts", lambda path: pytest.fail("re-validated a validated shard"))
    monkeypatch.setattr("coevo.store.catalog.read_rewards", lambda path: pytest.fail("re-validated a validated shard"))
    trusted = {str(path): hash_file(path) for path in paths[:2]}
    with Catalog(tmp_path / "trusted.duckdb") as cat:
        assert cat.ingest_iteration(1, *paths, validated=trusted) == {
            "rollouts": 9,
            "rewards": 9,
            "skill_events": 3,
            "curriculum_arms": 0,
        }
    assert_same(snapshot(tmp_path / "trusted.duckdb"), snapshot(tmp_path / "validated.duckdb"))


def test_a_shard_changed_since_validation_is_validated_again(run_dir):
    """The recorded hash is of the valid shard; the file now holds an invalid row: rejected, naming file, row and
    field."""
    path = run_dir / "catalog.duckdb"
    before = snapshot(path)
    paths = write_iteration(run_dir / "changed", 2)
    trusted = {str(path): hash_file(path) for path in paths[:2]}
    _invalid_rollouts(run_dir / "changed")
    with Catalog(path) as cat, pytest.raises(SchemaError, match=rf"{paths[0]}: row 0, field 'variant'"):
        cat.ingest_iteration(2, *paths, validated=trusted)
    assert_same(snapshot(path), before)


def test_report_iteration_must_match(tmp_path):
    paths = write_iteration(tmp_path, 1, report={**REPORTS[1], "iteration": 5})
    with Catalog(tmp_path / "catalog.duckdb") as cat, pytest.raises(SchemaError, match="expected 1 \\(got 5\\)"):
        cat.ingest_iteration(1, *paths)


def test_real_skill_bank_report_ingests(tmp_path):
    """The report of an actual SkillBank.update: measured, admitted and created events arrive as the bank reports
    them."""
    bank = SkillBank(
        CoevolverConfig(skill_bank=SkillBankConfig(min_count=1, admission="threshold")), seed=0
    )  # admits on one gap
    sid = bank.add(SkillDraft(text="2+5=7", family="add", key="2+5=", source="test"), iteration=0)
    rows = [(*row[:4], sid if row[4] else "", [sid] * len(row[5]), *row[6:]) for row in ITERATIONS[1]]  # s1 -> sid
    problems = pd.DataFrame(
        {
            "id": ["p-add-1", "p-add-2", "p-mul-1"],
            "family": ["add", "add", "mul"],
            "level": 1,
            "prompt": "q",
            "answer": "7",
        }
    )
    report = bank.update(1, problems, *frames(1, rows))
    with Catalog(tmp_path / "catalog.duckdb") as cat:
        counts = cat.ingest_iteration(
            1, *write_iteration(tmp_path, 1, rows=rows, report=json.loads(json.dumps(report)))
        )
        history = cat.skill_history(sid)
    assert counts["skill_events"] == len(report["new_candidates"]) + 2
    assert history[["event", "problem_id", "gap"]].to_dict("records") == [
        {"event": "measured", "problem_id": "p-add-2", "gap": 0.5},
        {"event": "admitted", "problem_id": "", "gap": pytest.approx(np.nan, nan_ok=True)},
    ]


def test_100k_rows_ingest(tmp_path):
    n = 100_000
    ids = np.char.add("r", np.arange(n).astype(str)).tolist()
    problem = np.char.add("p", (np.arange(n) % 1000).astype(str)).tolist()
    passed = np.arange(n) % 3 == 0
    rollouts = pd.DataFrame(
        {
            "rollout_id": ids,
            "iteration": 1,
            "problem_id": problem,
            "family": np.where(np.arange(n) % 2 == 0, "add", "mul"),
            "variant": "solo",
            "probe_skill": "",
            "skills": [[] for _ in range(n)],
            "question": "q",
            "prompt": "q",
            "completion": "c",
            "prompt_ids": [[1, 2]] * n,
            "completion_ids": [[3]] * n,
            "sampling_logprobs": [[-0.5]] * n,
            "finished": True,
            "policy_version": "v1",
        }
    )
    rewards = pd.DataFrame(
        {
            "rollout_id": ids,
            "iteration": 1,
            "problem_id": problem,
            "reward": passed.astype(float),
            "passed": passed,
            "verifier": "exact",
            "details": "",
        }
    )
    write_rollouts(tmp_path / "rollouts.parquet", rollouts)
    write_rewards(tmp_path / "rewards.parquet", rewards)
    expected = {"rollouts": n, "rewards": n, "skill_events": 0, "curriculum_arms": 0}
    with Catalog(tmp_path / "catalog.duckdb") as cat:
        assert cat.ingest_iteration(1, tmp_path / "rollouts.parquet", tmp_path / "rewards.parquet") == expected
        assert cat.counts() == expected


# ---- queries ----
def test_pass_rate_by_family(run_dir):
    with Catalog(run_dir / "catalog.duckdb", read_only=True) as cat:
        frame = cat.pass_rate_by_family()
    # 1: add passes r1-0, r1-3, r1-4, r1-5 of 6; mul r1-6 of 3. 2: add r2-0 of 2; mul r2-2, r2-3 of 2.
    assert frame.to_dict("records") == [
        {"iteration": 1, "family": "add", "n": 6, "pass_rate": pytest.approx(4 / 6)},
        {"iteration": 1, "family": "mul", "n": 3, "pass_rate": pytest.approx(1 / 3)},
        {"iteration": 2, "family": "add", "n": 2, "pass_rate": pytest.approx(1 / 2)},
        {"iteration": 2, "family": "mul", "n": 2, "pass_rate": pytest.approx(1.0)},
    ]


def test_skill_history(run_dir):
    with Catalog(run_dir / "catalog.duckdb", read_only=True) as cat:
        s1, s2, unknown = cat.skill_history("s1"), cat.skill_history("s2"), cat.skill_history("nope")
    assert list(s1.columns) == ["iteration", "event", "problem_id", "gap", "utility", "reason"]
    assert s1.fillna({"gap": 9.0, "utility": 9.0}).to_dict("records") == [  # 9.0 marks null
        {"iteration": 1, "event": "measured", "problem_id": "p-add-2", "gap": 0.5, "utility": 9.0, "reason": ""},
        {"iteration": 1, "event": "admitted", "problem_id": "", "gap": 9.0, "utility": 0.5, "reason": ""},
        {"iteration": 2, "event": "measured", "problem_id": "p-add-1", "gap": -1.0, "utility": 9.0, "reason": ""},
        {"iteration": 2, "event": "retired", "problem_id": "", "gap": 9.0, "utility": -0.25, "reason": "low utility"},
    ]
    assert s2[["iteration", "event", "gap"]].fillna(9.0).to_dict("records") == [
        {"iteration": 1, "event": "created", "gap": 9.0},
        {"iteration": 2, "event": "measured", "gap": 0.0},
        {"iteration": 2, "event": "rejected", "gap": 9.0},
    ]
    assert unknown.empty


def test_problem_completions(run_dir):
    with Catalog(run_dir / "catalog.duckdb", read_only=True) as cat:
        frame = cat.problem_completions("p-add-1")
    assert list(frame.columns) == ["iteration", "rollout_id", "variant", "skills", "completion", "reward", "passed"]
    frame["skills"] = frame["skills"].map(list)
    assert frame.to_dict("records") == [
        {
            "iteration": 1,
            "rollout_id": "r1-0",
            "variant": "solo",
            "skills": [],
            "completion": "3",
            "reward": 1.0,
            "passed": True,
        },
        {
            "iteration": 1,
            "rollout_id": "r1-1",
            "variant": "solo",
            "skills": [],
            "completion": "4",
            "reward": 0.0,
            "passed": False,
        },
        {
            "iteration": 2,
            "rollout_id": "r2-0",
            "variant": "base",
            "skills": [],
            "completion": "3",
            "reward": 1.0,
            "passed": True,
        },
        {
            "iteration": 2,
            "rollout_id": "r2-1",
            "variant": "probe",
            "skills": ["s1"],
            "completion": "2",
            "reward": 0.0,
            "passed": False,
        },
    ]


LIFECYCLE = (
    "created",
    "measured",
    "admitted",
    "rejected",
    "promoted",
    "retired",
)  # the views' order within an iteration


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    """A small real run's directory: three skill-bank iterations of the tiny policy through the plain
    driver (bootstrapped long enough that some groups pass, so skills are created, probed and judged),
    its shards and reports ingested into catalog.duckdb as the flow's ingest task does (~6 s)."""
    from coevo.driver import train

    from ..conftest import tiny_config

    cfg = tiny_config(
        tmp_path_factory.mktemp("catalog-run"),
        bootstrap={"steps": 200},
        run={"iterations": 3},
        rollout={"problems_per_iter": 6, "group_size": 4},
        coevolver={"skill_bank": {"min_count": 1, "admission": "threshold"}},
    )
    train(cfg)
    out = Path(cfg.run.out_dir)
    files = [
        IterationFiles(
            it,
            *(
                out / kind / f"iter_{it:04d}.{ext}"
                for kind, ext in (("rollouts", "parquet"), ("rewards", "parquet"), ("reports", "json"))
            ),
        )
        for it in (1, 2, 3)
    ]
    with Catalog(out / "catalog.duckdb") as cat:
        cat.ingest(files)
    return out


def expected_from_files(out: Path) -> dict:
    """What the three queries must answer, computed with pandas from the run's parquet shards and JSON
    reports alone (no DuckDB): {"pass_rate": frame, "skills": {id: frame}, "problems": {id: frame}}."""
    rollouts = pd.concat(
        [pd.read_parquet(p) for p in sorted((out / "rollouts").glob("iter_*.parquet"))], ignore_index=True
    )
    rewards = pd.concat(
        [pd.read_parquet(p) for p in sorted((out / "rewards").glob("iter_*.parquet"))], ignore_index=True
    )
    joined = rollouts.merge(rewards[["rollout_id", "reward", "passed"]], on="rollout_id", validate="one_to_one")
    pass_rate = (
        joined.groupby(["iteration", "family"]).agg(n=("passed", "size"), pass_rate=("passed", "mean")).reset_index()
    )
    events = []
    for path in sorted((out / "reports").glob("iter_*.json")):
        report = json.loads(path.read_text())
        it = report["iteration"]
        events += [
            {
                "skill_id": sid,
                "iteration": it,
                "event": "created",
                "problem_id": "",
                "gap": None,
                "utility": None,
                "reason": "",
            }
            for sid in report["new_candidates"]
        ]
        events += [
            {
                "skill_id": e["id"],
                "iteration": it,
                "event": "measured",
                "problem_id": e["problem_id"],
                "gap": e["gap"],
                "utility": None,
                "reason": "",
            }
            for e in report["measured"]
        ]
        for kind in LIFECYCLE[2:]:
            events += [
                {
                    "skill_id": e["id"],
                    "iteration": it,
                    "event": kind,
                    "problem_id": "",
                    "gap": None,
                    "utility": e["utility"],
                    "reason": e.get("reason", ""),
                }
                for e in report[kind]
            ]
    events = (
        pd.DataFrame(events)
        .assign(rank=lambda f: f["event"].map(LIFECYCLE.index))
        .sort_values(["skill_id", "iteration", "rank", "problem_id"])
    )
    columns = ["iteration", "event", "problem_id", "gap", "utility", "reason"]
    skills = {sid: rows[columns].reset_index(drop=True) for sid, rows in events.groupby("skill_id")}
    completions = joined.assign(skills=joined["skills"].map(list)).sort_values(["iteration", "rollout_id"])
    columns = ["iteration", "rollout_id", "variant", "skills", "completion", "reward", "passed"]
    problems = {pid: rows[columns].reset_index(drop=True) for pid, rows in completions.groupby("problem_id")}
    return {"pass_rate": pass_rate, "skills": skills, "problems": problems}


def assert_answers(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    """Same rows in the same order, same values (floats to 1e-12, null = None = NaN, lists as lists)."""
    assert list(got.columns) == list(expected.columns)
    plain = lambda frame: [  # noqa: E731
        {
            k: (
                list(v)
                if isinstance(v, (list, np.ndarray))
                else None
                if v is None or (isinstance(v, float) and np.isnan(v))
                else v
            )
            for k, v in row.items()
        }
        for row in frame.astype(object).to_dict("records")
    ]
    assert plain(got) == [
        {k: pytest.approx(v, abs=1e-12) if isinstance(v, float) else v for k, v in row.items()}
        for row in plain(expected)
    ]


@pytest.mark.parametrize("which", ["hand-made", "real-run"])
def test_views_and_methods_answer_as_the_files_say(request, which):
    """The views (raw SQL, as the module docstring shows) and the Catalog methods both give what
    pandas computes from the shards and reports themselves: the hand-made iterations (groups of 2, 3
    and 4 rollouts per problem, so a mean of per-problem rates is caught) and a small real run (real
    skill ids, gaps, retirements and completions) for every skill and problem they hold."""
    out = request.getfixturevalue("run_dir" if which == "hand-made" else "real_run")
    expected = expected_from_files(out)
    assert (
        len(expected["skills"]) >= 2
        and len(expected["problems"]) >= 3
        and expected["pass_rate"]["pass_rate"].between(0, 1, inclusive="neither").any()
    )
    path = out / "catalog.duckdb"
    with duckdb.connect(str(path), read_only=True) as con:
        view = lambda sql, *args: con.execute(sql, list(args)).df()  # noqa: E731
        assert_answers(view("SELECT * FROM pass_rate_by_family"), expected["pass_rate"])
        for sid, rows in expected["skills"].items():
            assert_answers(view("SELECT * EXCLUDE (skill_id) FROM skill_utility_history WHERE skill_id = ?", sid), rows)
        for pid, rows in expected["problems"].items():
            assert_answers(
                view("SELECT * EXCLUDE (problem_id) FROM problem_completions WHERE problem_id = ?", pid), rows
            )
    with Catalog(path, read_only=True) as cat:
        assert_answers(cat.pass_rate_by_family(), expected["pass_rate"])
        for sid, rows in expected["skills"].items():
            assert_answers(cat.skill_history(sid), rows)
        for pid, rows in expected["problems"].items():
            assert_answers(cat.problem_completions(pid), rows)


# ---- read-only ----
def test_read_only_catalog_cannot_write(run_dir):
    path = run_dir / "catalog.duckdb"
    before = snapshot(path)
    with Catalog(path, read_only=True) as cat:
        with pytest.raises(PermissionError, match="read-only"):
            cat.ingest_iteration(2, *write_iteration(run_dir, 2))
    assert_same(snapshot(path), before)
    with pytest.raises(FileNotFoundError, match="no catalog"):
        Catalog(run_dir / "missing.duckdb", read_only=True)


# ---- CLI ----
def test_cli_json_output(run_dir):
    catalog = str(run_dir / "catalog.duckdb")
    runner = CliRunner()
    result = runner.invoke(query_app, ["pass-rate", "--catalog", catalog, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)[0] == {"iteration": 1, "family": "add", "n": 6, "pass_rate": 4 / 6}
    result = runner.invoke(query_app, ["skill", "s1", "--catalog", catalog, "--json"])
    assert [(r["event"], r["gap"], r["utility"]) for r in json.loads(result.stdout)] == [
        ("measured", 0.5, None),
        ("admitted", None, 0.5),
        ("measured", -1.0, None),
        ("retired", None, -0.25),
    ]
    result = runner.invoke(query_app, ["problem", "p-add-1", "--catalog", catalog, "--json"])
    assert json.loads(result.stdout)[3] == {
        "iteration": 2,
        "rollout_id": "r2-1",
        "variant": "probe",
        "skills": ["s1"],
        "completion": "2",
        "reward": 0.0,
        "passed": False,
    }


def test_cli_table_output(run_dir):
    result = CliRunner().invoke(query_app, ["skill", "s1", "--catalog", str(run_dir / "catalog.duckdb")])
    assert result.exit_code == 0, result.output
    assert "skill s1" in result.stdout and "low utility" in result.stdout and "-0.250" in result.stdout


def test_cli_missing_catalog_exits_2(tmp_path):
    result = CliRunner().invoke(query_app, ["pass-rate", "--catalog", str(tmp_path / "nope.duckdb")])
    assert result.exit_code == 2
    assert "no catalog at" in result.output
