"""Scaling: coevo's step time (plain driver) as group size, batch size and completion length double.

Three sweeps around params.yaml's default (32 problems x 16 completions, 8 new tokens), each at
least three points: rollout.group_size, rollout.problems_per_iter and sampling.max_new_tokens. Each
point is one run of `--iterations` iterations from the cached bootstrap, measured over iterations
2 .. n-1 and split into the phases of bench/trl_step.py. The table also shows seconds per rollout
(step / rollouts per iteration) and the mean completion length actually sampled: the tiny model
stops at EOS after a few characters, so a larger max_new_tokens only costs what is really sampled.

    .venv/bin/python bench/scaling.py [--iterations 5] [--repetitions 1]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    PHASES,
    RESULTS,
    add_output_args,
    alternate,
    coevo_step,
    publish,
    spread,
    table,
)

DEFAULT = {"group_size": 16, "problems_per_iter": 32, "max_new_tokens": 8}
SWEEPS = {"group_size": (8, 16, 32, 64), "problems_per_iter": (16, 32, 64, 128), "max_new_tokens": (8, 16, 32, 64)}


def overrides(point: dict) -> dict:
    return {
        "rollout": {"group_size": point["group_size"], "problems_per_iter": point["problems_per_iter"]},
        "sampling": {"max_new_tokens": point["max_new_tokens"]},
    }


def name(point: dict) -> str:
    return f"P{point['problems_per_iter']} G{point['group_size']} L{point['max_new_tokens']}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--repetitions", type=int, default=1)
    parser.add_argument(
        "--points", type=int, default=3, help="Points per sweep (doublings from the default, at most 4)."
    )
    add_output_args(parser, "scaling")
    args = parser.parse_args()
    from coevo.cli_support import quiet_libraries

    quiet_libraries()
    points: dict[str, dict] = {}
    for knob, values in SWEEPS.items():
        for value in values[: args.points]:
            point = {**DEFAULT, knob: value}
            points.setdefault(name(point), point)
    runs = alternate(
        list(points),
        args.repetitions,
        lambda key, rep: coevo_step("driver", RESULTS / "tmp" / "scaling", args.iterations, overrides(points[key])),
    )
    summary = {
        key: {phase: spread([r[phase] for r in runs[key]])["median"] for phase in ("step", *PHASES, "completion_len")}
        for key in points
    }
    rows, sweeps = [], {}
    for knob, values in SWEEPS.items():
        keys = [name({**DEFAULT, knob: v}) for v in values[: args.points]]
        base = summary[keys[0]]["step"] / rollouts(points[keys[0]])
        sweeps[knob] = keys
        for key in keys:
            s, n = summary[key], rollouts(points[key])
            rows.append(
                [
                    knob,
                    key,
                    f"{n}",
                    f"{s['completion_len']:.1f}",
                    f"{s['step']:.3f}",
                    f"{s['generation']:.3f}",
                    f"{s['logprob/loss'] + s['optimizer']:.3f}",
                    f"{s['other']:.3f}",
                    f"{s['step'] / n * 1000:.2f}",
                    f"{s['step'] / n / base:.2f}",
                ]
            )
    columns = [
        "sweep",
        "point",
        "rollouts",
        "completion len",
        "step s",
        "generation s",
        "update s",
        "other s",
        "ms/rollout",
        "ms/rollout vs first",
    ]
    title = (
        f"coevo driver step time, iterations 2..{args.iterations - 1} of {args.iterations}, median of "
        f"{args.repetitions}"
    )
    report = {
        "iterations": args.iterations,
        "repetitions": args.repetitions,
        "points": points,
        "runs": runs,
        "summary": summary,
        "sweeps": sweeps,
    }
    publish(
        "scaling",
        args.out,
        report,
        table(title, columns, rows),
        lambda png: plot(png, points, summary, sweeps),
        args.mlflow,
    )


def rollouts(point: dict) -> int:
    return point["group_size"] * point["problems_per_iter"]


def plot(png: Path, points: dict, summary: dict, sweeps: dict) -> None:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(sweeps), figsize=(9, 3), sharey=True)
    for ax, (knob, keys) in zip(axes, sweeps.items()):
        xs = [points[k][knob] for k in keys]
        for color, phase in enumerate(("step", "generation", "logprob/loss", "other")):
            ax.plot(xs, [summary[k][phase] for k in keys], marker="o", color=f"C{color}", label=phase)
        ax.plot(
            xs,
            [summary[keys[0]]["step"] * x / xs[0] for x in xs],
            linestyle="--",
            color="grey",
            label="linear from first",
        )
        ax.set_xscale("log", base=2)
        ax.set_xlabel(knob)
    axes[0].set_ylabel("s per step")
    axes[0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(png, dpi=120)


if __name__ == "__main__":
    main()
