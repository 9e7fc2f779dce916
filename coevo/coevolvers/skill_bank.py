"""Skill bank with pre-storage validation and a fitness-driven lifecycle.

Methods implemented:
- Pre-storage skill validation: a problem's rollout group splits into two
  matched halves under the same retrieval, base (the retrieved skills) and probe (the same skills plus
  one candidate); the reward gap probe - base is the candidate's marginal utility, measured with the
  normal group budget (no extra rollouts). Only a positive gap above a margin admits it.
- SkillForge lifecycle: trial -> active -> stable -> retired by fitness, here the
  running utility (EMA of measured gaps); retired skills stay in the bank (their text, in skills.jsonl)
  as history; a capacity cap keeps the library compact.
- EDGE: experience-conditioned vs experience-free halves of one group admit only
  positive marginal gains, and active skills keep being measured so obsolete ones are pruned as the
  policy improves.

How skill-conditioned rollouts enter the policy update (the caller's side, `coevolver.update_context`):
with "strip" (default) the caller removes the skills from the prompt and trains the bare question on
the completions sampled with skills, correcting the context shift with truncated importance sampling
(pi(completion | question) / pi_sampler(completion | skills + question), capped); this is EDGE's
"distil the induced behaviour into the unconditioned policy on its own support", since the student
runs without skills at test time. With "keep" the caller trains with the skills in the prompt.

Departures from the papers:
1. The candidate is induced from the previous iteration's verified trajectories (written in
   `update` at iteration k, first probed by `plan` at k+1), not from the same problem's base half, so
   one generation pass per iteration suffices and the stage table rollout -> verify -> co-evolve ->
   update holds.
2. "Significant" is, with `admission: threshold`, a fixed margin: a trial is judged after `min_count`
   matched groups and admitted when the mean gap exceeds `admit_threshold`. That admits a skill with no
   effect 20% of the time in the default run (bench/skill_noise.py), so the default is `admission:
   sequential`: a one-sided stratified permutation test (Cochran-Mantel-Haenszel for 0/1 rewards) on
   the matched groups, each group a stratum, S = sum over groups of (probe reward sum - its mean under
   random assignment of the group's rewards to the halves), V = sum of the permutation variances,
   z = S / sqrt(V); groups without reward variance add nothing. It looks at each update that brings new
   informative groups (at least `min_count`) and admits when z exceeds the level spent at this look: a
   Pocock-type alpha-spending function alpha * ln(1 + (e - 1) t) (Lan & DeMets 1983) of the information
   fraction t = informative groups / `max_count`, each look testing at the increment (a union bound, so
   the false-admission rate over all looks is at most `alpha`); a trial not admitted by `max_count`
   matched groups is rejected, and one whose z is at or below `futility_z` at a look at once. Active -> stable after
   `stable_count` gaps with utility > `admit_threshold`; active/stable -> retired when utility < `retire_threshold`
   (with `retire_z` set, the default, instead when the test's statistic over its informative groups, older ones
   discounted by `evidence_decay`, is at or below `retire_z`: the EMA rule retired a simulated +0.1 skill within 10
   updates 66% of the time, on noise and on the zero gaps of saturated groups); beyond `max_active` the lowest-utility
   skills are retired. Utility is an EMA, u <- decay*u + (1-decay)*gap, initialised by the first gap.
   Each skill makes at most one transition per update.
3. No pre-RL evaluation pass (the online trial stage plays its part), no LLM mutation of surviving
   skills, and no reranking/pruning by the writer's generation likelihood: retrieval is lexical,
   character-bigram Jaccard similarity between the question and the skill's key (the question it was
   induced from), within the problem's family, ties by utility then id.
4. A skill is never retrieved or probed on the very question it was induced from (its key): a
   worked example would carry the answer and inflate its own gap.
5. Probes prefer trial skills (round-robin over a family's trials, least-measured first, so trials
   spread across problems); else the least-measured retrieved active skill; else (a departure from
   SkillForge, where stable skills are no longer evaluated) the least-measured retrieved stable one,
   so stable skills can still be retired when the policy outgrows them (EDGE's pruning).
6. A frozen bank (ablation) still retrieves but never probes and never changes.
7. With `skip_saturated` (default) no skill is probed on a question whose previous group passed all or
   none of its rollouts (the bank remembers each question's last pass rate, keyed by the question's
   hash): in the default run 82% of such groups are saturated again, where a probe measures nothing.
8. A saved version keeps a retired skill's identity (skills.jsonl: id, text, status, ...) but not its
   statistics (gaps, utility, history, evidence): nothing reads them once it is retired (measurement, the
   lifecycle, retrieval and probes skip retired skills; only its id, for de-duplicating new
   candidates, and its status, for the counts, matter), and its whole lifecycle is in the per-iteration
   reports (reports/iter_NNNN.json) and the catalog (`coevo query skill ID`). Otherwise every version
   carried the gaps of every skill ever measured (stats.json 100 kB of a 141 kB version after 300
   iterations of the default run); now stats.json holds only the live skills (at most max_trials +
   max_active). A loaded retired skill has empty gaps, history and evidence and utility 0.

Subclasses (the procedural memory, memory.py) change what an entry applies to (`applies`), what the
rollouts and the teacher see (`rollout_context`, `teacher_context`) and how candidates are written
(`_write_candidates`); measurement, admission and the lifecycle stay these.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from coevo.coevolvers.base import (
    TextGenerator,
    read_artifact,
    register_coevolver,
    save_artifact,
)
from coevo.coevolvers.writers import SkillDraft, SkillWriter, build_writer, worked_texts
from coevo.config import CoevolverConfig
from coevo.io import hash_bytes
from coevo.types import ContextVariant

STATUSES = ("trial", "active", "stable", "retired")
IDENTITY = ("id", "text", "family", "key", "source", "status", "created_iter", "level")  # skills.jsonl
STATS = ("gaps", "utility", "history", "evidence")  # stats.json, for the skills not retired (departure 8)
EVIDENCE = {
    "score": 0.0,
    "variance": 0.0,
    "groups": 0,
    "spent": 0.0,
    "looked": 0,
    "recent_score": 0.0,
    "recent_variance": 0.0,
}
RATES = "rates.json"  # the last pass rate of each question (by hash), for skip_saturated


def skill_id(text: str) -> str:
    """First 12 hex digits of the sha256 of the skill's text."""
    return hash_bytes(text.encode())[:12]


def bigram_similarity(a: str, b: str) -> float:
    """Jaccard similarity of the character-bigram sets of two strings (a 1-character string is its own bigram)."""
    grams_a = {a[i : i + 2] for i in range(max(len(a) - 1, 1))} if a else set()
    grams_b = {b[i : i + 2] for i in range(max(len(b) - 1, 1))} if b else set()
    union = grams_a | grams_b
    return len(grams_a & grams_b) / len(union) if union else 0.0


@dataclass
class Skill:
    id: str
    text: str
    family: str
    key: str
    source: str
    status: str = "trial"
    created_iter: int = 0
    level: int = 1  # the memory's abstraction level (1 trajectory, 2 lesson, 3 pattern); skills are level 1
    gaps: list[float] = field(default_factory=list)
    utility: float = 0.0
    history: list[dict] = field(default_factory=list)
    # the sequential test's sums: score S, variance V, informative groups, alpha spent, groups at the last look;
    # recent_*: the same sums discounted per informative group (retire_z)
    evidence: dict = field(default_factory=lambda: dict(EVIDENCE))

    def record(
        self, gap: float, decay: float, score: float = 0.0, variance: float = 0.0, recent_decay: float = 1.0
    ) -> None:
        """Append a measured gap and update the running utility (the first gap initialises it) and the
        test's sums (`score`, `variance`: the group's probe sum minus its permutation mean, and its variance)."""
        self.utility = gap if not self.gaps else decay * self.utility + (1 - decay) * gap
        self.gaps.append(gap)
        if variance > 0:
            self.evidence = self.evidence | {
                "score": self.evidence["score"] + score,
                "variance": self.evidence["variance"] + variance,
                "groups": self.evidence["groups"] + 1,
                "recent_score": recent_decay * self.evidence.get("recent_score", 0.0) + score,
                "recent_variance": recent_decay**2 * self.evidence.get("recent_variance", 0.0) + variance,
            }

    def z(self) -> float:
        """The sequential test's statistic S / sqrt(V) (0 before any informative group)."""
        variance = self.evidence["variance"]
        return self.evidence["score"] / math.sqrt(variance) if variance > 0 else 0.0

    def recent_z(self) -> float | None:
        """The discounted statistic sum d^age s / sqrt(sum d^(2 age) v) (None before any informative group)."""
        variance = self.evidence.get("recent_variance", 0.0)
        return self.evidence.get("recent_score", 0.0) / math.sqrt(variance) if variance > 0 else None

    def move(self, status: str, iteration: int, reason: str) -> None:
        self.status = status
        self.history.append({"iter": iteration, "status": status, "reason": reason})

    def summary(self) -> dict:
        return {"id": self.id, "utility": self.utility, "count": len(self.gaps)}


def _family(problem: Mapping) -> str:
    family = problem.get("family")
    return family if isinstance(family, str) else ""


@register_coevolver("skill_bank")
class SkillBank:
    kind: str
    roles: frozenset[str] = frozenset({"context"})  # plans the probes, gives evaluation and teacher their context

    def __init__(
        self, cfg: CoevolverConfig, seed: int, generate: TextGenerator | None = None, writer: SkillWriter | None = None
    ):
        self.cfg = cfg
        self.params = cfg.skill_bank
        self.seed = seed  # the bank draws no random numbers: plan and update are deterministic
        self.frozen = cfg.frozen
        self.writer = writer if writer is not None else build_writer(cfg.writer)
        self.skills: dict[str, Skill] = {}
        self.rates: dict[str, float] = {}  # question hash -> pass rate of its last group (skip_saturated)

    # ---- bank contents ----
    def add(self, draft: SkillDraft, iteration: int) -> str | None:
        """Put a draft on trial; return its id, or None when a skill with that text is already in the bank."""
        sid = skill_id(draft.text)
        if sid in self.skills:
            return None
        skill = Skill(
            id=sid,
            text=draft.text,
            family=draft.family,
            key=draft.key,
            source=draft.source,
            created_iter=iteration,
            level=draft.level,
        )
        skill.move("trial", iteration, "written")
        self.skills[sid] = skill
        return sid

    def counts(self) -> dict[str, int]:
        return {status: sum(s.status == status for s in self.skills.values()) for status in STATUSES}

    def _with_status(self, *statuses: str) -> list[Skill]:
        return [self.skills[sid] for sid in sorted(self.skills) if self.skills[sid].status in statuses]

    # ---- retrieval and planning ----
    def applies(self, skill: Skill, problem: Mapping) -> bool:
        """Whether `skill` may be retrieved or probed for `problem`: same family."""
        return skill.family == _family(problem)

    def retrieve(self, problem: Mapping, k: int, own_key: bool = False) -> list[Skill]:
        """Top-k active/stable skills that apply to the problem, by bigram similarity of the question
        to the skill's key (ties: higher utility, then id); a skill induced from this very question
        only with `own_key`."""
        question = str(problem["prompt"])
        pool = [
            s
            for s in self._with_status("active", "stable")
            if self.applies(s, problem) and (own_key or s.key != question)
        ]
        pool.sort(key=lambda s: (-bigram_similarity(question, s.key), -s.utility, s.id))
        return pool[:k]

    def context_for(self, problem: Mapping) -> list[str]:
        return [s.text for s in self.retrieve(problem, self.params.top_k)]

    def rollout_context(self, problem: Mapping) -> list[Skill]:
        """The skills every rollout of `problem` sees (the base of its matched groups)."""
        return self.retrieve(problem, self.params.top_k)

    def teacher_context(self, problem: Mapping) -> list[str]:
        return self.context_for(problem)

    def plan(self, problems: pd.DataFrame, group_size: int) -> list[ContextVariant]:
        """Per problem: matched base/probe halves when a skill can be probed, else one solo variant."""
        trials = sorted(self._with_status("trial"), key=lambda s: (len(s.gaps), s.created_iter, s.id))
        turn: dict[str, int] = {}  # round-robin cursor over each family's trials
        variants: list[ContextVariant] = []
        for problem in problems.to_dict("records"):
            retrieved = self.retrieve(problem, self.params.top_k)
            skip = self.frozen or group_size < 2 or self.saturated(problem)
            probe = None if skip else self._choose_probe(problem, retrieved, trials, turn)
            variants.extend(_variants(str(problem["id"]), self.rollout_context(problem), probe, group_size))
        return variants

    def saturated(self, problem: Mapping) -> bool:
        """With skip_saturated: whether the question's previous group passed all or none of its rollouts."""
        return self.params.skip_saturated and self.rates.get(skill_id(str(problem["prompt"]))) in (0.0, 1.0)

    def _choose_probe(
        self, problem: Mapping, retrieved: list[Skill], trials: list[Skill], turn: dict[str, int]
    ) -> Skill | None:
        family, question = _family(problem), str(problem["prompt"])
        candidates = [s for s in trials if self.applies(s, problem) and s.key != question]
        if candidates:
            index = turn.get(family, 0)
            turn[family] = index + 1
            return candidates[index % len(candidates)]
        for status in ("active", "stable"):
            measured = [s for s in retrieved if s.status == status]
            if measured:
                return min(measured, key=lambda s: len(s.gaps))  # min keeps the first: retrieval rank breaks ties
        return None

    # ---- evolution ----
    def update(self, iteration: int, problems: pd.DataFrame, rollouts: pd.DataFrame, rewards: pd.DataFrame) -> dict:
        """Measure matched-group gaps, run the lifecycle, write new candidates; return the report."""
        report: dict = {"iteration": iteration, "frozen": self.frozen, "new_candidates": []}
        report |= {name: [] for name in ("measured", "admitted", "rejected", "promoted", "retired")}
        if not self.frozen:
            frame = _join(rollouts, rewards)
            for sid, pid, gap, score, variance in _matched_gaps(frame):
                if sid in self.skills and self.skills[sid].status != "retired":
                    self.skills[sid].record(gap, self.params.utility_decay, score, variance, self.params.evidence_decay)
                    report["measured"].append({"id": sid, "problem_id": pid, "gap": gap})
            if self.params.skip_saturated:
                rates = frame.groupby("question", sort=True)["passed"].mean()
                self.rates |= {skill_id(str(q)): float(r) for q, r in rates.items()}
            self._lifecycle(iteration, report)
            report["new_candidates"] = self._write_candidates(iteration, frame)
        report["counts"] = self.counts()
        return report

    def _lifecycle(self, iteration: int, report: dict) -> None:
        p = self.params
        for skill in self._with_status("trial", "active", "stable"):
            if skill.status == "trial":
                self._judge(skill, iteration, report)
            elif skill.status in ("active", "stable") and (reason := self._retire_reason(skill)):
                skill.move("retired", iteration, reason)
                report["retired"].append({"id": skill.id, "utility": skill.utility, "reason": reason})
            elif skill.status == "active" and len(skill.gaps) >= p.stable_count and skill.utility > p.admit_threshold:
                skill.move("stable", iteration, "promoted")
                report["promoted"].append(skill.summary())
        in_use = sorted(self._with_status("active", "stable"), key=lambda s: (s.utility, s.id))
        for skill in in_use[: max(len(in_use) - p.max_active, 0)]:
            skill.move("retired", iteration, "capacity")
            report["retired"].append({"id": skill.id, "utility": skill.utility, "reason": "capacity"})

    def _retire_reason(self, skill: Skill) -> str:
        """Why an active or stable skill retires now ('' if it stays): its running utility below
        retire_threshold, or with retire_z set, its discounted test statistic at or below retire_z."""
        p = self.params
        if p.retire_z is None:
            return "low utility" if skill.utility < p.retire_threshold else ""
        recent = skill.recent_z()
        return "low evidence" if recent is not None and recent <= p.retire_z else ""

    def _judge(self, skill: Skill, iteration: int, report: dict) -> None:
        """Admit or reject a trial skill, or leave it on trial (departure 2)."""
        p = self.params
        if p.admission == "threshold":
            if len(skill.gaps) < p.min_count:
                return
            admitted = sum(skill.gaps) / len(skill.gaps) > p.admit_threshold
            skill.move("active" if admitted else "retired", iteration, "admitted" if admitted else "rejected")
            report["admitted" if admitted else "rejected"].append(skill.summary())
            return
        looks = skill.evidence["looked"]
        admitted, final = self._sequential_look(skill), len(skill.gaps) >= p.max_count
        futile = p.futility_z is not None and skill.evidence["looked"] > looks and skill.z() <= p.futility_z
        if admitted or final or futile:
            skill.move("active" if admitted else "retired", iteration, "admitted" if admitted else "rejected")
            report["admitted" if admitted else "rejected"].append(skill.summary() | {"z": skill.z()})

    def _sequential_look(self, skill: Skill) -> bool:
        """One look of the sequential test when the trial has new informative groups (at least min_count):
        spend alpha up to the information fraction and admit when z exceeds the increment's critical value."""
        p, ev = self.params, skill.evidence
        final = len(skill.gaps) >= p.max_count
        if ev["groups"] < p.min_count or (ev["groups"] == ev["looked"] and not final):
            return False
        fraction = 1.0 if final else min(ev["groups"] / p.max_count, 1.0)
        spend = spent_alpha(p.alpha, fraction)
        level = spend - ev["spent"]
        skill.evidence = ev | {"spent": spend, "looked": ev["groups"]}
        return level > 0 and skill.z() >= statistics.NormalDist().inv_cdf(1 - level)

    def _write_candidates(self, iteration: int, frame: pd.DataFrame) -> list[str]:
        n = min(self.cfg.writer.candidates_per_iter, self.params.max_trials - self.counts()["trial"])
        if n <= 0 or frame.empty:
            return []
        drafts = self.writer.write(_examples(frame), n)
        return [sid for sid in (self.add(d, iteration) for d in drafts if d.text) if sid is not None]

    # ---- persistence ----
    def save(self, directory: Path) -> str:
        ordered = [self.skills[sid] for sid in sorted(self.skills)]
        skills = "".join(json.dumps({k: getattr(s, k) for k in IDENTITY}, sort_keys=True) + "\n" for s in ordered)
        stats = {s.id: {k: getattr(s, k) for k in STATS} for s in ordered if s.status != "retired"}  # departure 8
        files = {
            "skills.jsonl": skills.encode(),
            "stats.json": (json.dumps(stats, indent=2, sort_keys=True) + "\n").encode(),
        }
        if self.rates:
            files[RATES] = (json.dumps(self.rates, sort_keys=True) + "\n").encode()
        return save_artifact(directory, self.kind, files, extra={"counts": self.counts()})

    @classmethod
    def load(cls, directory: Path, cfg: CoevolverConfig, seed: int, generate: TextGenerator | None = None) -> SkillBank:
        """Load a saved bank; raises ValueError naming any file whose hash does not match the manifest."""
        _, files = read_artifact(directory, cls.kind)
        stats = json.loads(files["stats.json"])
        bank = cls(cfg, seed, generate)
        for line in files["skills.jsonl"].decode().splitlines():
            entry = json.loads(line)
            retired = entry["status"] == "retired"  # no statistics saved (departure 8); older versions have them
            bank.skills[entry["id"]] = Skill(**entry, **(stats.get(entry["id"], {}) if retired else stats[entry["id"]]))
        bank.rates = json.loads(files[RATES]) if RATES in files else {}
        return bank

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.skills == other.skills and self.rates == other.rates


def _variants(problem_id: str, shown: list[Skill], probe: Skill | None, group_size: int) -> list[ContextVariant]:
    """Matched halves for a probe (trial: base=shown, probe=shown+[trial]; shown skill s:
    base=shown-s, probe=shown), else one solo variant with the shown skills."""
    if probe is None:
        return [_variant(problem_id, "solo", shown, "", group_size)]
    with_probe = shown if any(s.id == probe.id for s in shown) else [*shown, probe]
    base = [s for s in with_probe if s.id != probe.id]
    return [
        _variant(problem_id, "base", base, probe.id, math.ceil(group_size / 2)),
        _variant(problem_id, "probe", with_probe, probe.id, group_size // 2),
    ]


def _variant(problem_id: str, variant: str, skills: list[Skill], probe_id: str, n: int) -> ContextVariant:
    return ContextVariant(
        problem_id=problem_id,
        variant=variant,
        skills=tuple(s.id for s in skills),
        probe_skill=probe_id,
        n=n,
        texts=tuple(s.text for s in skills),
    )


def _join(rollouts: pd.DataFrame, rewards: pd.DataFrame) -> pd.DataFrame:
    """Rollouts with their reward and passed columns; every rollout must have exactly one reward."""
    frame = rollouts.merge(
        rewards[["rollout_id", "reward", "passed"]], on="rollout_id", how="left", validate="one_to_one"
    )
    if frame["reward"].isna().any():
        missing = frame.loc[frame["reward"].isna(), "rollout_id"].head(5).tolist()
        raise ValueError(f"rollouts without a reward, e.g. {missing}")
    return frame


def spent_alpha(alpha: float, fraction: float) -> float:
    """Pocock-type alpha-spending function (Lan & DeMets 1983): alpha * ln(1 + (e - 1) * t), t in [0, 1]."""
    return alpha * math.log(1 + (math.e - 1) * fraction)


def permutation_moments(base: pd.Series, probe: pd.Series) -> tuple[float, float]:
    """(probe sum - its mean, its variance) when the group's rewards are assigned to the halves at random.

    With N rewards r of mean m and n_p of them in the probe half: mean n_p m, variance
    n_p n_b sum (r - m)^2 / (N (N - 1)) (sampling without replacement); for 0/1 rewards this is the
    hypergeometric variance of the Cochran-Mantel-Haenszel test. A group without variance gives (0, 0).
    """
    rewards = pd.concat([base, probe])
    n, n_probe, n_base, mean = len(rewards), len(probe), len(base), float(rewards.mean())
    variance = n_probe * n_base * float(((rewards - mean) ** 2).sum()) / (n * (n - 1)) if n > 1 else 0.0
    return (float(probe.sum()) - n_probe * mean, variance) if variance > 1e-12 else (0.0, 0.0)


def _matched_gaps(frame: pd.DataFrame) -> list[tuple[str, str, float, float, float]]:
    """(probed skill id, problem id, mean probe reward - mean base reward, permutation score, its variance)
    per matched group, by problem id."""
    matched = frame[frame["variant"].isin(["base", "probe"])]
    gaps = []
    for pid, rows in matched.groupby("problem_id", sort=True):
        probed = sorted(set(rows["probe_skill"]))
        base = rows.loc[rows["variant"] == "base", "reward"]
        probe = rows.loc[rows["variant"] == "probe", "reward"]
        if len(probed) == 1 and probed[0] and len(base) and len(probe):
            gaps.append((probed[0], str(pid), float(probe.mean() - base.mean()), *permutation_moments(base, probe)))
    return gaps


def _examples(frame: pd.DataFrame) -> list[dict]:
    """This iteration's passed rollouts as writer examples (an episode as `worked_text`), with their
    problem's pass rate."""
    pass_rate = frame.groupby("problem_id")["passed"].mean().rename("pass_rate")
    passed = frame[frame["passed"].astype(bool)].join(pass_rate, on="problem_id")
    passed["completion"] = worked_texts(passed)  # an episode's every turn, not its last answer only
    passed = passed.sort_values(["problem_id", "rollout_id"])
    passed["family"] = passed["family"].map(lambda f: f if isinstance(f, str) else "")  # as `_family` reads problems
    cols = ["problem_id", "question", "completion", "family", "pass_rate"]
    return [{**row, "pass_rate": float(row["pass_rate"])} for row in passed[cols].to_dict("records")]
