"""The comparison's table (JSON and markdown) and figure from its finished arm runs' records.

Readout of a run (the accuracy that enters the comparison):
  iterations: N     the evaluation after iteration N (every arm ran exactly N iterations);
  train_seconds: S  the last evaluation whose cumulative *measured* training seconds (rollout +
                    verify + co-evolve + update, evaluation excluded) are at most S, each arm by its
                    own clock: arms may be read at different iterations. A run whose max_iterations
                    ended before S is marked `budget_reached: false`, and then every run is read at
                    the largest budget all of them reached (the smallest run's total, `read_at`): a
                    budget some run never reached would compare arms at different seconds.
The table depends only on the records (no paths, no wall clock), so the same runs give the same
table however they were split over sittings and merged.

Validation: where every run of an arm and of the reference kept its validation verdicts at the
readout, the arm's difference on the validation split is paired the same way (`val_vs_reference`).
It is the figure to choose an arm or a setting by; the test split's difference then measures the
choice without having made it.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np

from coevo.compare import stats
from coevo.compare.runs import STAGES, TRAIN_PHASES
from coevo.compare.spec import Spec
from coevo.io import atomic_path, write_text


def train_seconds(record: dict) -> float:
    """A run's total measured training seconds (its steps' train phases)."""
    return sum(sum(s["seconds"][p] for p in TRAIN_PHASES) for s in record["steps"])


def read_at(spec: Spec, markers: list[dict]) -> float | None:
    """The training seconds every run is read at: the spec's train_seconds, or the smallest run's total
    where some run ended before it; None under an iterations budget."""
    if spec.iterations is not None:
        return None
    return min([spec.train_seconds] + [train_seconds(m["record"]) for m in markers])


def readout(spec: Spec, curve: list[dict], seconds: float | None = None) -> dict:
    """The evaluation a run is read at under the spec's budget (see the module docstring): after
    iteration `spec.iterations`, or the last one within `seconds` (default: the spec's train_seconds)."""
    if spec.iterations is not None:
        return next(p for p in curve if p["iteration"] == spec.iterations)
    budget = spec.train_seconds if seconds is None else seconds
    return [p for p in curve if p["train_seconds"] <= budget][-1]


def run_row(spec: Spec, marker: dict, seconds: float | None) -> dict:
    record = marker["record"]
    point = readout(spec, record["curve"], seconds)
    steps = record["steps"]
    shares = [s["zero_var_share"] for s in steps if s["zero_var_share"] is not None]
    total = train_seconds(record)
    return {
        "arm": marker["arm"],
        "seed": marker["seed"],
        "n_test": len(point["verdicts"]),
        "readout_iteration": point["iteration"],
        "readout_train_seconds": point["train_seconds"],
        "final_acc": point["acc"],
        "half_width": stats.run_half_width(point["acc"], len(point["verdicts"])),
        "val_acc": point.get("val_acc"),  # None where the run kept no validation verdicts
        "spec_sha256": marker.get("spec_sha256"),  # the spec its sitting read; None: not recorded (older run)
        "budget_reached": spec.train_seconds is None or total >= spec.train_seconds,
        "zero_var_share": statistics.fmean(shares) if shares else None,
        "stage_seconds": {stage: sum(s["seconds"][stage] for s in steps) for stage in STAGES},
        "curve": [
            {"iteration": p["iteration"], "train_seconds": p["train_seconds"], "acc": p["acc"]} for p in record["curve"]
        ],
    }


def gain_over_start(spec: Spec, markers: list[dict], seconds: float | None) -> dict | None:
    """An arm's readout against its own iteration-0 evaluation (the policy before any update), paired
    per seed over the test problems: what training gained; None when a run has no iteration 0."""
    starts = {m["seed"]: m["record"]["curve"][0] for m in markers}
    if any(point["iteration"] != 0 for point in starts.values()):
        return None
    final = {m["seed"]: readout(spec, m["record"]["curve"], seconds)["verdicts"] for m in markers}
    return stats.paired_difference(final, {seed: point["verdicts"] for seed, point in starts.items()})


def validation_difference(
    spec: Spec, cells: dict[tuple[str, int], dict], arm: str, seeds: list[int], seconds: float | None
) -> dict | None:
    """The arm's paired difference from the reference on the validation split at the same readouts;
    None unless every one of those readouts kept its validation verdicts."""
    points = {
        (name, s): readout(spec, cells[(name, s)]["record"]["curve"], seconds)
        for name in (arm, spec.reference)
        for s in seeds
    }
    if not all("val_verdicts" in point for point in points.values()):
        return None
    return stats.paired_difference(
        {s: points[(arm, s)]["val_verdicts"] for s in seeds},
        {s: points[(spec.reference, s)]["val_verdicts"] for s in seeds},
    )


def build_table(spec: Spec, markers: list[dict]) -> dict:
    """The table of the finished runs in `markers` (one per arm and seed present)."""
    order = {a.name: i for i, a in enumerate(spec.arms)}
    markers = sorted(markers, key=lambda m: (order[m["arm"]], m["seed"]))
    cells = {(m["arm"], m["seed"]): m for m in markers}
    seconds = read_at(spec, markers)
    rows = [run_row(spec, m, seconds) for m in markers]
    ref_seeds = sorted(s for a, s in cells if a == spec.reference)
    arms = []
    for arm in spec.arms:
        mine = [r for r in rows if r["arm"] == arm.name]
        if not mine:
            continue
        summary = {
            "arm": arm.name,
            "seeds": [r["seed"] for r in mine],
            "acc_mean": statistics.fmean(r["final_acc"] for r in mine),
        }
        step_seconds = [
            sum(s["seconds"][p] for p in TRAIN_PHASES)
            for m in markers
            if m["arm"] == arm.name
            for s in m["record"]["steps"]
        ]
        summary["step_seconds"] = stats.step_summary(step_seconds) if step_seconds else None
        summary["gain"] = gain_over_start(spec, [cells[(arm.name, s)] for s in summary["seeds"]], seconds)
        shared = [s for s in summary["seeds"] if s in ref_seeds]
        if arm.name != spec.reference and shared:
            verdicts = {s: readout(spec, cells[(arm.name, s)]["record"]["curve"], seconds)["verdicts"] for s in shared}
            ref = {s: readout(spec, cells[(spec.reference, s)]["record"]["curve"], seconds)["verdicts"] for s in shared}
            summary["vs_reference"] = stats.paired_difference(verdicts, ref)
            summary["val_vs_reference"] = validation_difference(spec, cells, arm.name, shared, seconds)
            ref_steps = [
                sum(s["seconds"][p] for p in TRAIN_PHASES)
                for m in markers
                if m["arm"] == spec.reference
                for s in m["record"]["steps"]
            ]
            summary["time_ratio"] = stats.timing_ratio(step_seconds, ref_steps)
        arms.append(summary)
    budget = (
        {"iterations": spec.iterations}
        if spec.iterations is not None
        else {"train_seconds": spec.train_seconds, "max_iterations": spec.max_iterations}
    )
    if seconds is not None and seconds < spec.train_seconds:
        budget["read_at_train_seconds"] = round(seconds, 2)
    complete = all((a.name, s) in cells for a in spec.arms for s in spec.seeds)
    return {
        "name": spec.name,
        "budget": budget,
        "reference": spec.reference,
        "seeds": spec.seeds,
        "complete": complete,
        "interval_method": METHOD_NOTE,
        "spec_sha256": spec.sha256,
        "arms": arms,
        "runs": rows,
    }


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}"


def _interval(difference: dict) -> str:
    """'+1.2 [-3.3, +5.3] p 0.62': a paired difference in points with its 95% interval and p-value;
    with one seed marked as such, and from 10 seeds followed by the nested bootstrap's interval."""
    low, high = difference["ci95"]
    text = f"{_pct(difference['mean_diff'])} [{_pct(low)}, {_pct(high)}] p {_p(difference.get('p_value'))}"
    if difference.get("method") == stats.ONE_SEED:
        text += " (1 seed: problems only)"
    if "nested_bootstrap" in difference:
        n_low, n_high = difference["nested_bootstrap"]["ci95"]
        text += f"; nested bootstrap [{_pct(n_low)}, {_pct(n_high)}]"
    return text


def _spec_note(table: dict) -> str:
    """Which spec version the runs were made under (its sha256, recorded by each run when it ran)."""
    now = table.get("spec_sha256") or "?"
    made = {r.get("spec_sha256") for r in table["runs"]}
    if made == {now}:
        return f" Spec sha256 {now[:12]}: every run was made under this version of it (seeds fixed before the runs)."
    if made == {None}:
        return f" Spec sha256 {now[:12]}; every run was made before runs recorded the spec's hash."
    other = [f"{r['arm']} s{r['seed']}" for r in table["runs"] if r.get("spec_sha256") not in (now, None)]
    unrecorded = [f"{r['arm']} s{r['seed']}" for r in table["runs"] if r.get("spec_sha256") is None]
    return (
        f" Spec sha256 {now[:12]}"
        + (f"; runs made under another version of it: {', '.join(other)}" if other else "")
        + (f"; runs made before the spec's hash was recorded: {', '.join(unrecorded)}" if unrecorded else "")
        + "."
    )


def _p(value: float | None) -> str:
    return "-" if value is None else f"{value:.2g}" if value >= 0.001 else "<0.001"


METHOD_NOTE = (
    "Intervals of a mean over seeds: Student t over the per-seed paired differences (df = seeds - 1), "
    "with the two-sided p-value against 0; with one seed, the within-seed paired bootstrap (problem "
    "sampling only, marked); from 10 seeds the nested paired bootstrap follows as a second figure."
)


def markdown(table: dict) -> str:
    budget = ", ".join(f"{k} {v}" for k, v in table["budget"].items() if k != "read_at_train_seconds")
    if "read_at_train_seconds" in table["budget"]:
        budget += (
            f" (budget not reached by every run: all read at {table['budget']['read_at_train_seconds']} s, "
            "the smallest run's total)"
        )
    out = [
        f"# {table['name']}: {budget}; reference {table['reference']}; seeds {table['seeds']}"
        + ("" if table["complete"] else " (partial)"),
        "",
        table.get("interval_method", METHOD_NOTE) + _spec_note(table),
        "",
    ]
    out += [
        (
            "| arm | seeds | acc (mean) | gain over iteration 0, points [95% CI] p | diff vs reference, points "
            "[95% CI] p | per-seed diff | validation diff vs reference [95% CI] p | step s (median [q25, q75], n) "
            "| time ratio [95% CI] |"
        ),
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for a in table["arms"]:
        vs, ratio, st = a.get("vs_reference"), a.get("time_ratio"), a["step_seconds"]
        diff = "reference" if vs is None else _interval(vs)
        val = a.get("val_vs_reference")
        val_diff = "reference" if vs is None else "-" if val is None else _interval(val)
        per_seed = "" if vs is None else " ".join(f"s{r['seed']}:{_pct(r['diff'])}" for r in vs["seeds"])
        step = "-" if st is None else f"{st['median_s']:.3f} [{st['q25_s']:.3f}, {st['q75_s']:.3f}], {st['steps']}"
        rat = (
            "-"
            if not ratio
            else (
                ratio["why"]
                if ratio["ratio"] is None
                else f"{ratio['ratio']:.2f} [{ratio['ci95'][0]:.2f}, {ratio['ci95'][1]:.2f}]"
            )
        )
        gain = "-" if a.get("gain") is None else _interval(a["gain"])
        out.append(
            f"| {a['arm']} | {len(a['seeds'])} | {a['acc_mean']:.3f} | {gain} | {diff} | {per_seed} | {val_diff} | "
            f"{step} | {rat} |"
        )
    out += [
        "",
        "| arm | seed | read at iteration | train s | acc ± 95% half-width (n) | validation acc | zero-var share | "
        + " | ".join(f"{s} s" for s in STAGES)
        + " |",
    ]
    out.append("|---" * (7 + len(STAGES)) + "|")
    for r in table["runs"]:
        zv = "-" if r["zero_var_share"] is None else f"{r['zero_var_share']:.3f}"
        val = "-" if r["val_acc"] is None else f"{r['val_acc']:.3f}"
        flag = "" if r["budget_reached"] else " (budget not reached)"
        stages = " | ".join(f"{r['stage_seconds'][s]:.2f}" for s in STAGES)
        out.append(
            f"| {r['arm']} | {r['seed']} | {r['readout_iteration']}{flag} | {r['readout_train_seconds']:.2f} | "
            f"{r['final_acc']:.3f} ± {r['half_width']:.3f} ({r['n_test']}) | {val} | {zv} | {stages} |"
        )
    return "\n".join(out) + "\n"


def _band(ax, curves: list[list[dict]], x: str, colour: str, label: str) -> None:
    """Mean over seeds with a min-max band, evaluation by evaluation (the seeds share the schedule)."""
    n = min(len(c) for c in curves)
    xs = np.array([[p[x] for p in c[:n]] for c in curves]).mean(axis=0)  # [n]
    ys = np.array([[p["acc"] for p in c[:n]] for c in curves])  # [seeds, n]
    ax.plot(xs, ys.mean(axis=0), color=colour, marker=".", label=label)
    ax.fill_between(xs, ys.min(axis=0), ys.max(axis=0), color=colour, alpha=0.2)


def plot(table: dict, path: Path) -> Path:
    """accuracy vs iteration and vs measured training seconds, one colour per arm, a band over seeds."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 4.5))
    FigureCanvasAgg(fig)
    by_iter, by_secs = fig.subplots(1, 2)
    for i, arm in enumerate(a["arm"] for a in table["arms"]):
        curves = [r["curve"] for r in table["runs"] if r["arm"] == arm]
        _band(by_iter, curves, "iteration", f"C{i}", arm)
        _band(by_secs, curves, "train_seconds", f"C{i}", arm)
    by_iter.set(xlabel="iteration", ylabel="held-out greedy accuracy", title="at equal iterations")
    by_secs.set(
        xlabel="measured training seconds", ylabel="held-out greedy accuracy", title="at equal training seconds"
    )
    by_iter.legend(fontsize=8)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=100, bbox_inches="tight")
    return path


def write_outputs(table: dict, out: Path) -> dict[str, Path]:
    """table.json, table.md and compare.png in `out` (atomically)."""
    import json

    files = {"json": out / "table.json", "md": out / "table.md", "png": out / "compare.png"}
    write_text(files["json"], json.dumps(table, indent=2, sort_keys=True) + "\n")
    write_text(files["md"], markdown(table))
    plot(table, files["png"])
    return files
