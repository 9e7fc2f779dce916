"""A run's DuckDB catalog: every rollout, reward and skill event of every iteration, in one file.

`<run.out_dir>/catalog.duckdb` holds four tables, filled from what the stages write:

- `rollouts`: the rollouts parquet shards, all columns (list columns as DuckDB lists); key rollout_id.
  A multi-turn episode's turns are in `messages` (view `episodes`: one problem's episodes with
  their turns, tool calls and errors, truncation and reward).
- `rewards`: the rewards parquet shards; key rollout_id (exactly one reward per rollout);
  `components` holds each reward function's value as JSON (`components->>'format'` in DuckDB).
- `skill_events`: the co-evolver's evolution reports (JSON of `SkillBank.update`), one row per
  created / measured / admitted / rejected / promoted / retired event (schemas/skill_events.py); the
  rubrics co-evolver's criteria are events too (view `rubric_criteria`: iteration, family, criterion,
  weight, discrimination).
- `curriculum_arms`: the curriculum's evolution reports (`Curriculum.update`), one row per arm
  (problem category) per iteration: its bandit value, count, last reward and draw probability
  (schemas/curriculum_arms.py); empty for the other co-evolvers.

Single writer: only one process (the ingest task) opens the catalog for writing; workers write parquet
shards and never touch the file. DuckDB locks the file, so while the writer has it open no other
process can open it, not even read-only: ingest, close, then query. Within one process, a read-only
and a read-write connection to the same file cannot coexist either.

Idempotent ingest: `ingest(batch)` (or `ingest_iteration(k, ...)`, a batch of one) validates each
iteration's shards (pandera on read; a shard whose sha256 the caller names in `validated`, because
the stage that wrote it validated exactly that content, is read without validating it again when the
file still has that hash) and the skill events built from its report (pandera on write), then in one
transaction deletes every row of the batch's iterations from every table and inserts the new rows
into typed, keyed tables, one INSERT per table. Re-ingesting an iteration (a resumed run) never
duplicates or loses a row; a failed ingest leaves the catalog exactly as it was. A batch pays the
per-call costs (a DuckDB statement, a pandera pass, a commit: ~1-13 ms each however few their rows)
once, not per iteration: 10 default-scale iterations ingest in ~0.15 s, one at a time ~0.4 s. The
flow ingests every pipeline.ingest_every iterations.

Five views answer the usual questions; copy them into `duckdb runs/default/catalog.duckdb`:

    -- pass rate per problem family per iteration (all context variants together)
    SELECT * FROM pass_rate_by_family;
    -- one skill's lifecycle: its measured gaps and status changes across iterations
    SELECT * FROM skill_utility_history WHERE skill_id = '3f2a9c01b7de';
    -- every completion sampled for one problem, with its reward, across iterations
    SELECT * FROM problem_completions WHERE problem_id = 'add-1-000003';
    -- each curriculum category's value over iterations (kind=curriculum)
    SELECT * FROM curriculum_values WHERE category = 'mul/2';
    -- the test bank's admitted and retired tests (kind=unit_tests)
    SELECT * FROM unit_tests WHERE problem_id = 'code-add-00003';
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow
import pyarrow.compute as pc
import pyarrow.parquet as pq

from coevo.errors import InputError
from coevo.io import hash_bytes
from schemas import (
    EVENTS,
    SchemaError,
    read_rewards,
    read_rollouts,
    validate_curriculum_arms,
    validate_skill_events,
)
from schemas.errors import MAX_LINES
from schemas.rewards import REWARDS_ARROW
from schemas.rollouts import ROLLOUTS_ARROW

TABLES = ("rollouts", "rewards", "skill_events", "curriculum_arms")
ARM_DTYPES = {
    "iteration": "int64",
    "category": "str",
    "value": "float64",
    "count": "int64",
    "reward": "float64",
    "prob": "float64",
}
EVENT_DTYPES = {
    "iteration": "int64",
    "skill_id": "str",
    "event": "str",
    "problem_id": "str",
    "gap": "float64",
    "utility": "float64",
    "reason": "str",
}
_EVENT_LIST = "[" + ", ".join(f"'{event}'" for event in EVENTS) + "]"  # constants, never user input

_TABLES_DDL = f"""
CREATE TABLE IF NOT EXISTS rollouts (
    rollout_id VARCHAR PRIMARY KEY, iteration BIGINT NOT NULL, problem_id VARCHAR NOT NULL,
    family VARCHAR NOT NULL, variant VARCHAR NOT NULL, probe_skill VARCHAR NOT NULL,
    skills VARCHAR[] NOT NULL, question VARCHAR NOT NULL, prompt VARCHAR NOT NULL,
    completion VARCHAR NOT NULL, prompt_ids BIGINT[] NOT NULL, completion_ids BIGINT[] NOT NULL,
    sampling_logprobs DOUBLE[] NOT NULL, finished BOOLEAN NOT NULL, policy_version VARCHAR NOT NULL
);
-- multi-turn episodes (coevo/rollout/episodes.py); catalogs made before the columns gain them as one-turn samples
ALTER TABLE rollouts ADD COLUMN IF NOT EXISTS turns BIGINT DEFAULT 1;
ALTER TABLE rollouts ADD COLUMN IF NOT EXISTS tool_calls BIGINT DEFAULT 0;
ALTER TABLE rollouts ADD COLUMN IF NOT EXISTS tool_errors BIGINT DEFAULT 0;
ALTER TABLE rollouts ADD COLUMN IF NOT EXISTS truncated BOOLEAN DEFAULT false;
ALTER TABLE rollouts ADD COLUMN IF NOT EXISTS messages VARCHAR DEFAULT '';
ALTER TABLE rollouts ADD COLUMN IF NOT EXISTS policy_mask BIGINT[] DEFAULT [];
-- roles of one policy (coevo/rollout/roles.py); catalogs made before the column hold the solver's samples
ALTER TABLE rollouts ADD COLUMN IF NOT EXISTS role VARCHAR DEFAULT 'solver';
CREATE TABLE IF NOT EXISTS rewards (
    rollout_id VARCHAR PRIMARY KEY, iteration BIGINT NOT NULL, problem_id VARCHAR NOT NULL,
    reward DOUBLE NOT NULL, passed BOOLEAN NOT NULL, verifier VARCHAR NOT NULL, details VARCHAR NOT NULL,
    components VARCHAR NOT NULL DEFAULT '{{}}', logged VARCHAR NOT NULL DEFAULT '{{}}'
);
ALTER TABLE rewards ADD COLUMN IF NOT EXISTS components VARCHAR DEFAULT '{{}}';  -- catalogs made before the column
-- what reward plugins logged (log_extra / log_metric)
ALTER TABLE rewards ADD COLUMN IF NOT EXISTS logged VARCHAR DEFAULT '{{}}';
ALTER TABLE rewards ADD COLUMN IF NOT EXISTS role VARCHAR DEFAULT 'solver';
CREATE TABLE IF NOT EXISTS skill_events (
    iteration BIGINT NOT NULL, skill_id VARCHAR NOT NULL,
    event VARCHAR NOT NULL CHECK (list_contains({_EVENT_LIST}, event)),
    problem_id VARCHAR NOT NULL, gap DOUBLE, utility DOUBLE, reason VARCHAR NOT NULL,
    PRIMARY KEY (iteration, skill_id, event, problem_id)
);
CREATE TABLE IF NOT EXISTS curriculum_arms (
    iteration BIGINT NOT NULL, category VARCHAR NOT NULL, value DOUBLE NOT NULL, count BIGINT NOT NULL,
    reward DOUBLE, prob DOUBLE NOT NULL, PRIMARY KEY (iteration, category)
);
"""

_VIEWS_DDL = f"""
CREATE OR REPLACE MACRO event_rank(e) AS list_position({_EVENT_LIST}, e);
CREATE OR REPLACE VIEW pass_rate_by_family AS
    -- aggregated per (iteration, problem) before the join: ingest guarantees one reward per rollout
    -- with the same problem_id, and a problem has one family; 4x faster at 10M rows than joining
    -- every rollout to its reward
    WITH per_problem AS (  -- the solver's samples (another role's `passed` judges its own output)
        SELECT iteration, problem_id, count(*) AS n, count_if(passed) AS passed
        FROM rewards WHERE role = 'solver' GROUP BY iteration, problem_id
    ), families AS (
        SELECT iteration, problem_id, any_value(family) AS family FROM rollouts GROUP BY iteration, problem_id
    )
    SELECT p.iteration, f.family, sum(p.n)::BIGINT AS n, sum(p.passed)::DOUBLE / sum(p.n)::DOUBLE AS pass_rate
    FROM per_problem AS p JOIN families AS f USING (iteration, problem_id)
    GROUP BY p.iteration, f.family
    ORDER BY p.iteration, f.family;
CREATE OR REPLACE VIEW skill_utility_history AS
    SELECT skill_id, iteration, event, problem_id, gap, utility, reason
    FROM skill_events
    ORDER BY skill_id, iteration, event_rank(event), problem_id;
CREATE OR REPLACE VIEW rubric_criteria AS
    -- the rubrics co-evolver's measured criteria (coevo/coevolvers/rubrics.py): family in problem_id,
    -- discrimination (mean within-group score variance) in gap, weight in utility
    SELECT iteration, problem_id AS family, skill_id AS criterion, utility AS weight, gap AS discrimination
    FROM skill_events
    WHERE event = 'measured' AND reason = 'rubric criterion'
    ORDER BY iteration, family, criterion;
CREATE OR REPLACE VIEW problem_completions AS
    SELECT r.problem_id, r.iteration, r.rollout_id, r.variant, r.skills, r.completion, w.reward, w.passed
    FROM rollouts AS r JOIN rewards AS w USING (rollout_id)
    ORDER BY r.problem_id, r.iteration, r.rollout_id;
CREATE OR REPLACE VIEW episodes AS
    SELECT r.problem_id, r.iteration, r.rollout_id, r.turns, r.tool_calls, r.tool_errors, r.truncated,
        r.messages, w.reward, w.passed
    FROM rollouts AS r JOIN rewards AS w USING (rollout_id)
    WHERE r.messages <> ''
    ORDER BY r.problem_id, r.iteration, r.rollout_id;
CREATE OR REPLACE VIEW unit_tests AS
    -- the test bank's admitted and retired tests (kind=unit_tests, coevo/coevolvers/unit_tests.py)
    SELECT iteration, problem_id, skill_id AS test_id, event, substr(reason, 12) AS test
    FROM skill_events
    WHERE reason LIKE 'unit test: %'
    ORDER BY problem_id, iteration, event_rank(event), test_id;
CREATE OR REPLACE VIEW curriculum_values AS
    SELECT iteration, category, value, count, reward, prob FROM curriculum_arms ORDER BY category, iteration;
"""


@dataclass(frozen=True)
class IterationFiles:
    """What one iteration's stages wrote for the catalog: its two shards, its evolution report (None:
    no skill events) and the sha256s, by path, of the content its writers validated."""

    iteration: int
    rollouts: str | Path
    rewards: str | Path
    report: str | Path | None = None
    validated: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class LoadedIteration:
    """Rows bound for each table (the skill events not validated yet) and the file each came from."""

    frames: dict[str, pyarrow.Table | pd.DataFrame]
    sources: dict[str, str]


class Catalog:
    """The run's DuckDB file; the writer creates missing tables and (re)creates the views."""

    def __init__(self, path: str | Path, read_only: bool = False):
        self.path = Path(path)
        self.read_only = read_only
        if read_only and not self.path.exists():
            raise FileNotFoundError(f"no catalog at {self.path}")
        if not read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._con = duckdb.connect(str(self.path), read_only=read_only)
        if not read_only:
            self._in_transaction(lambda: self._con.execute(_TABLES_DDL + _VIEWS_DDL))

    # ---- writing ----
    def ingest_iteration(
        self,
        iteration: int,
        rollouts_path: str | Path,
        rewards_path: str | Path,
        report_path: str | Path | None = None,
        validated: Mapping[str, str] | None = None,
    ) -> dict[str, int]:
        """Replace iteration `iteration` in every table with the given shards and report; return rows
        inserted. One iteration of `ingest`, which documents the arguments and errors."""
        return self.ingest([IterationFiles(iteration, rollouts_path, rewards_path, report_path, validated or {})])

    def ingest(self, batch: Sequence[IterationFiles]) -> dict[str, int]:
        """Replace each iteration of `batch` in every table with its shards and report, all in one
        transaction; return the rows inserted per table.

        A file's `validated` sha256 (the writing stage's record of content it validated against its
        schema) lets its shard be read without validating it again while the file still has that hash;
        it is validated as usual otherwise.

        Raises SchemaError naming the file when a shard or a report is invalid, a row belongs to another
        iteration, the rewards' rollout_ids differ from the rollouts', or a rollout_id is already stored
        under another iteration; the catalog is then left unchanged.
        """
        if self.read_only:
            raise PermissionError(f"{self.path}: catalog opened read-only; only the single writer ingests")
        if not batch:
            return dict.fromkeys(TABLES, 0)
        iterations = [files.iteration for files in batch]
        if len(set(iterations)) != len(iterations):
            raise SchemaError(f"{self.path}: one ingest names an iteration twice: {sorted(iterations)}")
        loaded = [load_iteration(files) for files in batch]
        validate_events(loaded)
        try:
            self._in_transaction(lambda: self._replace(iterations, [merge(loaded)]))
        except SchemaError:
            if len(loaded) > 1:  # the merged insert cannot name the file: again one iteration at a time, undone
                self._in_transaction(lambda: self._replace(iterations, loaded), commit=False)
            raise
        return {table: sum(len(tables.frames[table]) for tables in loaded) for table in TABLES}

    def _replace(self, iterations: list[int], groups: list[LoadedIteration]) -> None:
        """Delete the iterations' rows from every table, then insert each group's frames."""
        for table in TABLES:
            self._con.execute(f"DELETE FROM {table} WHERE list_contains(?, iteration)", [iterations])
        for group in groups:
            for table, frame in group.frames.items():
                self._con.register("incoming", frame)  # transactional: a rollback drops it too
                try:
                    self._con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM incoming")
                except duckdb.ConstraintException as exc:
                    raise SchemaError(
                        f"{group.sources[table]}: conflicts with rows already in {self.path} ({table}): {exc}"
                    ) from exc
                self._con.unregister("incoming")

    def _in_transaction(self, work: Callable[[], object], commit: bool = True) -> None:
        self._con.begin()
        try:
            work()
        except BaseException:
            self._con.rollback()
            raise
        if commit:
            self._con.commit()
        else:
            self._con.rollback()

    # ---- queries ----
    def pass_rate_by_family(self) -> pd.DataFrame:
        """iteration, family, n (rollouts), pass_rate; ordered by iteration, family."""
        return self._query("SELECT iteration, family, n, pass_rate FROM pass_rate_by_family ORDER BY iteration, family")

    def skill_history(self, skill_id: str) -> pd.DataFrame:
        """iteration, event, problem_id, gap, utility, reason of one skill; ordered by iteration, lifecycle order,
        problem."""
        return self._query(
            "SELECT iteration, event, problem_id, gap, utility, reason FROM skill_utility_history"
            " WHERE skill_id = ? ORDER BY iteration, event_rank(event), problem_id",
            [skill_id],
        )

    def rubric_criteria(self) -> pd.DataFrame:
        """Each rubric criterion's weight and discrimination per iteration and family (kind=rubrics)."""
        return self._query("SELECT * FROM rubric_criteria")

    def problem_completions(self, problem_id: str) -> pd.DataFrame:
        """iteration, rollout_id, variant, skills, completion, reward, passed of one problem; ordered by iteration,
        rollout_id."""
        return self._query(
            "SELECT iteration, rollout_id, variant, skills, completion, reward, passed FROM problem_completions"
            " WHERE problem_id = ? ORDER BY iteration, rollout_id",
            [problem_id],
        )

    def episodes(self, problem_id: str) -> pd.DataFrame:
        """iteration, rollout_id, turns, tool_calls, tool_errors, truncated, messages (JSON), reward, passed
        of one problem's multi-turn episodes; ordered by iteration, rollout_id."""
        return self._query(
            "SELECT iteration, rollout_id, turns, tool_calls, tool_errors, truncated, messages, reward, passed"
            " FROM episodes WHERE problem_id = ? ORDER BY iteration, rollout_id",
            [problem_id],
        )

    def unit_tests(self) -> pd.DataFrame:
        """iteration, problem_id, test_id, event (admitted, retired), test of every test-bank event."""
        return self._query("SELECT * FROM unit_tests")

    def curriculum_values(self) -> pd.DataFrame:
        """iteration, category, value, count, reward, prob of every curriculum arm; ordered by iteration, category."""
        return self._query(
            "SELECT iteration, category, value, count, reward, prob FROM curriculum_values ORDER BY iteration, category"
        )

    def ids(self, kind: str) -> list[str]:
        """Every problem id (kind 'problem': the rollouts') or skill id (kind 'skill': the skill events'), sorted."""
        column, table = {"problem": ("problem_id", "rollouts"), "skill": ("skill_id", "skill_events")}[kind]
        rows = self._con.execute(f"SELECT DISTINCT {column} FROM {table} WHERE {column} IS NOT NULL ORDER BY 1")
        return [str(row[0]) for row in rows.fetchall()]

    def counts(self) -> dict[str, int]:
        return {table: int(self._con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]) for table in TABLES}

    def _query(self, sql: str, params: list | None = None) -> pd.DataFrame:
        """Through arrow, so string columns are pandas `str` even when no row matches (as the schemas expect)."""
        return self._con.sql(sql, params=params or []).to_arrow_table().to_pandas()

    # ---- lifetime ----
    def close(self) -> None:
        self._con.close()

    def __enter__(self) -> "Catalog":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def read_shard(
    reader: Callable[[str | Path], pd.DataFrame], schema: pyarrow.Schema, path: str | Path, validated_sha256: str | None
) -> pyarrow.Table:
    """A shard as an arrow table with its table's fixed schema: read through its validating reader,
    or read as is when its content hash equals `validated_sha256` (content validated when it was
    written). Arrow, not pandas, goes into DuckDB: list columns then insert without a Python loop
    over rows (~6k rows/s through pandas object columns). SchemaError names an unreadable file."""
    if validated_sha256 is not None:
        content = Path(path).read_bytes()  # hashed and parsed from the same bytes: no window for a swap
        if hash_bytes(content) == validated_sha256:
            try:
                return pq.read_table(io.BytesIO(content), schema=schema)
            except (OSError, pyarrow.ArrowException) as exc:
                raise SchemaError(f"{path}: cannot read parquet: {exc}") from exc
    return pyarrow.Table.from_pandas(reader(path), schema=schema, preserve_index=False)


def check_iteration(frame: pd.DataFrame, iteration: int, source: str) -> None:
    """Every row's iteration must equal `iteration`; else SchemaError naming the source and rows."""
    wrong = frame.loc[frame["iteration"] != iteration, "iteration"]
    if wrong.empty:
        return
    lines = [
        f"{source}: row {index}, field 'iteration': expected {iteration} (got {value})"
        for index, value in wrong.head(MAX_LINES).items()
    ]
    if len(wrong) > MAX_LINES:
        lines.append(f"{source}: ... and {len(wrong) - MAX_LINES} more rows of another iteration")
    raise SchemaError("\n".join(lines))


def check_pairing(rollouts: pyarrow.Table, rewards: pyarrow.Table, rollouts_source: str, rewards_source: str) -> None:
    """The rewards' rollout_ids must equal the rollouts' exactly, each with the same problem_id
    (arrow compute: a 100k-row shard is checked in milliseconds, not seconds)."""
    ids, reward_ids = rollouts["rollout_id"], rewards["rollout_id"]
    without_reward = sorted(set(pc.filter(ids, pc.invert(pc.is_in(ids, value_set=reward_ids))).to_pylist()))
    without_rollout = sorted(set(pc.filter(reward_ids, pc.invert(pc.is_in(reward_ids, value_set=ids))).to_pylist()))
    if without_reward or without_rollout:
        raise SchemaError(
            f"{rewards_source}: rollout_ids do not match {rollouts_source}: "
            f"{len(without_reward)} rollouts without a reward (e.g. {without_reward[:5]}), "
            f"{len(without_rollout)} rewards without a rollout (e.g. {without_rollout[:5]})"
        )
    theirs = rollouts.select(["rollout_id", "problem_id"]).rename_columns(["rollout_id", "problem_id_rollout"])
    joined = rewards.select(["rollout_id", "problem_id"]).join(theirs, "rollout_id")
    differ = pc.filter(
        joined["rollout_id"], pc.not_equal(joined["problem_id"], joined["problem_id_rollout"])
    ).to_pylist()
    if differ:
        raise SchemaError(
            f"{rewards_source}: problem_id differs from {rollouts_source} for {len(differ)} rollouts (e.g. "
            f"{differ[:5]})"
        )


def load_iteration(files: IterationFiles) -> LoadedIteration:
    """Read and check one iteration's shards and report; SchemaError names the file, row and field."""
    rollouts = read_shard(read_rollouts, ROLLOUTS_ARROW, files.rollouts, files.validated.get(str(files.rollouts)))
    rewards = read_shard(read_rewards, REWARDS_ARROW, files.rewards, files.validated.get(str(files.rewards)))
    check_iteration(rollouts.select(["iteration"]).to_pandas(), files.iteration, str(files.rollouts))
    check_iteration(rewards.select(["iteration"]).to_pandas(), files.iteration, str(files.rewards))
    check_pairing(rollouts, rewards, str(files.rollouts), str(files.rewards))
    from coevo.coevolvers.composite import member_reports  # the co-evolvers load torch: not for `coevo query`

    report = read_report(files.report, files.iteration) if files.report is not None else {}
    try:
        members = member_reports(report)  # a list of co-evolvers reports each member's evolution
    except InputError as exc:
        raise SchemaError(f"{files.report}: {exc}") from exc
    events = pd.concat(
        [skill_events_from_report(member, files.iteration, str(files.report)) for member in members], ignore_index=True
    )
    arms = pd.concat(
        [curriculum_arms_from_report(member, files.iteration, str(files.report)) for member in members],
        ignore_index=True,
    )
    return LoadedIteration(
        frames={"rollouts": rollouts, "rewards": rewards, "skill_events": events, "curriculum_arms": arms},
        sources={
            "rollouts": str(files.rollouts),
            "rewards": str(files.rewards),
            "skill_events": str(files.report),
            "curriculum_arms": str(files.report),
        },
    )


def validate_events(loaded: Sequence[LoadedIteration]) -> None:
    """Validate every report's skill events in one pandera pass (~13 ms however few rows: most of a
    small iteration's ingest when paid per report); when that fails, report by report, so the
    SchemaError names the file and row."""
    for table, validate in (("skill_events", validate_skill_events), ("curriculum_arms", validate_curriculum_arms)):
        try:
            validate(pd.concat([group.frames[table] for group in loaded], ignore_index=True), "the ingested reports")
        except SchemaError:
            for group in loaded:
                validate(group.frames[table], group.sources[table])
            raise


def merge(loaded: Sequence[LoadedIteration]) -> LoadedIteration:
    """The iterations' rows as one frame per table: one INSERT per table for a whole batch."""
    if len(loaded) == 1:
        return loaded[0]
    return LoadedIteration(
        frames={
            "rollouts": pyarrow.concat_tables([group.frames["rollouts"] for group in loaded]),
            "rewards": pyarrow.concat_tables([group.frames["rewards"] for group in loaded]),
            "skill_events": pd.concat([group.frames["skill_events"] for group in loaded], ignore_index=True),
            "curriculum_arms": pd.concat([group.frames["curriculum_arms"] for group in loaded], ignore_index=True),
        },
        sources={table: ", ".join(group.sources[table] for group in loaded) for table in TABLES},
    )


def read_report(path: str | Path, iteration: int) -> dict:
    """An evolution report JSON file, its iteration checked; SchemaError names the file."""
    try:
        report = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise SchemaError(f"{path}: cannot read the evolution report: {exc}") from exc
    if not isinstance(report, dict):
        raise SchemaError(f"{path}: the evolution report is not a JSON object")
    if report.get("iteration", iteration) != iteration:
        raise SchemaError(f"{path}: field 'iteration': expected {iteration} (got {report['iteration']})")
    return report


def curriculum_arms_from_report(report: Mapping, iteration: int, source: str) -> pd.DataFrame:
    """Rows of `curriculum_arms` from a `Curriculum.update` report's "arms", typed but not validated;
    a report without them (other co-evolvers) adds none."""
    try:
        rows = [
            {column: arm.get(column) for column in ARM_DTYPES if column != "iteration"} | {"iteration": iteration}
            for arm in report.get("arms", [])
        ]
        return pd.DataFrame(rows, columns=list(ARM_DTYPES)).astype(ARM_DTYPES)
    except (AttributeError, TypeError, ValueError) as exc:
        raise SchemaError(f"{source}: malformed curriculum report: {exc}") from exc


def skill_events_from_report(report: Mapping, iteration: int, source: str) -> pd.DataFrame:
    """Rows of `skill_events` from a `SkillBank.update` report, typed but not validated (validate_events
    does that for a whole batch); keys a report lacks (other co-evolvers) add none."""
    try:
        rows = [_event(iteration, sid, "created") for sid in report.get("new_candidates", [])]
        rows += [
            _event(
                iteration,
                e.get("id"),
                "measured",
                e.get("problem_id", ""),
                gap=e.get("gap"),
                utility=e.get("utility"),
                reason=e.get("reason", ""),
            )
            for e in report.get("measured", [])
        ]
        for event in ("admitted", "rejected", "promoted", "retired"):
            rows += [
                _event(
                    iteration,
                    e.get("id"),
                    event,
                    e.get("problem_id", ""),
                    utility=e.get("utility"),
                    reason=e.get("reason", ""),
                )
                for e in report.get(event, [])
            ]
        return pd.DataFrame(rows, columns=list(EVENT_DTYPES)).astype(EVENT_DTYPES)
    except (AttributeError, TypeError, ValueError) as exc:
        raise SchemaError(f"{source}: malformed evolution report: {exc}") from exc


def _event(
    iteration: int,
    skill_id: object,
    event: str,
    problem_id: object = "",
    gap: object = None,
    utility: object = None,
    reason: object = "",
) -> dict:
    """One row; the report's values go in unchecked, the schema judges them (with the report's file name)."""
    return {
        "iteration": iteration,
        "skill_id": skill_id,
        "event": event,
        "problem_id": problem_id,
        "gap": gap,
        "utility": utility,
        "reason": reason,
    }
