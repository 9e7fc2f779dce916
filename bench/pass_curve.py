"""pass@k curves, k = 1..16, of a base and a trained checkpoint on the same held-out problems, and
their paired difference (does training raise pass@1 only, or the whole curve?).

Each checkpoint is evaluated as `coevo eval CHECKPOINT --pass-curve N` evaluates it (coevo.api.evaluate:
N >= 16 samples per problem under the params' `sampling`, the same sampling seed for both), so both
curves are on the same problems. Per k: the unbiased estimator 1 - C(N - c, k) / C(N, k) averaged
over problems, a 95% interval over problems resampled, and trained - base paired problem by problem
(coevo/evaluation.py). The intervals cover problem sampling only: one run, one sampling seed; seed-to-
seed variation of training is not in them.

    .venv/bin/python bench/pass_curve.py runs/smollm2/bootstrap runs/smollm2/checkpoints/iter_0010 \\
        --params examples/smollm2.yaml --samples 16 --out bench/results/pass-curve-smollm2.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from coevo.api import evaluate
from coevo.config import parse_overrides
from coevo.evaluation import curve_difference, curve_markdown
from coevo.io import write_json, write_text


def compare(base: str, trained: str, params: str, overrides: dict, samples: int, problems: str | None) -> dict:
    """Both checkpoints' curves on the same problems and their paired difference."""
    curves = {
        name: evaluate(path, params, overrides, problems=problems, pass_curve=samples)
        for name, path in (("base", base), ("trained", trained))
    }
    return {
        "base": {"checkpoint": curves["base"]["checkpoint"], **curves["base"]["pass_curve"]},
        "trained": {"checkpoint": curves["trained"]["checkpoint"], **curves["trained"]["pass_curve"]},
        "difference": curve_difference(curves["trained"]["pass_curve"], curves["base"]["pass_curve"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", help="the base checkpoint (a directory, models:/NAME@ALIAS)")
    parser.add_argument("trained", help="the trained checkpoint")
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--set", dest="set_", action="append", default=[], help="params overrides, as `--set`")
    parser.add_argument("--samples", type=int, default=16, help="samples per problem (>= 16)")
    parser.add_argument("--problems", default=None, help="a problems file (default: the params' test split)")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON here and the table beside it (.md)")
    args = parser.parse_args()
    result = compare(args.base, args.trained, args.params, parse_overrides(args.set_), args.samples, args.problems)
    table = curve_markdown({"base": result["base"], "trained": result["trained"]}, result["difference"])
    print(table)
    if args.out:
        write_json(args.out, result)
        write_text(args.out.with_suffix(".md"), table)
        print(json.dumps({"json": str(args.out), "md": str(args.out.with_suffix(".md"))}))


if __name__ == "__main__":
    main()
