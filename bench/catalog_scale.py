"""Catalog scale: DuckDB ingest rate and the three documented queries over synthetic catalogs.

Synthetic shards have the real rollouts/rewards tables (schemas/rollouts.py, schemas/rewards.py: the
fixed arrow schemas the stages write with) and a realistic shape: `--shard-rows` rollouts per
iteration over 3 families, groups of 16 per problem, 30% of rows with one skill in context, ~6
prompt and ~3 completion tokens, and a skill-bank report per iteration (created / measured /
admitted / retired events). Shards are generated in chunks, so 10M rows never sit in memory at once.

Ingest goes through `Catalog.ingest_iteration`, one shard per call, with the validation the flow's
ingest task uses (the flow batches pipeline.ingest_every iterations per `Catalog.ingest` call): each
shard's sha256 is passed as validated on write, so pandera does not run again. The first shard of each
catalog is also validated in full (read_rollouts / read_rewards), and its rate is reported, because
that is what a shard the catalog cannot trust costs. Then each documented query runs `--repeats`
times on the closed catalog, opened read-only as `coevo query` opens it (median seconds):

  pass-rate   Catalog.pass_rate_by_family()            (coevo query pass-rate)
  skill       Catalog.skill_history(<a skill id>)      (coevo query skill ID)
  problem     Catalog.problem_completions(<a problem>) (coevo query problem ID)

    .venv/bin/python bench/catalog_scale.py [--rows 1000000,10000000] [--shard-rows 100000]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bench.common import RESULTS, add_output_args, console, publish, table
from coevo.io import hash_file
from coevo.store.catalog import Catalog
from schemas.rewards import REWARDS_ARROW, read_rewards
from schemas.rollouts import ROLLOUTS_ARROW, read_rollouts

FAMILIES = ("add", "sub", "mul")
GROUP = 16
N_PROBLEMS = 6000
N_SKILLS = 400


def shard_tables(iteration: int, rows: int, rng: np.random.Generator) -> tuple[pa.Table, pa.Table]:
    """One iteration's rollouts and rewards as arrow tables with the stages' exact schemas."""
    groups = rows // GROUP
    problem_index = rng.integers(0, N_PROBLEMS, groups).repeat(GROUP)  # [rows]
    family = np.array(FAMILIES)[problem_index % len(FAMILIES)]
    problem_id = np.char.add(np.char.add(family, "-1-"), np.char.zfill(problem_index.astype(str), 6))
    rollout_id = np.char.add(
        np.char.add(f"{iteration:06d}-", problem_id), np.char.add("-", np.char.zfill(np.arange(rows).astype(str), 7))
    )
    with_skill = rng.random(rows) < 0.3
    skill = np.char.zfill(rng.integers(0, N_SKILLS, rows).astype(str), 12)
    variant = np.where(with_skill, "probe", np.where(rng.random(rows) < 0.3, "base", "solo"))
    completion_len = rng.integers(1, 5, rows)
    prompt_len = rng.integers(5, 8, rows)
    passed = rng.random(rows) < 0.4
    rollouts = pa.table(
        {
            "rollout_id": rollout_id,
            "iteration": np.full(rows, iteration, dtype=np.int64),
            "problem_id": problem_id,
            "family": family,
            "variant": variant,
            "probe_skill": np.where(variant != "solo", skill, ""),
            "skills": pa.ListArray.from_arrays(
                np.r_[0, np.cumsum(with_skill)].astype(np.int32), pa.array(skill[with_skill])
            ),
            "question": np.full(rows, "3*4="),
            "prompt": np.full(rows, "3*4="),
            "completion": np.where(passed, "12", "13"),
            "prompt_ids": _lists(prompt_len, rng.integers(3, 100, prompt_len.sum()), pa.int64()),
            "completion_ids": _lists(completion_len, rng.integers(3, 100, completion_len.sum()), pa.int64()),
            "sampling_logprobs": _lists(completion_len, -rng.random(completion_len.sum()), pa.float64()),
            "finished": np.ones(rows, dtype=bool),
            "policy_version": np.full(rows, f"{iteration:064d}"),
        },
        schema=ROLLOUTS_ARROW,
    )
    rewards = pa.table(
        {
            "rollout_id": rollout_id,
            "iteration": np.full(rows, iteration, dtype=np.int64),
            "problem_id": problem_id,
            "reward": passed.astype(np.float64),
            "passed": passed,
            "verifier": np.full(rows, "math_exact"),
            "details": np.full(rows, ""),
        },
        schema=REWARDS_ARROW,
    )
    return rollouts, rewards


def _lists(lengths: np.ndarray, values: np.ndarray, kind: pa.DataType) -> pa.ListArray:
    return pa.ListArray.from_arrays(np.r_[0, np.cumsum(lengths)].astype(np.int32), pa.array(values, type=kind))


def report(iteration: int, rng: np.random.Generator) -> dict:
    """A skill-bank evolution report: 4 candidates created, 8 measured, 1 admitted, 1 retired (distinct skills)."""
    skills = [f"{k:012d}" for k in rng.choice(N_SKILLS, size=14, replace=False)]
    return {
        "iteration": iteration,
        "new_candidates": skills[:4],
        "measured": [
            {"id": sid, "problem_id": f"add-1-{int(rng.integers(0, N_PROBLEMS)):06d}", "gap": float(rng.normal())}
            for sid in skills[4:12]
        ],
        "admitted": [{"id": skills[12], "utility": 0.2}],
        "rejected": [],
        "promoted": [],
        "retired": [{"id": skills[13], "utility": -0.1, "reason": "low utility"}],
    }


def build(directory: Path, rows: int, shard_rows: int) -> dict:
    """Write the shards, ingest them one iteration at a time; ingest seconds and rates."""
    if directory.exists():
        shutil.rmtree(directory)
    for sub in ("rollouts", "rewards", "reports"):
        (directory / sub).mkdir(parents=True)
    rng = np.random.default_rng(0)
    write_s = ingest_s = 0.0
    validate = {}
    with Catalog(directory / "catalog.duckdb") as catalog:
        for iteration in range(1, rows // shard_rows + 1):
            start = time.perf_counter()
            rollouts, rewards = shard_tables(iteration, shard_rows, rng)
            paths = [directory / kind / f"iter_{iteration:06d}.parquet" for kind in ("rollouts", "rewards")]
            pq.write_table(rollouts, paths[0])
            pq.write_table(rewards, paths[1])
            report_path = directory / "reports" / f"iter_{iteration:06d}.json"
            report_path.write_text(json.dumps(report(iteration, rng)))
            write_s += time.perf_counter() - start
            if iteration == 1:  # what an untrusted shard costs; also proves the synthetic rows are valid
                start = time.perf_counter()
                read_rollouts(paths[0]), read_rewards(paths[1])
                validate = {"rows": shard_rows, "seconds": time.perf_counter() - start}
            start = time.perf_counter()
            catalog.ingest_iteration(iteration, *paths, report_path, validated={str(p): hash_file(p) for p in paths})
            ingest_s += time.perf_counter() - start
            if iteration % 10 == 0:
                console.print(f"[dim]{rows:,}: {iteration * shard_rows:,} rows ingested, {ingest_s:.0f} s[/]")
        counts = catalog.counts()
    return {
        "rows": counts["rollouts"],
        "write_s": write_s,
        "ingest_s": ingest_s,
        "ingest_rows_per_s": counts["rollouts"] / ingest_s,
        "validate_full": {**validate, "rows_per_s": validate["rows"] / validate["seconds"]},
        "db_bytes": (directory / "catalog.duckdb").stat().st_size,
    }


def time_queries(path: Path, repeats: int) -> dict:
    with Catalog(path, read_only=True) as catalog:
        skill = catalog._con.execute("SELECT skill_id FROM skill_events WHERE event = 'measured' LIMIT 1").fetchall()[
            0
        ][0]
        problem = catalog._con.execute("SELECT problem_id FROM rollouts LIMIT 1").fetchall()[0][0]
        queries = {
            "pass-rate": catalog.pass_rate_by_family,
            "skill": lambda: catalog.skill_history(skill),
            "problem": lambda: catalog.problem_completions(problem),
        }
        out = {}
        for name, query in queries.items():
            seconds, rows = [], 0
            for _ in range(repeats):
                start = time.perf_counter()
                rows = len(query())
                seconds.append(time.perf_counter() - start)
            out[name] = {"median_s": statistics.median(seconds), "max_s": max(seconds), "rows": rows}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="1000000,10000000", help="Catalog sizes (rollout rows), comma-separated.")
    parser.add_argument("--shard-rows", type=int, default=100_000, help="Rollouts per iteration shard.")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="Keep the catalogs under bench/results/tmp/.")
    add_output_args(parser, "catalog_scale")
    args = parser.parse_args()
    results = {}
    for rows in (int(r) for r in args.rows.split(",")):
        directory = RESULTS / "tmp" / f"catalog-{rows}"
        built = build(directory, rows, args.shard_rows)
        results[rows] = {**built, "queries": time_queries(directory / "catalog.duckdb", args.repeats)}
        if not args.keep:
            shutil.rmtree(directory)
    rows_out = [
        [
            f"{rows:,}",
            f"{r['ingest_rows_per_s']:,.0f}",
            f"{r['validate_full']['rows_per_s']:,.0f}",
            *(f"{r['queries'][q]['median_s']:.3f}" for q in ("pass-rate", "skill", "problem")),
            f"{r['db_bytes'] / 2**30:.2f}",
        ]
        for rows, r in results.items()
    ]
    columns = [
        "rollout rows",
        "ingest rows/s",
        "full validation rows/s",
        "pass-rate s",
        "skill s",
        "problem s",
        "DB GiB",
    ]
    title = f"catalog scale: shards of {args.shard_rows:,} rows; query medians of {args.repeats} runs"
    publish(
        "catalog_scale",
        args.out,
        {"shard_rows": args.shard_rows, "results": results},
        table(title, columns, rows_out),
        lambda png: plot(png, results),
        args.mlflow,
    )


def plot(png: Path, results: dict) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    sizes = list(results)
    for index, query in enumerate(("pass-rate", "skill", "problem")):
        ax.plot(
            sizes, [results[s]["queries"][query]["median_s"] for s in sizes], marker="o", color=f"C{index}", label=query
        )
    ax.axhline(2.0, color="grey", linestyle="--", label="target 2 s")
    ax.set_xscale("log")
    ax.set_xlabel("rollout rows")
    ax.set_ylabel("query seconds (median)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=120)


if __name__ == "__main__":
    main()
