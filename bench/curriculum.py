"""The curriculum co-evolver (SEC bandit, coevo/coevolvers/curriculum.py) against GRPO alone and the
skill bank alone, at equal wall-clock on a harder mix (operands of 1-3 digits: 9 family x level arms).

    .venv/bin/python bench/curriculum.py --seeds 0 1 2 --budget-s 300 --eval-every 10
    .venv/bin/python bench/curriculum.py --seeds 0 --budget-s 20 --probe-iters 2 --eval-every 2 --tag smoke

Equal wall-clock, reproducibly: each arm first runs `--probe-iters` iterations from the seed's
bootstrap to measure its training seconds per iteration (rollout + verify + co-evolve + update; no
eval), then trains a fresh run for a fixed number of iterations, floor(budget / seconds per
iteration), so the arms' training times match the budget while the runs themselves are a pure
function of (seed, iteration count): pass `--iterations ARM=N ...` to replay them exactly without
probing. Both the measured seconds and the iterations run are reported.

Every run of a seed starts from the same bootstrap checkpoint (bootstrapped once, copied into each
run directory). Records per arm: the held-out greedy accuracy curve (every `--eval-every`
iterations), coevo/zero_var_share per iteration (the share of groups with no learning signal, the
number a curriculum should push down) and, for the curriculum, each category's bandit value and draw
probability over iterations. Writes bench/results/curriculum[-<tag>].json and .md.

Arms: GRPO alone, the curriculum, the curriculum and the skill bank in one run (a `coevolver:` list), the
skill bank alone, the frozen-curriculum ablation (its bandit stops updating after FROZEN_AFTER
iterations and keeps drawing from the values it had then), all at temperature 0.2, and the same
curriculum arms at 0.03, the default since (`curriculum_sharp*`, not in the default arms), the last
of them with the problem proposer on (`curriculum.proposer.enabled`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY_PARAMS = ROOT / "examples" / "tiny.yaml"  # the tiny character-level policy's params (params.yaml trains SmolLM2)
RESULTS = ROOT / "bench" / "results"
TRAIN_PHASES = ("time/rollout", "time/verify", "time/coevolve", "time/update")
FROZEN_AFTER = 5  # the frozen-curriculum ablation's bandit learns for this many iterations, then stops

# The curriculum arms name their temperature: the first runs used 0.2 (then the default); mean
# |advantage| values lie in [0, 0.5] (here <= 0.17), so at 0.2 the hopeless arms kept about half the
# draws, and the "sharp" arms' 0.03 is now the default.
FLAT, SHARP = {"temperature": 0.2}, {"temperature": 0.03}
ARMS: dict[str, dict] = {
    "grpo": {"coevolver": {"kind": "none"}},
    "curriculum": {"coevolver": {"kind": "curriculum", "curriculum": FLAT}},
    "curriculum+skill_bank": {"coevolver": [{"kind": "curriculum", "curriculum": FLAT}, {"kind": "skill_bank"}]},
    "skill_bank": {"coevolver": {"kind": "skill_bank"}},
    "curriculum_frozen": {
        "coevolver": {"kind": "curriculum", "frozen": True, "frozen_after": FROZEN_AFTER, "curriculum": FLAT}
    },
    "curriculum_sharp": {"coevolver": {"kind": "curriculum", "curriculum": SHARP}},
    "curriculum_sharp_frozen": {
        "coevolver": {"kind": "curriculum", "frozen": True, "frozen_after": FROZEN_AFTER, "curriculum": SHARP}
    },
    "curriculum_sharp_proposer": {
        "coevolver": {"kind": "curriculum", "curriculum": {**SHARP, "proposer": {"enabled": True}}}
    },
}


def overrides(arm: str, seed: int, args: argparse.Namespace, iterations: int, out_dir: Path) -> dict:
    from coevo.config import deep_merge

    base = {
        "seed": seed,
        "run": {"out_dir": str(out_dir), "iterations": iterations, "checkpoint_every": 10**6},
        "problems": {
            "data_dir": str(RESULTS / args.name / f"seed{seed}" / "data"),
            "min_digits": 1,
            "max_digits": args.max_digits,
        },
        "policy": {"threads": 1},
        "bootstrap": {"steps": args.bootstrap_steps, "time_budget_s": 10**5},
        "eval": {"every": args.eval_every, "with_context": False},
        "tracking": {"mlflow_uri": f"sqlite:///{out_dir / 'mlflow.db'}"},
    }
    return deep_merge(base, ARMS[arm])


def bootstrap(seed: int, args: argparse.Namespace) -> str:
    """Prepare the seed's problems and bootstrap its checkpoint once (fixed steps, no time cap)."""
    from coevo.config import load_config
    from coevo.loop import set_threads
    from coevo.stages.prepare import bootstrap_stage, prepare_stage

    cfg = load_config(TINY_PARAMS, overrides("grpo", seed, args, 1, RESULTS / args.name / f"seed{seed}" / "_bootstrap"))
    set_threads(cfg)
    bootstrap_stage(cfg, prepare_stage(cfg))
    return str(cfg.bootstrap_dir)


def train_run(
    arm: str, seed: int, args: argparse.Namespace, boot_dir: str, iterations: int, label: str
) -> tuple[dict, Path, list[dict]]:
    """A fresh plain-driver run of `iterations` iterations from the bootstrap: (summary, run dir, metrics rows)."""
    from rich.console import Console

    from coevo.config import load_config
    from coevo.driver import train

    out_dir = RESULTS / args.name / f"seed{seed}" / f"{arm}-{label}"
    cfg = load_config(TINY_PARAMS, overrides(arm, seed, args, iterations, out_dir))
    shutil.rmtree(out_dir, ignore_errors=True)
    shutil.copytree(boot_dir, cfg.bootstrap_dir)
    summary = train(cfg, Console(quiet=True))
    rows = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
    return summary, out_dir, rows


def seconds_per_iteration(rows: list[dict]) -> float:
    return statistics.fmean(sum(row.get(phase, 0.0) for phase in TRAIN_PHASES) for row in rows)


def probe(arm: str, seed: int, args: argparse.Namespace, boot_dir: str) -> float:
    """Measured training seconds per iteration of `arm` (mean over --probe-iters iterations)."""
    _, out_dir, rows = train_run(arm, seed, args, boot_dir, args.probe_iters, "probe")
    shutil.rmtree(out_dir, ignore_errors=True)
    return seconds_per_iteration(rows)


def run(arm: str, seed: int, args: argparse.Namespace, boot_dir: str, iterations: int) -> dict:
    """The measured run: accuracy curve, zero-variance share and (curriculum) arm values over iterations."""
    _, out_dir, _ = train_run(arm, seed, args, boot_dir, iterations, "run")
    return collect(arm, seed, out_dir)


def collect(arm: str, seed: int, out_dir: Path, upto: int | None = None) -> dict:
    """A finished run's record from its directory (metrics.jsonl, evals/, reports/), cut at iteration
    `upto` if given: no schedule depends on run.iterations, so iteration N of a longer run is an
    N-iteration run (used to compare arms whose iterations cost differently at equal seconds)."""
    from coevo.coevolvers.composite import member_reports

    rows = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()][:upto]
    iterations = len(rows)
    curve = [json.loads(path.read_text()) for path in sorted((out_dir / "evals").glob("iter_*.json"))]
    curve = [
        {"iteration": e["iteration"], "acc": e["metrics"]["eval/acc"]} for e in curve if e["iteration"] <= iterations
    ]
    values = []
    for it in range(1, iterations + 1):
        report = json.loads((out_dir / "reports" / f"iter_{it:04d}.json").read_text())
        arms = [a for member in member_reports(report) for a in member.get("arms", [])]
        values += [{"iteration": it, **{k: a[k] for k in ("category", "value", "count", "prob")}} for a in arms]
    return {
        "arm": arm,
        "seed": seed,
        "iterations": iterations,
        "train_s": sum(sum(row.get(phase, 0.0) for phase in TRAIN_PHASES) for row in rows),
        "initial_acc": curve[0]["acc"],
        "final_acc": curve[-1]["acc"],
        "curve": curve,
        "zero_var_share": [row["coevo/zero_var_share"] for row in rows],
        "proposals_total": [
            row.get("coevo/proposals_total", 0.0) for row in rows
        ],  # the proposer's accepted problems so far
        "category_values": values,
    }


def markdown(results: list[dict], plan: dict) -> str:
    head = (
        "| arm | seed | s/iter (probe) | iterations | train s | initial acc | final acc | zero-var share (mean) "
        "|\n|---|---|---|---|---|---|---|---|\n"
    )
    body = "".join(
        f"| {r['arm']} | {r['seed']} | {plan[(r['arm'], r['seed'])]['s_per_iter']:.2f} | {r['iterations']} | "
        f"{r['train_s']:.1f} "
        f"| {r['initial_acc']:.3f} | {r['final_acc']:.3f} | {statistics.fmean(r['zero_var_share']):.3f} |\n"
        for r in results
    )
    return head + body


def parse_iterations(pairs: list[str]) -> dict[str, int]:
    fixed = {}
    for pair in pairs:
        arm, _, count = pair.partition("=")
        if arm not in ARMS or not count.isdigit() or int(count) < 1:
            raise SystemExit(f"--iterations {pair!r}: expected ARM=N with ARM in {sorted(ARMS)} and N >= 1")
        fixed[arm] = int(count)
    return fixed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--arms", nargs="+", default=[arm for arm in ARMS if not arm.startswith("curriculum_sharp")], choices=list(ARMS)
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        default=300.0,
        help="training seconds each arm gets (rollout + verify + co-evolve + update)",
    )
    parser.add_argument(
        "--probe-iters", type=int, default=5, help="iterations that measure an arm's seconds per iteration"
    )
    parser.add_argument(
        "--iterations",
        nargs="*",
        default=[],
        metavar="ARM=N",
        help=(
            "fixed iteration counts (replay; skips the probe for these arms); with --collect: read ARM's runs up to "
            "iteration N"
        ),
    )
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument(
        "--max-digits", type=int, default=3, help="problems.max_digits of the harder mix (min_digits is 1)"
    )
    parser.add_argument("--bootstrap-steps", type=int, default=150)
    parser.add_argument(
        "--workers", type=int, default=1, help="processes; >1 shares the CPUs between arms (their probes too)"
    )
    parser.add_argument("--tag", default="")
    parser.add_argument(
        "--collect",
        nargs="+",
        default=[],
        metavar="NAME",
        help="only tabulate the finished runs under bench/results/NAME/seed*/ARM-run (e.g. of a stopped benchmark)",
    )
    args = parser.parse_args()
    if args.collect:
        return write_collected(args)
    args.name = f"curriculum-{args.tag}" if args.tag else "curriculum"
    fixed = parse_iterations(args.iterations)
    with ProcessPoolExecutor(args.workers, mp_context=get_context("spawn")) as pool:
        boots = dict(zip(args.seeds, pool.map(bootstrap, args.seeds, [args] * len(args.seeds))))
        jobs = [(arm, seed) for seed in args.seeds for arm in args.arms]
        probes = {job: pool.submit(probe, *job, args, boots[job[1]]) for job in jobs if job[0] not in fixed}
        plan = {}
        for arm, seed in jobs:
            s_per_iter = probes[(arm, seed)].result() if (arm, seed) in probes else float("nan")
            plan[(arm, seed)] = {
                "s_per_iter": s_per_iter,
                "iterations": fixed.get(arm) or max(1, int(args.budget_s // s_per_iter)),
            }
        futures = [
            pool.submit(run, arm, seed, args, boots[seed], plan[(arm, seed)]["iterations"]) for arm, seed in jobs
        ]
        results = [f.result() for f in futures]
    text = markdown(results, plan)
    report = {"args": vars(args), "plan": [{"arm": a, "seed": s, **p} for (a, s), p in plan.items()], "runs": results}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(report, indent=2))
    (RESULTS / f"{args.name}.md").write_text(
        f"budget {args.budget_s:.0f} training seconds per arm, operands 1-{args.max_digits} digits\n\n" + text
    )
    print(text)


def write_collected(args: argparse.Namespace) -> None:
    """bench/results/curriculum-collected[-<tag>].json and .md from finished run directories."""
    results, upto = [], parse_iterations(args.iterations)
    for name in args.collect:
        for seed_dir in sorted((RESULTS / name).glob("seed*")):
            for arm in args.arms:
                out_dir = seed_dir / f"{arm}-run"
                if (out_dir / "evals").is_dir() and (out_dir / "metrics.jsonl").is_file():
                    results.append({**collect(arm, int(seed_dir.name[4:]), out_dir, upto.get(arm)), "from": name})
    plan = {(r["arm"], r["seed"]): {"s_per_iter": float("nan")} for r in results}
    text = markdown(results, plan)
    label = f"curriculum-collected-{args.tag}" if args.tag else "curriculum-collected"
    (RESULTS / f"{label}.json").write_text(json.dumps({"collected": args.collect, "runs": results}, indent=2))
    (RESULTS / f"{label}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
