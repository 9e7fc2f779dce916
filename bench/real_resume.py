"""SIGKILL resume on the real model: SmolLM2-135M-Instruct with LoRA and vLLM (examples/smollm2.yaml).

Two runs of the same params (float32) in bench/results/real_resume/: `straight` trains --iterations
without a stop; `killed` is SIGKILLed (its whole process group, the vLLM engine included) while the
policy update of --kill-at holds its new weights in memory only (COEVO_PAUSE), then `coevo train
--plain --continue` finishes it from the newest complete checkpoint. Reports both runs' checkpoint
hashes (adapter sha256) iteration by iteration and whether the last ones are bit-identical, and the
disk each run directory takes.

    .venv/bin/python bench/real_resume.py --iterations 3 --kill-at 2     # bench/results/real_resume/real_resume.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import RESULTS, console  # noqa: E402
from bench.disk import du  # noqa: E402
from bench.real_model import COEVO, ROOT  # noqa: E402
from coevo.io import write_json  # noqa: E402

OUT = RESULTS / "real_resume"
# Small held-out split and evaluation only at the start and end: this bench is about the weights.
EVAL = ["problems.n_test=20", "eval.every=1000", "eval.pass_k=2"]


def command(run_dir: Path, model: Path, iterations: int, extra: list[str]) -> list[str]:
    sets = [
        f"run.out_dir={run_dir}",
        f"run.iterations={iterations}",
        f"problems.data_dir={OUT / 'data'}",
        f"policy.checkpoint={model}",
        *EVAL,
    ]
    return [str(COEVO), "train", "--plain", "--params", str(ROOT / "examples" / "smollm2.yaml"), *extra] + [
        a for s in sets for a in ("--set", s)
    ]


def run(argv: list[str], log: Path, env: dict | None = None) -> None:
    with log.open("a") as fh:
        done = subprocess.run(argv, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:3])}... exited {done.returncode}; see {log}")


def killed_during_update(argv: list[str], log: Path, at: int) -> None:
    """Start `argv` paused in update `at`, wait for the pause, SIGKILL its process group."""
    env = {**os.environ, "COEVO_PAUSE": f"update:{at}:600"}
    with log.open("a") as fh:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    while f"coevo-pause update {at}" not in log.read_text():
        if proc.poll() is not None:
            raise RuntimeError(f"the run ended (exit {proc.returncode}) before the pause; see {log}")
        time.sleep(1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def hashes(run_dir: Path) -> dict[int, str]:
    found = {}
    for meta in sorted((run_dir / "checkpoints").glob("iter_*/coevo.json")):
        found[int(meta.parent.name.split("_")[1])] = json.loads(meta.read_text())["weights_sha256"]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--kill-at", type=int, default=2, help="The iteration whose policy update is killed.")
    parser.add_argument("--model", type=Path, default=ROOT / "models" / "smollm2-135m-instruct")
    args = parser.parse_args()
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    model = args.model.resolve()
    straight, killed = OUT / "straight", OUT / "killed"
    run(command(straight, model, args.iterations, []), OUT / "straight.log")
    killed_during_update(command(killed, model, args.iterations, []), OUT / "killed.log", args.kill_at)
    before = hashes(killed)
    run(command(killed, model, args.iterations - args.kill_at + 1, ["--continue"]), OUT / "killed.log")
    a, b = hashes(straight), hashes(killed)
    result = {
        "iterations": args.iterations,
        "kill_at": args.kill_at,
        "checkpoints_before_resume": sorted(before),
        "straight": a,
        "killed_then_resumed": b,
        "bit_identical": a == b,
        "run_dir_mb": {"straight": du(straight) / 1e6, "killed": du(killed) / 1e6},
    }
    write_json(OUT / "real_resume.json", result)
    for it in sorted(a):
        console.print(
            f"iter {it}: {a[it][:12]}  {b.get(it, 'missing')[:12]}  {'=' if a[it] == b.get(it) else 'DIFFERENT'}"
        )
    console.print(f"bit-identical: {a == b}; run dirs {result['run_dir_mb']}")


if __name__ == "__main__":
    main()
