"""Where the curriculum's proposer would write problems on SmolLM2's frontier, replayed on a finished
run's own rollouts.

The proposer (coevo/problems/proposer.py) is a rule over the latest per-category pass rates: a cell
(family, level) whose pass rate is within `band` of 1/2 gets more problems, a solved one its next
level. This replays that rule, unchanged, on every iteration of a finished run of the frontier
comparison (bench/specs/smollm2_frontier.yaml): the pass rates are the iteration's own (its batch,
its rollouts at temperature 1, its verdicts), the candidates are validated and de-duplicated against
the run's training split, its test and validation splits together (what `coevo.store.tables.held_out`
passes) and the proposals accepted so far, as in a run with `curriculum.proposer.enabled`. It shows
which cells the rule would open and whether what it writes stays off the held-out splits; it does
not train on the proposals (that is a run with the proposer on).

    coevo compare bench/specs/smollm2_frontier.yaml --out bench/results/compare-smollm2-frontier --seed 0
    .venv/bin/python bench/proposer_frontier.py bench/results/compare-smollm2-frontier/runs/grpo-seed0 \
        bench/results/compare-smollm2-frontier/runs/curriculum-seed0
    # writes bench/results/proposer-frontier.json
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import finished_iterations  # noqa: E402
from coevo.coevolvers.curriculum import pass_rates  # noqa: E402
from coevo.config import ProposerConfig  # noqa: E402
from coevo.io import write_json  # noqa: E402
from coevo.problems.proposer import problems_frame, propose, validate_candidates  # noqa: E402
from schemas.problems import read_problems  # noqa: E402


def replay(run: Path, settings: ProposerConfig, seed: int) -> dict:
    """The proposer's report at every iteration of the run in `run`, its accepted problems carried over."""
    data = run / "data"
    train = read_problems(data / "train.parquet")
    held_out = pd.concat([read_problems(data / "test.parquet"), read_problems(data / "val.parquet")], ignore_index=True)
    by_id = train.set_index("id")
    proposals, iterations = problems_frame([]), []
    for it, rollouts, rewards in finished_iterations(run):
        batch = by_id.loc[rollouts["problem_id"].unique()].reset_index()
        stats = pass_rates(batch, rollouts, rewards)
        seen = train if proposals.empty else pd.concat([train, proposals], ignore_index=True)
        proposal = propose(stats, seen, held_out, settings, seed, it, proposals)
        proposals = (
            proposal.accepted if proposals.empty else pd.concat([proposals, proposal.accepted], ignore_index=True)
        )
        iterations.append(
            {
                "iteration": it,
                "pass_rates": {f"{r.family}/{r.level}": round(r.pass_rate, 3) for r in stats.itertuples()},
                **{k: proposal.report[k] for k in ("targets", "accepted", "rejected", "short")},
            }
        )
    # every accepted problem checked once more against the held-out splits, on its own
    _, clashes = validate_candidates(proposals, train.iloc[:0], held_out)
    cells = Counter(f"{f}/{lv}" for f, lv in zip(proposals["family"], proposals["level"]))
    rejected = Counter()
    for row in iterations:
        rejected.update(row["rejected"])
    return {
        "run": str(run),
        "iterations": iterations,
        "accepted_total": len(proposals),
        "accepted_by_cell": dict(sorted(cells.items())),
        "rejected_total": dict(sorted(rejected.items())),
        "held_out_clashes": {str(k): int(v) for k, v in clashes["reason"].value_counts().items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="finished run directories (rollouts/, rewards/, data/)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("bench/results/proposer-frontier.json"))
    args = parser.parse_args()
    settings = ProposerConfig(enabled=True)  # the defaults a user gets by turning the proposer on
    result = {"settings": settings.model_dump(), "runs": [replay(run, settings, args.seed) for run in args.runs]}
    write_json(args.out, result)
    for run in result["runs"]:
        print(run["run"], "accepted", run["accepted_total"], run["accepted_by_cell"])
        print("  rejected", run["rejected_total"], "held-out clashes", run["held_out_clashes"])
        targets = Counter(f"{t['family']}/{t['level']} {t['why']}" for row in run["iterations"] for t in row["targets"])
        print("  iterations targeting each cell", dict(sorted(targets.items())))


if __name__ == "__main__":
    main()
