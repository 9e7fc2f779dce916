"""Scale-out on Ray (pipeline.task_runner: ray, flows/fanout.py): what the shards buy and cost.

1. Verification throughput on code problems: one rollouts table of 512 completions (32 synthetic
   code problems, problems.source: code-synth, x 16 completions in the forms a policy writes: right,
   off by one, wrong operator, a syntax error) verified in the sandbox (coevo/sandbox, the run's
   isolation mode) as 2 shards, each shard a `verify_stage` call (the stage function the flow's
   verify task runs) in a Ray task (num_cpus=1), on a local Ray cluster of 1 and then of 2 worker
   CPUs, with code.sandbox.workers: 1 (one sandbox per shard at a time, so the Ray workers are the
   parallelism). Also the local arm: the same table unsharded in this process with the default
   sandbox workers (one per core), i.e. what `pipeline.task_runner: local` does today.
2. The Ray overhead per iteration on the default arithmetic run: the `coevo-train` flow (default
   params, `--iterations` iterations, one bootstrap shared by both arms) with pipeline.shards: 2 on
   the local runner and on the Ray runner (a local cluster of 2 workers started by the flow); reports
   time/rollout + time/verify per iteration (median over iterations after the first), whose difference
   is what Ray costs. The runs' weights must agree (asserted): sharding depends on the shard, not
   the runner.

    PYTHONPATH=. .venv/bin/python bench/scaling_ray.py [--rounds 3] [--iterations 4] [--bootstrap-steps N] \
        [--parts verify,flow] [--out F]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY_PARAMS = ROOT / "examples" / "tiny.yaml"  # the tiny character-level policy's params (params.yaml trains SmolLM2)
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402

from coevo.config import Config, load_config  # noqa: E402
from coevo.io import write_json  # noqa: E402
from coevo.stages.in_force import in_force  # noqa: E402
from coevo.stages.prepare import prepare_stage  # noqa: E402
from coevo.stages.verify import verify_stage  # noqa: E402
from coevo.store.tables import problems as read_split  # noqa: E402
from schemas.rollouts import write_rollouts  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
FORMS = ("{solution}", "x+1", "{solution}", "x*2", "{solution}", "x-3", "x+", "{solution}")


def code_rollouts(cfg: Config) -> tuple[dict, list[str]]:
    """The prepared splits (32 synthetic code problems to train on) and a rollouts table of 16
    completions each, whole and in 2 shards."""
    data = prepare_stage(cfg)
    problems = read_split(data.train.path).head(cfg.rollout.problems_per_iter)
    rows = []
    for _, p in problems.iterrows():
        solution = json.loads(p["answer"]).get("solution", "x") if str(p["answer"]).startswith("{") else "x"
        for slot in range(cfg.rollout.group_size):
            completion = FORMS[slot % len(FORMS)].format(solution=solution)
            rows.append(
                {
                    "rollout_id": f"0001-{p['id']}-{slot:03d}",
                    "iteration": 1,
                    "problem_id": p["id"],
                    "family": p["family"],
                    "variant": "solo",
                    "probe_skill": "",
                    "skills": [],
                    "question": p["prompt"],
                    "prompt": p["prompt"],
                    "completion": completion,
                    "prompt_ids": [1],
                    "completion_ids": [2],
                    "sampling_logprobs": [-1.0],
                    "finished": True,
                    "policy_version": "bench",
                }
            )
    frame = pd.DataFrame(rows)
    paths = []
    for j, part in enumerate((frame.iloc[: len(frame) // 2], frame.iloc[len(frame) // 2 :])):
        path = Path(cfg.run.out_dir) / "rollouts" / f"bench.{j}.parquet"
        write_rollouts(path, part.reset_index(drop=True))
        paths.append(str(path))
    whole = Path(cfg.run.out_dir) / "rollouts" / "bench.parquet"
    write_rollouts(whole, frame)
    return data, [str(whole), *paths]


def verify_throughput(tmp: Path, rounds: int) -> dict:
    """Verdicts/s of the 512-completion table: local unsharded vs 2 shards on 1 and on 2 Ray workers."""
    import ray

    base = {
        "problems": {"source": "code-synth", "data_dir": str(tmp / "code-data")},
        "run": {"out_dir": str(tmp / "code-run")},
    }
    cfg = load_config(TINY_PARAMS, base)
    data, (whole, *shards) = code_rollouts(cfg)
    one_sandbox = cfg.model_copy(
        update={"code": cfg.code.model_copy(update={"sandbox": cfg.code.sandbox.model_copy(update={"workers": 1})})}
    )
    n = cfg.rollout.problems_per_iter * cfg.rollout.group_size
    times: dict[str, list[float]] = {"local (in process, sandbox workers: one per core)": []}
    for _ in range(rounds):
        start = time.perf_counter()
        verify_stage(cfg, in_force(cfg, 1, data, choose=False), whole)
        times["local (in process, sandbox workers: one per core)"].append(time.perf_counter() - start)
    for workers in (1, 2):
        ray.init(
            address="local",
            num_cpus=workers,
            object_store_memory=100 * 2**20,
            include_dashboard=False,
            log_to_driver=False,
        )
        remote, warm = ray.remote(num_cpus=1)(verify_stage), ray.remote(num_cpus=1)(_import_stages)
        ray.get([warm.remote() for _ in range(workers)])  # start the worker processes and import coevo there
        key = f"ray, 2 shards on {workers} worker{'s' if workers > 1 else ''} (sandbox workers: 1 per shard)"
        times[key] = []
        for _ in range(rounds):
            start = time.perf_counter()
            now = in_force(one_sandbox, 1, data, choose=False)  # what verification runs under: one sandbox
            ray.get([remote.remote(one_sandbox, now, shard, j, 2) for j, shard in enumerate(shards)])
            times[key].append(time.perf_counter() - start)
        ray.shutdown()
    return {
        arm: {"seconds": statistics.median(ts), "verdicts_per_s": n / statistics.median(ts), "samples": n}
        for arm, ts in times.items()
    }


def _import_stages() -> None:
    import coevo.stages  # noqa: F401  (what a verify task imports first)


def flow_overhead(tmp: Path, iterations: int, bootstrap_steps: int | None = None) -> dict:
    """Per-iteration rollout + verify seconds of the default run, shards 2, local vs Ray runner."""
    from prefect.testing.utilities import prefect_test_harness

    from flows.train import train_flow

    out = {}
    with prefect_test_harness(server_startup_timeout=120):
        for runner in ("local", "ray"):
            run = tmp / f"flow-{runner}" / "run"
            if runner == "ray":  # the same bootstrap (its key matches): only the runner differs
                shutil.copytree(tmp / "flow-local" / "run" / "bootstrap", run / "bootstrap")
            overrides = {
                "run": {"out_dir": str(run), "iterations": iterations},
                "problems": {"data_dir": str(tmp / "flow-data")},
                "tracking": {"mlflow_uri": f"sqlite:///{tmp / f'mlflow-{runner}.db'}"},
                "pipeline": {"task_runner": runner, "shards": 2},
            }
            if bootstrap_steps is not None:  # a shorter warm start (the bench measures orchestration, not learning)
                overrides["bootstrap"] = {"steps": bootstrap_steps}
            state = train_flow(str(TINY_PARAMS), overrides, return_state=True)
            assert state.is_completed(), state
            lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
            per_iter = [m["time/rollout"] + m["time/verify"] for m in lines[1:]]
            out[runner] = {
                "rollout_verify_s": statistics.median(per_iter),
                "iteration_s": statistics.median(
                    sum(v for k, v in m.items() if k.startswith("time/")) for m in lines[1:]
                ),
            }
            out[runner]["weights"] = json.loads(
                (run / "checkpoints" / f"iter_{iterations:04d}" / "coevo.json").read_text()
            )["weights_sha256"]
    assert out["local"]["weights"] == out["ray"]["weights"], "the Ray runner trained other weights than the local one"
    out["ray_overhead_s"] = out["ray"]["rollout_verify_s"] - out["local"]["rollout_verify_s"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument(
        "--bootstrap-steps", type=int, default=None, help="bootstrap.steps of the flow part (default: params.yaml's)"
    )
    parser.add_argument("--parts", default="verify,flow", help="verify (1.), flow (2.) or both")
    parser.add_argument("--out", type=Path, default=RESULTS / "scaling_ray.json")
    args = parser.parse_args()
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
    )  # Ray workers import coevo
    with tempfile.TemporaryDirectory() as tmp:
        result = {}
        for part, measure in (
            ("verify", lambda: verify_throughput(Path(tmp), args.rounds)),
            ("flow", lambda: flow_overhead(Path(tmp), args.iterations, args.bootstrap_steps)),
        ):
            if part in args.parts.split(","):
                result[part] = {**measure(), "load_average": os.getloadavg()}
                write_json(args.out, result)  # after each part: a stopped bench keeps what it measured
                print(json.dumps(result, indent=2), flush=True)


if __name__ == "__main__":
    main()
