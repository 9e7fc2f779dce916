"""Where a finished run's zero-variance groups come from: by category (family/level), all passed or
all failed, and whether a problem's previous group predicts its next.

A group (one problem's completions) whose rewards are all equal gives GRPO no signal. The curriculum
chooses categories, so the lowest zero-variance share it can reach is that of the categories it
draws: this reads each category's own share from a run's rollouts and verdicts (a uniform GRPO run
gives every category's), and the share among problems drawn again given how their last group went,
which bounds what a choice of problems (not categories) could do.

    coevo compare bench/specs/smollm2_frontier.yaml --out bench/results/compare-smollm2-frontier --seed 0
    .venv/bin/python bench/zero_variance.py bench/results/compare-smollm2-frontier/runs/grpo-seed0 \
        bench/results/compare-smollm2-frontier/runs/curriculum-seed0
    # writes bench/results/zero-variance.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import finished_iterations  # noqa: E402
from coevo.io import write_json  # noqa: E402
from coevo.update.objectives.group_signal import group_signal  # noqa: E402
from schemas.problems import read_problems  # noqa: E402


def groups_of(run: Path) -> pd.DataFrame:
    """One row per group of the run: iteration, problem_id, category, pass rate, zero_var."""
    train = read_problems(run / "data" / "train.parquet").set_index("id")
    frames = []
    for it, rollouts, rewards in finished_iterations(run):
        signal = group_signal(rollouts, rewards)
        passed = rollouts[["rollout_id", "problem_id"]].merge(rewards[["rollout_id", "passed"]], on="rollout_id")
        rates = passed.groupby("problem_id")["passed"].mean()
        frames.append(
            signal.assign(
                iteration=it,
                pass_rate=signal["problem_id"].map(rates),
                category=signal["problem_id"].map(lambda p: f"{train.loc[p, 'family']}/{train.loc[p, 'level']}"),
            )
        )
    return pd.concat(frames, ignore_index=True)


def summary(run: Path) -> dict:
    groups = groups_of(run)
    zero = groups[groups["zero_var"]]
    by_category = {
        name: {
            "groups": len(g),
            "zero_var_share": round(float(g["zero_var"].mean()), 3),
            "all_passed": round(float((g["pass_rate"] == 1).mean()), 3),
            "all_failed": round(float((g["pass_rate"] == 0).mean()), 3),
        }
        for name, g in groups.groupby("category", sort=True)
    }
    groups = groups.sort_values(["problem_id", "iteration"])
    groups["previous_zero_var"] = groups.groupby("problem_id")["zero_var"].shift(1)
    again = groups[groups["previous_zero_var"].notna()]
    after_zero = again["previous_zero_var"].astype(bool)
    return {
        "run": str(run),
        "groups": len(groups),
        "zero_var_share": round(float(groups["zero_var"].mean()), 3),
        "zero_var_all_passed": int((zero["pass_rate"] == 1).sum()),
        "zero_var_all_failed": int((zero["pass_rate"] == 0).sum()),
        "by_category": by_category,
        "drawn_again": {
            "groups": len(again),
            "zero_var_share": round(float(again["zero_var"].mean()), 3),
            "after_a_zero_var_group": round(float(again[after_zero]["zero_var"].mean()), 3),
            "after_a_mixed_group": round(float(again[~after_zero]["zero_var"].mean()), 3),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="finished run directories (rollouts/, rewards/, data/)")
    parser.add_argument("--out", type=Path, default=Path("bench/results/zero-variance.json"))
    args = parser.parse_args()
    result = {"runs": [summary(run) for run in args.runs]}
    write_json(args.out, result)
    for run in result["runs"]:
        print(run["run"], {k: v for k, v in run.items() if k not in ("run", "by_category")})
        for name, row in run["by_category"].items():
            print(f"  {name}: {row}")


if __name__ == "__main__":
    main()
