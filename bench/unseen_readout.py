"""A comparison's table again, on the held-out problems a shared starting checkpoint never trained on.

A comparison whose arms and seeds all start from one checkpoint a warm start made on one seed's
training split (bench/tiny_episodes.py made `models/tiny-tools` on seed 0's) holds out, in its other
seeds, problems that warm start fine-tuned on: the splits depend on the seed. Runs now refuse such a
start (coevo/model/bootstrap.py `check_unseen_by_start`); the comparisons committed before the check
are read here on the unseen part only: every curve point's verdicts restricted to the test problems
(and validation problems) whose content key is not in `--trained-seed`'s training split, then the
comparison's own table
(coevo/compare/table.py: t-intervals over the seeds, the gain over iteration 0).

    .venv/bin/python bench/unseen_readout.py bench/specs/tiny_episodes.yaml \\
        bench/results/compare-tiny-episodes --trained-seed 0
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from coevo.compare.runs import MARKER
from coevo.compare.spec import arm_config, load_spec
from coevo.compare.table import build_table, markdown
from coevo.prepare import prepare_problems
from coevo.problems.heldout import digests_of, seen_in
from schemas.problems import read_problems


def unseen_ids(spec, seed: int, trained: list[str], work: Path) -> set[str]:
    """Test and validation ids of `seed`'s splits (the reference arm's config) whose problem is not
    among `trained`."""
    cfg = arm_config(spec, spec.arm(spec.reference), seed, work / f"seed{seed}")
    _, test = prepare_problems(cfg)
    held = [test, read_problems(cfg.problems.data_dir / "val.parquet")]
    return {pid for frame in held for pid in set(frame["id"]) - set(seen_in(trained, frame)["id"])}


def restricted(marker: dict, keep: set[str]) -> dict:
    """`marker` with every curve point's test and validation verdicts (and accuracies) on the `keep`
    problems only."""
    curve = []
    for point in marker["record"]["curve"]:
        point = dict(point)
        for verdicts_key, acc_key in (("verdicts", "acc"), ("val_verdicts", "val_acc")):
            if verdicts_key in point:
                kept = {pid: v for pid, v in point[verdicts_key].items() if pid in keep}
                point |= {verdicts_key: kept, acc_key: sum(kept.values()) / len(kept)}
        curve.append(point)
    return marker | {"record": marker["record"] | {"curve": curve}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", type=Path)
    parser.add_argument("results", type=Path)
    parser.add_argument("--trained-seed", type=int, required=True, help="the seed whose training split it saw")
    args = parser.parse_args()
    spec = load_spec(args.spec)
    markers = [json.loads(path.read_text()) for path in sorted(args.results.glob(f"runs/*/{MARKER}"))]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        trained_cfg = arm_config(spec, spec.arm(spec.reference), args.trained_seed, work / "trained")
        trained = digests_of(prepare_problems(trained_cfg)[0])
        keep = {seed: unseen_ids(spec, seed, trained, work) for seed in {m["seed"] for m in markers}}
    for seed, ids in sorted(keep.items()):
        print(f"seed {seed}: {len(ids)} unseen test and validation problems")
    print(markdown(build_table(spec, [restricted(m, keep[m["seed"]]) for m in markers])))


if __name__ == "__main__":
    main()
