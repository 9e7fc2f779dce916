"""Co-evolving rubrics (EvoRubrics).

Method. Per problem family, a rubric is a list of weighted natural-language criteria. The reward of a
rollout (the built-in reward `rubric`, `rubric_reward` below) is the weighted mean of the judge's
scores of the response against each criterion of its family's rubric (coevo/verification/judge.py), read from the
rubric version the rollout was sampled under (co-evolver iter_{k-1} for iteration k). The judge sees
the prompt and the response only: no reference answer, no gold check (self-supervised variant).
After each iteration (`update`), each criterion's discrimination is measured: the mean over the
iteration's rollout groups (one problem's G responses) of the within-group variance of its scores. A
criterion at or below `prune_below` (saturated: every response meets it, or none does) is pruned and
replaced by a new one the writer drafts from the family's best and worst responses this iteration
(by rubric score), so the reward keeps tracking what separates the policy's responses.

The evolution report lists every criterion in force (`criteria`), one `measured` entry per measured
criterion (id, family as problem_id, discrimination as gap, weight as utility: the catalog's skill
events, whose view `rubric_criteria` reads them), the pruned (`retired`, with the reason) and the new
(`new_candidates`) criteria.

Per-criterion scores travel in the rewards table's `details` (`c.<criterion id>=<score>` or `=na` for
a parse failure), so `update` needs no second round of judging and every score is auditable.

Departures from the paper:
1. Rubrics are per family, not per problem; a family first uses the shared seed rubric ("*") and gets
   its own copy (criterion ids re-hashed with the family) at its first update.
2. The initial rubric is the first `n_criteria` of a built-in seed pool for both variants (the
   co-evolver is built before any problem is seen); the endpoint writes only replacements.
3. New criteria get weight 1; weights are not learnt.
4. Writer "seed" (deterministic: the next unused criteria of the seed pool) exists for tests and
   for runs without an endpoint; the paper's generator is an LLM.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from coevo.coevolvers.base import (
    CoevolverDirError,
    TextGenerator,
    read_artifact,
    register_coevolver,
    save_artifact,
)
from coevo.coevolvers.composite import member_dir
from coevo.coevolvers.writers import ChatEndpoint
from coevo.config import CoevolverConfig, WriterConfig
from coevo.io import hash_bytes
from coevo.types import ContextVariant, Reward
from coevo.verification.judge import Judge, JudgeCache
from schemas.rewards import parse_details

RUBRIC_FILE = "rubric.json"
MEASURED = "rubric criterion"  # the reason of a criterion's measured events (the catalog's rubric_criteria view)
DEFAULT = "*"  # the family key of the shared seed rubric
SEED_POOL = [
    "The response follows every instruction stated in the task.",
    "The response is about the topic the task names.",
    "The response is written in complete, grammatical English sentences.",
    "The response contains nothing but the answer to the task (no preamble, no notes).",
    "The response respects every length or count limit the task states.",
    "The response respects every punctuation or formatting rule the task states.",
    "The response uses every word the task asks for.",
    "The response is concise: no repeated words or sentences.",
]
WRITER_SYSTEM = (
    "You write grading criteria for responses to a task. "
    "Reply with exactly one criterion, one line of at most 200 characters, and nothing else."
)


class Criterion(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, description="Stable id: sha256 of family and text, 10 hex digits.")
    text: str = Field(min_length=1, description="The criterion the judge grades against.")
    weight: float = Field(gt=0, allow_inf_nan=False, description="Weight in the rubric's weighted mean.")
    born: int = Field(ge=0, description="Iteration whose update wrote it (0 = initial).")
    source: str = Field(description="'seed' or the writer kind that drafted it.")
    discrimination: float | None = Field(
        None, description="Its discrimination at the last update (None: not measured yet)."
    )


class RubricFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    iteration: int = Field(ge=0)
    families: dict[str, list[Criterion]]


def criterion_id(family: str, text: str) -> str:
    return hash_bytes(f"{family}\0{text}".encode())[:10]


class CriterionWriter(Protocol):
    kind: str

    def write(self, family: str, best: list[dict], worst: list[dict], existing: list[str], n: int) -> list[str]:
        """At most `n` new criteria texts (not in `existing`); best/worst: [{prompt, response, score}]."""
        ...


class SeedWriter:
    """The next criteria of SEED_POOL that the rubric does not hold, in order (deterministic)."""

    kind = "seed"

    def write(self, family: str, best: list[dict], worst: list[dict], existing: list[str], n: int) -> list[str]:
        return [text for text in SEED_POOL if text not in existing][:n]


class EndpointWriter:
    """One criterion per request from an OpenAI-compatible chat endpoint, shown the best and worst responses."""

    kind = "endpoint"

    def __init__(self, endpoint: ChatEndpoint):
        self.endpoint = endpoint

    def write(self, family: str, best: list[dict], worst: list[dict], existing: list[str], n: int) -> list[str]:
        texts: list[str] = []
        for _ in range(n):
            text = self.endpoint.ask(WRITER_SYSTEM, self.prompt(best, worst, existing + texts))
            if text.lower() not in {t.lower() for t in existing + texts}:
                texts.append(text)
        return texts

    @staticmethod
    def prompt(best: list[dict], worst: list[dict], existing: list[str]) -> str:
        show = lambda rows: "\n".join(f"- task: {r['prompt']} | response: {r['response']}" for r in rows)  # noqa: E731
        return (
            f"Higher-scored responses:\n{show(best)}\nLower-scored responses:\n{show(worst)}\n"
            "Current criteria (do not repeat them):\n" + "\n".join(f"- {t}" for t in existing) + "\n"
            "Write one new criterion that separates good responses to such tasks from bad ones."
        )


def build_criterion_writer(kind: str, writer_cfg: WriterConfig) -> CriterionWriter:
    return (
        EndpointWriter(ChatEndpoint.from_config(writer_cfg, "coevolver.rubrics.writer='endpoint'"))
        if kind == "endpoint"
        else SeedWriter()
    )


def load_rubric(directory: str | Path) -> RubricFile:
    """The rubric saved in `directory` (manifest hashes checked); CoevolverDirError names file and field."""
    _, files = read_artifact(directory, "rubrics")
    path = Path(directory) / RUBRIC_FILE
    try:
        return RubricFile.model_validate_json(files[RUBRIC_FILE])
    except KeyError:
        raise CoevolverDirError(f"{path}: missing from the manifest") from None
    except ValidationError as exc:
        fields = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        raise CoevolverDirError(f"{path}: not a rubric: {fields}") from exc


@register_coevolver("rubrics")
class RubricsCoEvolver:
    kind: str
    roles: frozenset[str] = frozenset({"reward"})  # the `rubric` reward judges by its criteria

    def __init__(
        self,
        cfg: CoevolverConfig,
        seed: int,
        generate: TextGenerator | None = None,
        writer: CriterionWriter | None = None,
    ):
        self.cfg, self.params, self.seed = cfg, cfg.rubrics, seed
        self.frozen = cfg.frozen
        self.writer = writer
        seeds = [
            Criterion(id=criterion_id(DEFAULT, t), text=t, weight=1.0, born=0, source="seed")
            for t in SEED_POOL[: self.params.n_criteria]
        ]
        self.rubric = RubricFile(iteration=0, families={DEFAULT: seeds})

    def criteria(self, family: str) -> list[Criterion]:
        """The criteria in force for `family`: its own, else the shared seed rubric."""
        return self.rubric.families.get(family, self.rubric.families[DEFAULT])

    # ---- the co-evolver contract ----
    def plan(self, problems: pd.DataFrame, group_size: int) -> list[ContextVariant]:
        return [ContextVariant(problem_id=str(pid), variant="solo", n=group_size) for pid in problems["id"]]

    def context_for(self, problem: Mapping) -> list[str]:
        return []  # the rubric supervises; the policy never sees it

    def teacher_context(self, problem: Mapping) -> list[str]:
        return []

    def update(self, iteration: int, problems: pd.DataFrame, rollouts: pd.DataFrame, rewards: pd.DataFrame) -> dict:
        """Measure each criterion's discrimination; prune and replace the saturated ones (evolving,
        not frozen). The report lists every criterion in force with its discrimination. A frozen
        co-evolver reports and keeps its rubric exactly as loaded."""
        scores = criterion_scores(rollouts, rewards)
        evolve = self.params.variant == "evolving" and not self.frozen
        report = {
            "iteration": iteration,
            "variant": self.params.variant,
            "frozen": self.frozen,
            "criteria": [],
            "measured": [],
            "retired": [],
            "new_candidates": [],
        }
        report["judge_parse_fail"] = int(scores["score"].isna().sum()) if not scores.empty else 0
        families = dict(self.rubric.families)
        for family in sorted(scores["family"].unique()) if not scores.empty else []:
            rows = scores[scores["family"] == family]
            # scored under the ids in force; a family's own copy of the seed rubric gets ids of its own
            measured = [
                c.model_copy(update={"discrimination": discrimination(rows, c.id), "id": criterion_id(family, c.text)})
                for c in self.criteria(family)
            ]
            report["measured"] += [
                {"id": c.id, "problem_id": family, "gap": c.discrimination, "utility": c.weight, "reason": MEASURED}
                for c in measured if c.discrimination is not None
            ]  # fmt: skip
            if evolve:
                measured = self._evolve(family, measured, rows, iteration, report)
            families[family] = measured
        if not self.frozen:  # a frozen rubric is measured and reported, never changed (same content hash)
            self.rubric = RubricFile(iteration=iteration, families=families)
        report["criteria"] = [
            {
                "family": f,
                "criterion": c.id,
                "text": c.text,
                "weight": c.weight,
                "discrimination": c.discrimination,
                "born": c.born,
            }
            for f, cs in sorted(families.items())
            for c in cs
        ]
        report["counts"] = {"criteria": sum(len(cs) for f, cs in families.items() if f != DEFAULT)}
        return report

    def _evolve(
        self, family: str, measured: list[Criterion], rows: pd.DataFrame, iteration: int, report: dict
    ) -> list[Criterion]:
        """Prune the criteria whose discrimination is at or below prune_below (with min_groups measured
        groups) and add the writer's replacements; a family keeps its old criteria if nothing new came."""
        groups = rows["problem_id"].nunique()
        pruned = [
            c
            for c in measured
            if groups >= self.params.min_groups
            and c.discrimination is not None
            and c.discrimination <= self.params.prune_below
        ]
        kept = [c for c in measured if c not in pruned]
        room = self.params.n_criteria - len(kept)
        if not pruned or room <= 0:
            return measured
        best, worst = extremes(rows, self.params.shown)
        writer = self.writer or build_criterion_writer(self.params.writer, self.cfg.writer)
        texts = writer.write(family, best, worst, [c.text for c in measured], room)
        new = [
            Criterion(id=criterion_id(family, t), text=t, weight=1.0, born=iteration, source=writer.kind) for t in texts
        ]
        if not new:
            return measured
        report["retired"] += [
            {
                "id": c.id,
                "family": family,
                "utility": c.weight,
                "reason": f"discrimination {c.discrimination:.3g} <= prune_below",
            }
            for c in pruned
        ]
        report["new_candidates"] += [c.id for c in new]
        return kept + new

    # ---- persistence ----
    def save(self, directory: Path) -> str:
        data = self.rubric.model_dump_json(indent=1).encode() + b"\n"
        return save_artifact(
            directory,
            self.kind,
            files={RUBRIC_FILE: data},
            extra={"iteration": self.rubric.iteration, "variant": self.params.variant},
        )

    @classmethod
    def load(
        cls, directory: Path, cfg: CoevolverConfig, seed: int, generate: TextGenerator | None = None
    ) -> RubricsCoEvolver:
        evolver = cls(cfg, seed, generate)
        evolver.rubric = load_rubric(directory)
        if DEFAULT not in evolver.rubric.families:
            raise CoevolverDirError(f"{Path(directory) / RUBRIC_FILE}: field 'families': no shared rubric {DEFAULT!r}")
        return evolver


def criterion_scores(rollouts: pd.DataFrame, rewards: pd.DataFrame) -> pd.DataFrame:
    """Long frame (rollout_id, problem_id, family, prompt, response, rubric, criterion, score) from the
    rewards' details (`c.<id>=<score>|na`, `rubric=<score>`); score NaN for a parse failure."""
    joined = rollouts[["rollout_id", "problem_id", "family", "completion"]].merge(
        rewards[["rollout_id", "details"]], on="rollout_id"
    )
    column = "question" if "question" in rollouts.columns else "prompt"  # the bare question, as the judge saw it
    prompts = rollouts.set_index("rollout_id")[column] if column in rollouts.columns else None
    records = []
    for row in joined.itertuples():
        pairs = parse_details(row.details)
        total = pairs.get("rubric", "na")
        for key, value in pairs.items():
            if key.startswith("c."):
                records.append(
                    {
                        "rollout_id": row.rollout_id,
                        "problem_id": row.problem_id,
                        "family": str(row.family),
                        "prompt": str(prompts[row.rollout_id]) if prompts is not None else "",
                        "response": str(row.completion),
                        "rubric": float("nan") if total == "na" else float(total),
                        "criterion": key[2:],
                        "score": float("nan") if value == "na" else float(value),
                    }
                )
    columns = ["rollout_id", "problem_id", "family", "prompt", "response", "rubric", "criterion", "score"]
    return pd.DataFrame(records, columns=columns)


def discrimination(rows: pd.DataFrame, cid: str) -> float | None:
    """Mean over problem groups of the population variance of criterion `cid`'s scores (parse
    failures left out; groups with fewer than two scores skipped); None when no group qualifies."""
    mine = rows[(rows["criterion"] == cid) & rows["score"].notna()]
    variances = [float(g.var(ddof=0)) for _, g in mine.groupby("problem_id")["score"] if len(g) >= 2]
    return sum(variances) / len(variances) if variances else None


def extremes(rows: pd.DataFrame, shown: int) -> tuple[list[dict], list[dict]]:
    """The `shown` best and worst responses of a family by rubric score (ties: rollout id)."""
    per = rows.drop_duplicates("rollout_id").dropna(subset=["rubric"])

    def pick(part):
        return [{"prompt": r.prompt, "response": r.response, "score": r.rubric} for r in part.head(shown).itertuples()]

    best = per.assign(key=-per["rubric"]).sort_values(["key", "rollout_id"])
    return pick(best), pick(per.sort_values(["rubric", "rollout_id"]))


def rubric_details(total: float | None, ids: list[str], scores: list[float | None]) -> str:
    parts = [
        f"rubric={'na' if total is None else f'{total:.4f}'}",
        f"judge_parse_fail={sum(s is None for s in scores)}",
    ]
    return " ".join(parts + [f"c.{cid}={'na' if s is None else f'{s:.4f}'}" for cid, s in zip(ids, scores)])


def rubric_reward(cfg):
    """The built-in reward `rubric` (a judge-type entry of `rewards:`, coevo/verification/rewards.py): scores rows
    (problems-table rows whose `attrs["iteration"]` names the training iteration) against the rubric
    version iter_{k-1} of the run. Held-out rows (no iteration) get None: evaluation uses the gold checks."""
    entry = next((entry for entry in cfg.coevolver_list if entry.kind == "rubrics"), None)
    if entry is None:
        raise ValueError(f"the 'rubric' reward needs a rubrics co-evolver (got {[e.kind for e in cfg.coevolver_list]})")
    params = entry.rubrics
    endpoint = ChatEndpoint.from_config(entry.writer, "the 'rubric' reward (its judge)")
    judge = Judge(
        endpoint, JudgeCache(cfg.run.out_dir / "judge" / "cache.jsonl"), params.judge_workers, params.judge_scoring
    )

    def score(rows: pd.DataFrame, completions: list[str]) -> list[Reward]:
        iteration = rows.attrs.get("iteration")
        if iteration is None:
            return [Reward(None, False, "rubric", "rubric=na (not a training rollout)") for _ in completions]
        rubric = load_rubric(
            member_dir(cfg, cfg.run.out_dir / "coevolver" / f"iter_{int(iteration) - 1:04d}", "rubrics")
        )
        evolver = RubricsCoEvolver(entry, cfg.seed)
        evolver.rubric = rubric
        per_row = [evolver.criteria(str(family)) for family in rows["family"]]
        items = [(str(p), str(c), cr.text) for p, c, crit in zip(rows["prompt"], completions, per_row) for cr in crit]
        judged = iter(judge.score(items))
        out = []
        for crit in per_row:
            scores = [next(judged).score for _ in crit]
            weighted = [(c.weight, s) for c, s in zip(crit, scores) if s is not None]
            total = sum(w * s for w, s in weighted) / sum(w for w, _ in weighted) if weighted else None
            passed = total is not None and total >= params.pass_threshold
            out.append(Reward(total, passed, "rubric", rubric_details(total, [c.id for c in crit], scores)))
        return out

    return score
