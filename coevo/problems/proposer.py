"""Problem proposer at the solver's frontier, for the built-in arithmetic generator.

Method: SEIF / Skill-SP / R-Zero: a proposer is rewarded for problems
the solver passes about half the time (the frontier, where a group's rewards vary and GRPO learns),
and invalid proposals are filtered out before the solver trains on them.

Departures:
1. No learned proposer. The arithmetic generator's difficulty is known (level = operand digits), so
   the proposer is a rule over the latest per-category pass rates: a category (family, level) with
   |p - 1/2| <= band gets more problems; a solved one (p >= promote_above) gets its family's next
   level, and the configured new families or combinations (addmul = a+b*c) start at level 1, where
   neither the batch nor the training split has that cell yet; one below the band (too hard for
   now) gets nothing. The "reward near 1/2" is this choice of categories.
2. Validity is checked, not learned: each answer is recomputed from the parsed question with exact
   Python integers and the project's verifier (check_answer) must accept both the recomputed answer
   and the reference itself as completions; a question that does not parse as its family, or whose
   operands are not of its level, is out of range.
3. De-duplication is by the same prompt or the same operands in any wording (equation or words;
   operands of commutative operators sorted), against the held-out test split, the training split
   and earlier proposals (and the batch itself). The test split never changes.
4. Bounded: at most `per_iter` accepted problems per call, split evenly over the chosen categories
   (the ones nearest 1/2 first); a category whose space is exhausted (level-1 cells are all in
   train) yields fewer, and the report says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pandera.pandas as pa

from coevo.config import ProposerConfig
from coevo.problems.arithmetic import _FAMILY_CODE, COLUMNS, _fill_evenly, _operand_range, max_level, sample_cell
from coevo.problems.math_verifier import check_answer
from schemas.errors import SchemaError, validate_frame
from schemas.problems import read_problems, validate_problems, write_problems

OUT_OF_RANGE = "out of range"
WRONG_ANSWER = "wrong answer"
TEST_PROMPT = "duplicate of test (same prompt)"
TEST_OPERANDS = "duplicate of test (same operands)"
TRAIN_DUPLICATE = "duplicate of train"
EARLIER_DUPLICATE = "duplicate of an earlier proposal"
ROUNDS = 4  # candidate batches drawn per category before it is reported short

STATS_SCHEMA = pa.DataFrameSchema(
    {
        "family": pa.Column(str, pa.Check(lambda s: s.str.strip().str.len() > 0, error="empty family")),
        "level": pa.Column(int, pa.Check.ge(1), coerce=True),
        "pass_rate": pa.Column(float, pa.Check.in_range(0.0, 1.0), coerce=True),
        "n_samples": pa.Column(int, pa.Check.ge(0), coerce=True),
    },
    unique=["family", "level"],
    name="proposer stats",
)

_SYMBOLS = {("+",): "add", ("-",): "sub", ("*",): "mul", ("+", "*"): "addmul"}
_EXACT = {  # independent exact evaluation (Python ints), not the generator's numpy path
    "add": lambda x: x[0] + x[1],
    "sub": lambda x: x[0] - x[1],
    "mul": lambda x: x[0] * x[1],
    "addmul": lambda x: x[0] + x[1] * x[2],
}
_EQUATION = re.compile(r"(\d+)([-+*])(\d+)(?:([-+*])(\d+))?=")
_WORDS = re.compile(r"What is (\d+) ([-+*]) (\d+)(?: ([-+*]) (\d+))?\?")


@dataclass(frozen=True)
class Target:
    """A category the proposer writes problems for, and why."""

    family: str
    level: int
    why: str  # "frontier", "promote" (next level of a solved category) or "new family"
    pass_rate: float | None  # of the category itself (frontier) or the solved one it comes from


@dataclass
class Proposal:
    """One call's output: accepted problems (schemas/problems.py), rejected ones with a reason, a report."""

    accepted: pd.DataFrame
    rejected: pd.DataFrame
    report: dict = field(default_factory=dict)


def parse_question(prompt: str) -> tuple[str, str, tuple[int, ...]] | None:
    """(style, family, operands) of an arithmetic question in either style, or None."""
    for style, pattern in (("equation", _EQUATION), ("words", _WORDS)):
        match = pattern.fullmatch(prompt)
        if match:
            parts = [g for g in match.groups() if g is not None]
            family = _SYMBOLS.get(tuple(parts[1::2]))
            return None if family is None else (style, family, tuple(int(x) for x in parts[0::2]))
    return None


def problem_key(family: str, operands: tuple[int, ...]) -> tuple:
    """What makes two problems the same: the family and its operands, commutative ones sorted."""
    if family in ("add", "mul"):
        return (family, *sorted(operands))
    if family == "addmul":
        return (family, operands[0], *sorted(operands[1:]))
    return (family, *operands)


def check_stats(stats: pd.DataFrame) -> pd.DataFrame:
    """The stats frame validated: one row per (family, level), pass_rate in [0, 1], n_samples >= 0."""
    return validate_frame(STATS_SCHEMA, stats, "proposer stats")


def choose_targets(
    stats: pd.DataFrame, settings: ProposerConfig, trained: frozenset[tuple[str, int]] = frozenset()
) -> list[Target]:
    """Categories to write problems for, frontier first (nearest 1/2 first), then promotions, then new families.

    `trained`: the (family, level) cells the training split already has. A promotion or a new family
    opens a cell neither the stats nor training have: a cell training has is there to be drawn (by
    the curriculum's bandit, or uniformly), and writing more of it because this batch missed it
    would fill training with a level the solver has not reached."""
    stats = check_stats(stats)
    trusted = stats[stats["n_samples"] >= settings.min_samples]
    present = set(zip(stats["family"], stats["level"].astype(int))) | set(trained)
    frontier, promote = [], []
    for row in trusted.itertuples():
        family, level, p = row.family, int(row.level), float(row.pass_rate)
        if family not in _FAMILY_CODE or level > max_level(family):
            continue  # not a generator category (a user file's label): nothing to generate
        if abs(p - 0.5) <= settings.band:
            frontier.append(Target(family, level, "frontier", p))
        elif p >= settings.promote_above:
            top = min(settings.max_level, max_level(family))
            if level + 1 <= top and (family, level + 1) not in present:
                promote.append(Target(family, level + 1, "promote", p))
    frontier.sort(key=lambda t: (abs(t.pass_rate - 0.5), t.family, t.level))
    promote.sort(key=lambda t: (t.family, t.level))
    solved = bool((trusted["pass_rate"] >= settings.promote_above).any())
    families = set(stats["family"]) | {family for family, _ in trained}
    new = [Target(f, 1, "new family", None) for f in settings.add_families if solved and f not in families]
    return frontier + promote + new


def validate_candidates(
    candidates: pd.DataFrame, train: pd.DataFrame, test: pd.DataFrame, proposed: pd.DataFrame | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Split candidate problems into (accepted, rejected with a `reason` column); see departures 2-3."""
    return _Index(train, test, proposed).validate(candidates)


class _Index:
    """Prompts and operand keys of the test split, the training split and earlier proposals."""

    def __init__(self, train: pd.DataFrame, test: pd.DataFrame, proposed: pd.DataFrame | None) -> None:
        self.test_prompts, self.test_keys = _prompts_and_keys(test)
        self.train_prompts, self.train_keys = _prompts_and_keys(train)
        self.seen_prompts, self.seen_keys = _prompts_and_keys(proposed if proposed is not None else train.iloc[:0])

    def validate(self, candidates: pd.DataFrame, limit: int | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Check candidates in order until `limit` are accepted (the rest are left unused, in neither frame)."""
        reasons: list[str | None] = []
        n_ok = 0
        for row in candidates.itertuples(index=False):
            if limit is not None and n_ok >= limit:
                break
            reason = self._reason(row)
            if reason is None:  # accepted: later candidates (this batch, later rounds) must differ from it
                n_ok += 1
                parsed = parse_question(row.prompt)
                self.seen_prompts.add(row.prompt)
                self.seen_keys.add(problem_key(parsed[1], parsed[2]))
            reasons.append(reason)
        checked = candidates.iloc[: len(reasons)]
        ok = np.array([r is None for r in reasons], dtype=bool)
        rejected = checked[~ok].assign(reason=[r for r in reasons if r is not None])
        return checked[ok].reset_index(drop=True), rejected.reset_index(drop=True)

    def _reason(self, row) -> str | None:
        parsed = parse_question(row.prompt)
        if parsed is None or parsed[1] != row.family or not _in_range(row.family, int(row.level), parsed[2]):
            return OUT_OF_RANGE
        _, family, operands = parsed
        exact = str(_EXACT[family](operands))
        if not (check_answer(exact, row.answer).passed and check_answer(row.answer, row.answer).passed):
            return WRONG_ANSWER
        key = problem_key(family, operands)
        if row.prompt in self.test_prompts:
            return TEST_PROMPT
        if key in self.test_keys:
            return TEST_OPERANDS
        if row.prompt in self.train_prompts or key in self.train_keys:
            return TRAIN_DUPLICATE
        if row.prompt in self.seen_prompts or key in self.seen_keys:
            return EARLIER_DUPLICATE
        return None


def propose(
    stats: pd.DataFrame,
    train: pd.DataFrame,
    test: pd.DataFrame,
    settings: ProposerConfig,
    seed: int,
    iteration: int,
    proposed: pd.DataFrame | None = None,
) -> Proposal:
    """New training problems where the solver is at its frontier; pure and seeded by (seed, iteration).

    `stats`: one row per category (family, level, pass_rate, n_samples) from the latest rollouts.
    `proposed`: earlier iterations' accepted problems (not repeated). Accepted ids are
    `p{iteration}-{family}-{level}-NNNN`; the question style follows the training split's.
    """
    targets = choose_targets(stats, settings, frozenset(zip(train["family"], train["level"].astype(int))))
    quotas = _fill_evenly(settings.per_iter, [settings.per_iter] * len(targets))
    index, style = _Index(train, test, proposed), _style_of(train)
    accepted, rejected, rows = [], [], []
    for target, quota in zip(targets, quotas):
        rng = np.random.default_rng([seed & (2**64 - 1), iteration, _FAMILY_CODE[target.family], target.level])
        got = 0
        for round_ in range(ROUNDS if quota else 0):
            if got >= quota:
                break
            draw = sample_cell(
                target.family, target.level, 2 * (quota - got) + 8, rng, f"c{iteration}.{round_}-", style
            )
            ok, bad = index.validate(draw, limit=quota - got)
            accepted.append(
                ok.assign(id=[f"p{iteration}-{target.family}-{target.level}-{got + i:04d}" for i in range(len(ok))])
            )
            rejected.append(bad)
            got += len(ok)
        rows.append(
            {
                "family": target.family,
                "level": target.level,
                "why": target.why,
                "pass_rate": target.pass_rate,
                "quota": quota,
                "accepted": got,
            }
        )
    frame = validate_problems(problems_frame(accepted), f"proposer iteration {iteration}")
    bad = pd.concat(rejected, ignore_index=True) if rejected else pd.DataFrame(columns=[*COLUMNS, "reason"])
    report = {
        "iteration": iteration,
        "seed": seed,
        "style": style,
        "targets": rows,
        "accepted": len(frame),
        "rejected": {str(k): int(v) for k, v in bad["reason"].value_counts().sort_index().items()},
        "short": sum(r["quota"] - r["accepted"] for r in rows),
    }
    return Proposal(accepted=frame, rejected=bad, report=report)


def write_proposals(path: str | Path, frame: pd.DataFrame) -> None:
    """Validate (problems schema, ids `p<iteration>-...`) and write atomically; nothing is written on failure."""
    _check_ids(frame, str(path))
    write_problems(path, frame)


def read_proposals(path: str | Path) -> pd.DataFrame:
    """Read and validate proposals written by `write_proposals`; errors name the file, row and field."""
    if not Path(path).exists():
        raise SchemaError(f"{path}: no proposals file")
    frame = read_problems(path)
    _check_ids(frame, str(path))
    return frame


def _check_ids(frame: pd.DataFrame, source: str) -> None:
    if isinstance(frame, pd.DataFrame) and "id" in frame.columns:
        bad = [(label, i) for label, i in frame["id"].items() if not re.fullmatch(r"p\d+-.+", str(i))]
        if bad:
            label, value = bad[0]
            raise SchemaError(
                f"{source}: row {label}, field 'id': not a proposal id 'p<iteration>-...' (got {value!r}; "
                f"{len(bad)} such rows)"
            )


def _in_range(family: str, level: int, operands: tuple[int, ...]) -> bool:
    """The level is one the family has and every operand has exactly `level` digits (level 1: 0..9)."""
    if not 1 <= level <= max_level(family):
        return False
    low, count = _operand_range(level)
    return all(low <= x < low + count for x in operands)


def _prompts_and_keys(frame: pd.DataFrame) -> tuple[set[str], set[tuple]]:
    prompts = set(frame["prompt"].astype(str))
    keys = set()
    for prompt in prompts:
        parsed = parse_question(prompt)
        if parsed is not None:
            keys.add(problem_key(parsed[1], parsed[2]))
    return prompts, keys


def _style_of(train: pd.DataFrame) -> str:
    """The question style most of the training split uses (equation when none parses; ties: equation)."""
    styles = [parsed[0] for parsed in map(parse_question, train["prompt"].astype(str).head(1000)) if parsed is not None]
    return "words" if styles.count("words") > styles.count("equation") else "equation"


def problems_frame(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """The parts concatenated as a problems frame (its columns and dtypes; empty without parts)."""
    frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=COLUMNS)
    return frame[COLUMNS].astype({"id": str, "family": str, "prompt": str, "answer": str, "level": np.int64})
