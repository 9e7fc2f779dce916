"""Objectives and co-evolvers side by side at equal wall-clock: GRPO, OPSD, PMD, ESS, OPSA and the
PMD ablations (frozen memory, frozen policy, no co-evolver), several seeds each.

    .venv/bin/python bench/methods.py --seeds 0 1 2 --budget-s 150 --workers 2 [--mlflow]
    # a policy that reads its context
    .venv/bin/python bench/methods.py --bootstrap-steps 400 --recall-prob 0.5 --tag reader
    .venv/bin/python bench/methods.py --params examples/smollm2.yaml \
        --set policy.checkpoint=models/smollm2-135m-instruct \
        --methods grpo skill_bank pmd pmd-frozen-memory --seeds 0 1 --workers 1 --tag smollm2   # a pretrained model

Every run starts from the same bootstrap checkpoint of its seed (bootstrapped once, copied into each
run directory), trains with the plain driver under `run.time_budget_s`, and evaluates greedy
held-out accuracy every `--eval-every` iterations. Runs go through a process pool of `--workers`
processes, one torch thread each, in an interleaved order (seed-major, methods rotating) so that
machine load falls on every method alike. Writes bench/results/methods[-<tag>]/{results.json,
table.md, curves.png, curve_<method>.png} and, with --mlflow, logs them to the experiment `coevo-bench`.
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

PMD = {"objective": {"name": "opsd", "teacher": {"sources": ["coevolver"]}}, "coevolver": {"kind": "memory"}}
METHODS: dict[str, dict] = {
    "grpo": {"objective": {"name": "grpo"}, "coevolver": {"kind": "none"}},
    "opsd-answer": {"objective": {"name": "opsd", "teacher": {"sources": ["answer"]}}, "coevolver": {"kind": "none"}},
    "skill_bank": {"objective": {"name": "grpo"}, "coevolver": {"kind": "skill_bank"}},
    "pmd": PMD,
    "ess": {"objective": {"name": "ess"}, "coevolver": {"kind": "none"}},
    "opsa": {"objective": {"name": "opsa"}, "coevolver": {"kind": "none"}},
    "pmd-frozen-memory": {
        **PMD,
        "coevolver": {"kind": "memory", "frozen": True},
    },  # frozen after --frozen-after iterations
    "pmd-frozen-policy": {**PMD, "policy": {"frozen": True}},
    "pmd-no-coevolver": {**PMD, "coevolver": {"kind": "none"}},
}


def overrides(method: str, seed: int, args: argparse.Namespace) -> dict:
    from coevo.config import deep_merge, parse_overrides

    out = RESULTS / args.name / f"seed{seed}"
    base = {
        "seed": seed,
        "run": {"out_dir": str(out / method), "iterations": 10**6, "time_budget_s": args.budget_s},
        "problems": {"data_dir": str(out / "data")},
        "policy": {"threads": 1},
        "bootstrap": {"steps": args.bootstrap_steps, "time_budget_s": 10**5}
        | ({} if args.recall_prob is None else {"recall_prob": args.recall_prob}),
        "eval": {"every": args.eval_every},
    }
    method_params = METHODS[method]
    if method == "pmd-frozen-memory":
        method_params = deep_merge(method_params, {"coevolver": {"frozen_after": args.frozen_after}})
    return deep_merge(deep_merge(base, parse_overrides(args.set)), method_params)


def bootstrap(seed: int, args: argparse.Namespace) -> str:
    """Prepare the seed's problems and bootstrap its checkpoint once; returns the bootstrap directory.

    The warm start runs `--bootstrap-steps` steps with no time cap, so every seed and every machine
    load gets the same checkpoint."""
    from coevo.config import deep_merge, load_config
    from coevo.loop import set_threads
    from coevo.stages.prepare import bootstrap_stage, prepare_stage

    cfg = load_config(
        args.params,
        deep_merge(
            overrides("grpo", seed, args), {"run": {"out_dir": str(RESULTS / args.name / f"seed{seed}" / "_bootstrap")}}
        ),
    )
    set_threads(cfg)
    bootstrap_stage(cfg, prepare_stage(cfg))
    return str(cfg.bootstrap_dir)


def run(method: str, seed: int, args: argparse.Namespace, boot_dir: str) -> dict:
    """One training run; returns its curve with cumulative wall seconds per evaluated iteration."""
    from rich.console import Console

    from coevo.config import load_config
    from coevo.driver import train
    from coevo.rollout.engines import LIVE

    cfg = load_config(args.params, overrides(method, seed, args))
    shutil.rmtree(cfg.run.out_dir, ignore_errors=True)
    shutil.copytree(boot_dir, cfg.bootstrap_dir)
    try:
        summary = train(cfg, Console(quiet=True))
    finally:  # every run starts its own engine inside its budget (not only a seed's first), and a failed
        # run leaves no engine process behind (one did, and the pool waited on it for 11 minutes)
        LIVE.close()
    rows = [json.loads(line) for line in (cfg.run.out_dir / "metrics.jsonl").read_text().splitlines()]
    elapsed, clock = 0.0, {}
    for row in rows:
        elapsed += sum(v for k, v in row.items() if k.startswith("time/"))
        clock[int(row["iteration"])] = elapsed
    curve = [{**point, "seconds": clock.get(int(point["iteration"]), 0.0)} for point in summary["curve"]]
    tail = rows[-10:]
    return {
        "method": method,
        "seed": seed,
        "iterations": summary["iterations"],
        "wall_time_s": summary["wall_time_s"],
        "final_acc": summary["final_eval"]["eval/acc"],
        "final_acc_memory": summary["final_eval"].get("eval/acc_context"),
        "initial_acc": summary["initial_eval"]["eval/acc"],
        "response_len": statistics.fmean(r["rollout/completion_len"] for r in tail),
        "admitted": summary["skills"]["n_admitted"],
        "curve": curve,
    }


def table(results: list[dict], methods: list[str]) -> list[dict]:
    rows = []
    for method in methods:
        runs = [r for r in results if r["method"] == method]
        accs = [r["final_acc"] for r in runs]
        memory = [r["final_acc_memory"] for r in runs if r["final_acc_memory"] is not None]
        rows.append(
            {
                "method": method,
                "seeds": len(runs),
                "acc_mean": statistics.fmean(accs),
                "acc_min": min(accs),
                "acc_max": max(accs),
                "acc_with_memory": statistics.fmean(memory) if memory else None,
                "initial_acc": statistics.fmean(r["initial_acc"] for r in runs),
                "response_len": statistics.fmean(r["response_len"] for r in runs),
                "iterations": statistics.fmean(r["iterations"] for r in runs),
                "wall_time_s": statistics.fmean(r["wall_time_s"] for r in runs),
                "admitted": statistics.fmean(r["admitted"] for r in runs),
            }
        )
    return rows


def markdown(rows: list[dict]) -> str:
    head = (
        "| method | seeds | held-out acc (mean [min, max]) | acc with memory | initial acc | response len | "
        "iterations | wall s | entries admitted |\n"
    )
    head += "|---|---|---|---|---|---|---|---|---|\n"

    def fmt(value: float | None, spec: str = ".3f") -> str:
        return "-" if value is None else format(value, spec)

    body = "".join(
        f"| {r['method']} | {r['seeds']} | {r['acc_mean']:.3f} [{r['acc_min']:.3f}, {r['acc_max']:.3f}] | "
        f"{fmt(r['acc_with_memory'])} "
        f"| {r['initial_acc']:.3f} | {r['response_len']:.2f} | {r['iterations']:.0f} | {r['wall_time_s']:.0f} | "
        f"{r['admitted']:.1f} |\n"
        for r in rows
    )
    return head + body


def plot(results: list[dict], methods: list[str], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    fig_all, ax_all = plt.subplots(figsize=(8, 5))
    for method in methods:
        fig, ax = plt.subplots(figsize=(6, 4))
        for r in (r for r in results if r["method"] == method):
            xs, ys = [p["seconds"] for p in r["curve"]], [p["eval/acc"] for p in r["curve"]]
            ax.plot(xs, ys, marker=".", label=f"seed {r['seed']}")
            ax_all.plot(
                xs,
                ys,
                color=f"C{methods.index(method)}",
                alpha=0.7,
                label=method if r["seed"] == results[0]["seed"] else None,
            )
        ax.set(title=method, xlabel="training seconds", ylabel="held-out greedy accuracy")
        ax.legend()
        path = out / f"curve_{method}.png"
        fig.savefig(path, dpi=100, bbox_inches="tight")
        plt.close(fig)
        paths.append(path)
    ax_all.set(title="held-out accuracy at equal wall-clock", xlabel="training seconds", ylabel="greedy accuracy")
    ax_all.legend(fontsize=8)
    fig_all.savefig(out / "curves.png", dpi=100, bbox_inches="tight")
    plt.close(fig_all)
    return [out / "curves.png", *paths]


def log_to_mlflow(rows: list[dict], files: list[Path], args: argparse.Namespace) -> None:
    import mlflow

    mlflow.set_tracking_uri(args.mlflow_uri)
    mlflow.set_experiment("coevo-bench")
    with mlflow.start_run(run_name=args.name):
        mlflow.log_params(
            {
                "seeds": " ".join(map(str, args.seeds)),
                "budget_s": args.budget_s,
                "workers": args.workers,
                "bootstrap_steps": args.bootstrap_steps,
                "recall_prob": args.recall_prob,
            }
        )
        for row in rows:
            mlflow.log_metric(f"{row['method']}/acc_mean", row["acc_mean"])
            mlflow.log_metric(f"{row['method']}/response_len", row["response_len"])
        for path in files:
            mlflow.log_artifact(str(path))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--params",
        type=Path,
        default=TINY_PARAMS,
        help="the params file every run starts from (e.g. examples/smollm2.yaml)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a params override of every run, as `coevo train --set` (repeatable)",
    )
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--budget-s", type=float, default=150.0, help="wall-clock budget of each run (seconds)")
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--frozen-after",
        type=int,
        default=10,
        help="pmd-frozen-memory: the memory stops evolving after this many iterations",
    )
    parser.add_argument(
        "--bootstrap-steps", type=int, default=150, help="warm-start steps (params.yaml's default is 150)"
    )
    parser.add_argument(
        "--recall-prob",
        type=float,
        help="bootstrap.recall_prob, the share of recall exercises in the warm start (default: params.yaml's)",
    )
    parser.add_argument("--tag", default="", help="results go to bench/results/methods-<tag>")
    parser.add_argument("--mlflow", action="store_true", help="log the table and plots to MLflow")
    parser.add_argument("--mlflow-uri", default=f"sqlite:///{ROOT / 'bench' / 'results' / 'mlflow.db'}")
    args = parser.parse_args()
    args.name = f"methods-{args.tag}" if args.tag else "methods"
    out = RESULTS / args.name
    out.mkdir(parents=True, exist_ok=True)
    with ProcessPoolExecutor(args.workers, mp_context=get_context("spawn")) as pool:
        boots = dict(zip(args.seeds, pool.map(bootstrap, args.seeds, [args] * len(args.seeds))))
        jobs = [
            (m, s)
            for i, s in enumerate(args.seeds)
            for m in args.methods[i % len(args.methods) :] + args.methods[: i % len(args.methods)]
        ]
        futures = [pool.submit(run, m, s, args, boots[s]) for m, s in jobs]
        results = [f.result() for f in futures]
    rows = table(results, args.methods)
    text = markdown(rows)
    (out / "results.json").write_text(
        json.dumps({"args": vars(args), "table": rows, "runs": results}, indent=2, default=str)
    )
    (out / "table.md").write_text(text)
    files = plot(results, args.methods, out)
    if args.mlflow:
        log_to_mlflow(rows, [out / "results.json", out / "table.md", *files], args)
    print(text)


if __name__ == "__main__":
    main()
