"""Why the skill bank does not pay: admission noise, probe cost and retirement dynamics (issue 14 item 4).

    .venv/bin/python bench/skill_noise.py RUN_DIR [--sims 2000] [--set key=value ...]

RUN_DIR is a finished default run (`coevo train --plain --set run.out_dir=RUN_DIR ...`). Three parts:

(a) Admission noise. Simulated trial skills go through the bank's real `SkillBank.update` (matched
    gaps, the admission test, the lifecycle) on hand-built rollout/reward frames: each matched group
    draws a problem pass rate p from RUN_DIR's observed per-group pass rates, its base half from
    Bernoulli(p) and its probe half from Bernoulli(clip(p + effect)); each update gives a trial as
    many matched groups as trials got per update in RUN_DIR. Reported: the share admitted for a null
    skill (effect 0, the false-admission rate) and for +0.1 / +0.2 (the power), and the matched
    groups spent per decision. `--set` overrides coevolver.skill_bank keys (e.g. admission=threshold).
(b) Probe cost, from RUN_DIR's rollouts: the share of rollouts in with-skill probe halves, the share
    of matched groups with zero reward variance (all pass or all fail: no information about the
    skill), and how well the same question's previous pass rate predicts that.
(c) Retirement dynamics, from RUN_DIR's reports: lifetimes of admitted skills, their running utility at
    retirement, and their mean measured gap while active.

Writes bench/results/skill_noise/skill_noise.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from bench.common import add_output_args, publish, table
from coevo.coevolvers.skill_bank import SkillBank
from coevo.coevolvers.writers import SkillDraft
from coevo.config import CoevolverConfig

EFFECTS = (0.0, 0.1, 0.2)


# ---- reading a run ----
def load_groups(run_dir: Path) -> pd.DataFrame:
    """One row per (iteration, problem) group: question, variants, probe skill, pass rate, reward variance."""
    frames = []
    for path in sorted((run_dir / "rollouts").glob("iter_*.parquet")):
        rollouts = pd.read_parquet(
            path, columns=["rollout_id", "iteration", "problem_id", "question", "variant", "probe_skill"]
        )
        rewards = pd.read_parquet(run_dir / "rewards" / path.name, columns=["rollout_id", "reward", "passed"])
        frames.append(rollouts.merge(rewards, on="rollout_id", validate="one_to_one"))
    rows = pd.concat(frames, ignore_index=True)
    rows["is_probe"] = rows["variant"] == "probe"
    groups = rows.groupby(["iteration", "problem_id"], sort=True).agg(
        question=("question", "first"),
        matched=("probe_skill", lambda s: bool((s != "").any())),
        n=("reward", "size"),
        probe_rows=("is_probe", "sum"),
        pass_rate=("passed", "mean"),
        reward_std=("reward", "std"),
    )
    return groups.reset_index()


def load_reports(run_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((run_dir / "reports").glob("iter_*.json"))]


def trial_groups_per_update(reports: list[dict]) -> list[int]:
    """Matched groups a trial skill received per update (while on trial), from the reports."""
    status: dict[str, str] = {}
    counts: list[int] = []
    for report in reports:
        per_skill: dict[str, int] = {}
        for entry in report["measured"]:
            if status.get(entry["id"], "trial") == "trial":
                per_skill[entry["id"]] = per_skill.get(entry["id"], 0) + 1
        counts += list(per_skill.values())
        for sid in report["new_candidates"]:
            status[sid] = "trial"
        for key, new in (
            ("admitted", "active"),
            ("rejected", "retired"),
            ("promoted", "stable"),
            ("retired", "retired"),
        ):
            for entry in report[key]:
                status[entry["id"]] = new
    return counts


# ---- (a) admission noise through the real bank ----
def simulate(
    bank_cfg: dict,
    rates: np.ndarray,
    per_update: list[int],
    effect: float,
    skills: int,
    seed: int,
    max_updates: int = 60,
) -> dict:
    """Put `skills` trial skills in one real SkillBank and feed it simulated matched groups until each is decided."""
    cfg = CoevolverConfig.model_validate(
        {"skill_bank": {**bank_cfg, "max_active": 10**6}, "writer": {"candidates_per_iter": 0}}
    )
    bank = SkillBank(cfg, seed=0)
    ids = [bank.add(SkillDraft(text=f"skill {i}", family="f", key=f"k{i}", source="sim"), 0) for i in range(skills)]
    rng = np.random.default_rng(seed)
    half = 8  # rollout.group_size 16 split in halves
    admitted, groups_used = set(), {sid: 0 for sid in ids}
    for update in range(1, max_updates + 1):
        trial = [sid for sid in ids if bank.skills[sid].status == "trial"]
        if not trial:
            break
        m = rng.choice(per_update, size=len(trial))
        owner = np.repeat(trial, m)  # [groups]
        p = rng.choice(rates, size=len(owner))  # [groups]
        base = rng.random((len(owner), half)) < p[:, None]  # [groups, half]
        probe = rng.random((len(owner), half)) < np.clip(p + effect, 0, 1)[:, None]  # [groups, half]
        report = bank.update(update, pd.DataFrame(), *_frames(owner, base, probe, update))
        admitted |= {e["id"] for e in report["admitted"]}
        for sid in owner:
            groups_used[sid] += 1
    decided = [sid for sid in ids if bank.skills[sid].status != "trial"]
    return {
        "effect": effect,
        "skills": skills,
        "admitted": len(admitted) / skills,
        "undecided": 1 - len(decided) / skills,
        "groups_per_decision": statistics.fmean(groups_used[sid] for sid in decided) if decided else float("nan"),
    }


def _frames(
    owner: np.ndarray, base: np.ndarray, probe: np.ndarray, iteration: int
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Rollout and reward frames of the matched groups: group g probes skill owner[g] on its own problem."""
    groups, half = base.shape
    problem = np.repeat([f"p{iteration}-{g}" for g in range(groups)], 2 * half)
    variant = np.tile(np.repeat(["base", "probe"], half), groups)
    passed = np.concatenate([base, probe], axis=1).reshape(-1)  # [groups * 2 * half]
    rollout_ids = [f"r{i}" for i in range(len(passed))]
    rollouts = pd.DataFrame(
        {
            "rollout_id": rollout_ids,
            "problem_id": problem,
            "question": problem,
            "family": "f",
            "variant": variant,
            "probe_skill": np.repeat(owner, 2 * half),
        }
    )
    rewards = pd.DataFrame({"rollout_id": rollout_ids, "reward": passed.astype(float), "passed": passed})
    return rollouts, rewards


def survival(
    bank_cfg: dict, rates: np.ndarray, per_update: list[int], effect: float, skills: int, seed: int, updates: int = 20
) -> dict:
    """Admitted (active) skills with a true `effect` through the real lifecycle: share still in use after `updates`."""
    cfg = CoevolverConfig.model_validate(
        {"skill_bank": {**bank_cfg, "max_active": 10**6}, "writer": {"candidates_per_iter": 0}}
    )
    bank = SkillBank(cfg, seed=0)
    ids = [bank.add(SkillDraft(text=f"skill {i}", family="f", key=f"k{i}", source="sim"), 0) for i in range(skills)]
    for sid in ids:
        bank.skills[sid].status = "active"
    rng = np.random.default_rng(seed)
    half, alive = 8, []
    for update in range(1, updates + 1):
        live = [sid for sid in ids if bank.skills[sid].status != "retired"]
        alive.append(len(live) / skills)
        if not live:
            break
        owner = np.repeat(live, rng.choice(per_update, size=len(live)))  # [groups]
        p = rng.choice(rates, size=len(owner))  # [groups]
        base = rng.random((len(owner), half)) < p[:, None]  # [groups, half]
        probe = rng.random((len(owner), half)) < np.clip(p + effect, 0, 1)[:, None]  # [groups, half]
        bank.update(update, pd.DataFrame(), *_frames(owner, base, probe, update))
    alive += [sum(bank.skills[sid].status != "retired" for sid in ids) / skills]
    return {"effect": effect, "in_use_after": {str(k): alive[k] for k in (1, 2, 5, 10, updates) if k < len(alive)}}


# ---- (b) probe cost ----
def probe_cost(groups: pd.DataFrame) -> dict:
    matched = groups[groups["matched"]]
    flat = groups["reward_std"].fillna(0) == 0
    last = groups.groupby("question")["pass_rate"].shift(1)  # the same question's previous group (any iteration before)
    saturated_before = last.isin([0.0, 1.0])
    sat_m, flat_m = saturated_before[groups["matched"]], flat[groups["matched"]]
    return {
        "rollouts": int(groups["n"].sum()),
        "probe_rollout_share": float(groups["probe_rows"].sum() / groups["n"].sum()),
        "matched_group_share": float(groups["matched"].mean()),
        "matched_groups": len(matched),
        "matched_zero_variance_share": float(flat_m.mean()) if len(matched) else float("nan"),
        "all_zero_variance_share": float(flat.mean()),
        "question_seen_before_share": float(last.notna().mean()),
        "p_flat_given_last_saturated": float(flat[saturated_before].mean()),
        "p_flat_given_last_mixed": float(flat[last.notna() & ~saturated_before].mean()),
        "p_flat_given_unseen": float(flat[last.isna()].mean()),
        "matched_skippable_share": float(sat_m.mean()) if len(matched) else float("nan"),
        "matched_flat_caught_by_skip": float((sat_m & flat_m).sum() / max(flat_m.sum(), 1)),
    }


# ---- (c) retirement dynamics ----
def retirement(reports: list[dict]) -> dict:
    admitted_at, gaps_active, ended = {}, {}, {}
    for report in reports:
        it = report["iteration"]
        for entry in report["measured"]:
            if entry["id"] in admitted_at and entry["id"] not in ended:
                gaps_active[entry["id"]].append(entry["gap"])
        for entry in report["admitted"]:
            admitted_at[entry["id"]], gaps_active[entry["id"]] = it, []
        for entry in report["retired"]:
            if entry["id"] in admitted_at:
                ended[entry["id"]] = (it, entry["utility"], entry["reason"])
    lifetimes = [ended[s][0] - admitted_at[s] for s in ended]
    active_gaps = [g for s in gaps_active for g in gaps_active[s]]
    return {
        "admitted": len(admitted_at),
        "retired": len(ended),
        "still_in_use": len(admitted_at) - len(ended),
        "lifetime_iters_median": statistics.median(lifetimes) if lifetimes else None,
        "lifetime_iters_max": max(lifetimes) if lifetimes else None,
        "utility_at_retirement_median": statistics.median(e[1] for e in ended.values()) if ended else None,
        "reasons": sorted({e[2] for e in ended.values()}),
        "active_groups_per_skill_median": statistics.median(len(g) for g in gaps_active.values())
        if gaps_active
        else None,
        "active_gap_mean": statistics.fmean(active_gaps) if active_gaps else None,
        "active_gap_sem": statistics.stdev(active_gaps) / len(active_gaps) ** 0.5 if len(active_gaps) > 1 else None,
        "active_gaps": len(active_gaps),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--sims", type=int, default=2000, help="Simulated skills per effect size.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--set", action="append", default=[], help="coevolver.skill_bank override key=value (YAML value)."
    )
    parser.add_argument(
        "--per-update", type=int, default=None, help="Matched groups per trial per update (default: as in RUN_DIR)."
    )
    parser.add_argument("--name", default="skill_noise", help="Result file name (one per setting).")
    add_output_args(parser, "skill_noise")
    args = parser.parse_args()
    overrides = {k: yaml.safe_load(v) for k, v in (item.split("=", 1) for item in args.set)}
    groups, reports = load_groups(args.run_dir), load_reports(args.run_dir)
    rates, per_update = groups["pass_rate"].to_numpy(), trial_groups_per_update(reports) or [2]
    per_update = [args.per_update] if args.per_update else per_update
    sims = [simulate(overrides, rates, per_update, e, args.sims, args.seed + i) for i, e in enumerate(EFFECTS)]
    lives = [
        survival(overrides, rates, per_update, e, args.sims // 4, args.seed + 10 + i) for i, e in enumerate(EFFECTS)
    ]
    cost, dynamics = probe_cost(groups), retirement(reports)
    report = {
        "run_dir": str(args.run_dir),
        "skill_bank": overrides,
        "per_update_median": statistics.median(per_update),
        "admission": sims,
        "active_survival": lives,
        "probe_cost": cost,
        "retirement": dynamics,
    }
    rows = [
        [f"{s['effect']:+.1f}", f"{s['admitted']:.3f}", f"{s['undecided']:.3f}", f"{s['groups_per_decision']:.1f}"]
        for s in sims
    ]
    rows += [
        [
            f"in use after k updates, {s['effect']:+.1f}",
            " ".join(f"{k}:{v:.2f}" for k, v in s["in_use_after"].items()),
            "",
            "",
        ]
        for s in lives
    ]
    rows += [
        [key, f"{value:.3f}" if isinstance(value, float) else str(value), "", ""]
        for key, value in {**cost, **dynamics}.items()
    ]
    publish(
        args.name,
        args.out,
        report,
        table(
            f"skill noise {overrides}",
            ["effect / quantity", "admitted / value", "undecided", "groups per decision"],
            rows,
        ),
        None,
        args.mlflow,
    )


if __name__ == "__main__":
    main()
