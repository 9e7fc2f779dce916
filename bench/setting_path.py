"""The path of a setting through the code: which modules a run passes through on its way to each read.

Runs one tiny plain run (the test suite's tiny policy, 3 iterations, a list of co-evolvers that plays
every role: a curriculum with its proposer, a memory that reflects with the policy, a harness that
backtests every iteration) under `sys.setprofile`. At each
call of a project function whose code reads the setting's attribute (`coevolver`, `coevolver_list`,
`problems_per_iter`: the name among the code's attribute names), and for `coevolver` also at each
call a co-evolver's own code makes (the callbacks it is handed: a generator, a backtest sampler),
the chain of project modules on the call stack from the loop down to it is recorded, each module
named by its top two name parts (a subpackage as one: coevo.coevolvers, coevo.update; an inherited
method's trip through base.py is no trip), consecutive frames of one module collapsed. The chains
form a tree (shared prefixes merged); the figures:

  modules   the distinct project modules on any chain
  returns   tree nodes whose module already stands on the path above them (a call that leaves a module
            and comes back to it: stages -> coevolvers -> stages counts 1)
  chains    distinct chains

    .venv/bin/python bench/setting_path.py [--out bench/results/setting-path.json]

Run with PYTHONPATH pointing at another checkout to measure that code (the before/after of a layout change).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import yaml

SETTINGS = {"coevolver": ("coevolver", "coevolver_list"), "rollout.problems_per_iter": ("problems_per_iter",)}
PACKAGES = ("coevo", "flows", "tasks", "schemas")
COEVOLVERS = "coevo.coevolvers"
# the test suite's tiny policy (tests/conftest.py), copied: this script also runs on other checkouts
TINY = {
    "policy": {
        "shape": {"hidden_size": 32, "num_layers": 2, "num_heads": 2, "intermediate_size": 64, "max_position": 64},
        "threads": 1,
    },
    "problems": {"n_train": 120, "n_test": 30, "n_val": 10, "max_digits": 1},
    "bootstrap": {"steps": 30, "batch_size": 16, "lr": 1e-2},
    "rollout": {"problems_per_iter": 4, "group_size": 4},
    "optim": {"minibatch_size": 8, "lr": 1e-3},
    "sampling": {"max_new_tokens": 4},
    "eval": {"every": 1, "pass_k": 2},
    "run": {"iterations": 3, "checkpoint_every": 1},
    "coevolver": [
        {"kind": "curriculum", "curriculum": {"proposer": {"enabled": True}}},
        {"kind": "memory"},  # its policy reflector: the generator the co-evolve stage hands it
        {"kind": "harness", "harness": {"truncation_share": 0.01, "format_share": 0.01}},  # backtests every iteration
    ],
}


def trace(run) -> dict[str, set[tuple[str, ...]]]:
    """{setting: the collapsed module chains at its reads} while `run()` runs."""
    chains: dict[str, set[tuple[str, ...]]] = {name: set() for name in SETTINGS}
    reads = {attr: name for name, attrs in SETTINGS.items() for attr in attrs}

    def profile(frame, event, arg):
        if event != "call":
            return
        if frame.f_globals.get("__name__", "").split(".")[0] not in PACKAGES:
            return
        hits = {reads[n] for n in frame.f_code.co_names if n in reads}
        stack, f = [], frame
        while f is not None:
            module = ".".join(f.f_globals.get("__name__", "").split(".")[:2])  # coevo.stages, coevo.coevolvers
            if module.split(".")[0] in PACKAGES and (not stack or stack[-1] != module):
                stack.append(module)
            f = f.f_back
        if any(module.startswith(COEVOLVERS) for module in stack[1:]):  # called by a co-evolver's code
            hits.add("coevolver")
        for setting in hits:
            chains[setting].add(tuple(reversed(stack)))

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return chains


def figures(chains: set[tuple[str, ...]]) -> dict:
    tree = {chain[:depth] for chain in chains for depth in range(1, len(chain) + 1)}
    returns = sorted(" -> ".join(node) for node in tree if node[-1] in node[:-1])
    modules = sorted({m for chain in chains for m in chain})
    return {
        "modules": len(modules),
        "returns": len(returns),
        "chains": len(chains),
        "module_list": modules,
        "return_list": returns,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from coevo.config import load_config
    from coevo.driver import train

    with tempfile.TemporaryDirectory() as tmp:
        params = Path(tmp) / "params.yaml"
        where = {
            "run": {**TINY["run"], "out_dir": f"{tmp}/run"},
            "problems": {**TINY["problems"], "data_dir": f"{tmp}/data"},
        }
        params.write_text(yaml.safe_dump({**TINY, **where}))
        cfg = load_config(params)
        chains = trace(lambda: train(cfg))
    result = {setting: figures(found) for setting, found in chains.items()}
    for setting, found in result.items():
        print(f"{setting}: {found['modules']} modules, {found['returns']} returns, {found['chains']} chains")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
