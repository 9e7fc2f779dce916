"""Count the test problems that are training problems, for the default params, the SmolLM2 example
and the curriculum benchmark's mix (operands of 1-3 digits), seeds 0-2.

A test problem overlaps when a training problem has the same operands (exact) or the commuted ones
(twin: a+b vs b+a, a*b vs b*a); the key is computed here from the prompt text alone, so the script
measures any checkout's splits the same way (it calls only `coevo.prepare.build_splits`, which
every version has): run it with PYTHONPATH pointing at the checkout to measure.

    PYTHONPATH=. python bench/heldout_overlap.py [--root DIR]
"""

from __future__ import annotations

import argparse
import re
import tempfile
import warnings
from pathlib import Path

ARITH = re.compile(r"^(?:What is )?(\d+) ?([+\-*]) ?(\d+)(?:=|\?)$")
CASES = {
    "default params": ("params.yaml", {}),
    "examples/smollm2.yaml": ("examples/smollm2.yaml", {}),
    "curriculum mix (1-3 digits)": ("params.yaml", {"problems": {"min_digits": 1, "max_digits": 3}}),
}


def operands(prompt: str) -> tuple[str, int, int]:
    op, a, b = ARITH.match(prompt.strip()).group(2, 1, 3)
    return op, int(a), int(b)


def count(root: Path, params: str, overrides: dict, seed: int) -> dict:
    from coevo.config import deep_merge, load_config
    from coevo.prepare import build_splits

    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(root / params, deep_merge({"seed": seed, "problems": {"data_dir": tmp}}, overrides))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            train, test = build_splits(cfg)
    exact = {operands(p) for p in train["prompt"]}
    commuted = {(op, b, a) for op, a, b in exact if op in "+*"}
    keys = [operands(p) for p in test["prompt"]]
    n_exact = sum(key in exact for key in keys)
    n_twin = sum(key not in exact and key in commuted for key in keys)
    return {"test": len(test), "exact": n_exact, "twin": n_twin}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--root", type=Path, default=Path("."), help="checkout whose params.yaml and examples/ are read"
    )
    args = parser.parse_args()
    print("| case | seed | test problems | same operands as training | commuted twin of training | overlapping |")
    print("|---|---|---|---|---|---|")
    for name, (params, overrides) in CASES.items():
        for seed in (0, 1, 2):
            c = count(args.root, params, overrides, seed)
            print(f"| {name} | {seed} | {c['test']} | {c['exact']} | {c['twin']} | {c['exact'] + c['twin']} |")


if __name__ == "__main__":
    main()
