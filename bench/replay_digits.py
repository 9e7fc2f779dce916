"""Replay to the digit: the weights sha256 a code change must not move, for comparing two trees.

Three tiny runs (the test suite's tiny policy, params.yaml otherwise), each printing the weights
sha256 of every checkpoint it ends with:

  plain    `coevo train --plain`, the default co-evolver, 3 iterations
  flow     `coevo train` (the Prefect flow), a curriculum and a skill bank in one list, 4 iterations
  killed   the same flow SIGKILLed in iteration 2's policy update (COEVO_PAUSE), then the same
           command again: it resumes, and must end on the flow's weights

    .venv/bin/python bench/replay_digits.py --out /tmp/after.json
    PYTHONPATH=/path/to/other/checkout .venv/bin/python bench/replay_digits.py --out /tmp/before.json

The two JSON files agree exactly when the change kept what the runs compute. A temporary Prefect
server is started for the flow runs (PREFECT_API_URL unset: each flow process starts its own).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
TINY_PARAMS = ROOT / "examples" / "tiny.yaml"  # the tiny character-level policy's params (params.yaml trains SmolLM2)
# the test suite's tiny policy (tests/conftest.py), copied: this script also runs on other checkouts; a
# longer warm start than the suite's, which passes some samples, so that the policy moves
TINY = {
    "policy": {
        "shape": {"hidden_size": 32, "num_layers": 2, "num_heads": 2, "intermediate_size": 64, "max_position": 64},
        "threads": 1,
    },
    "problems": {"n_train": 120, "n_test": 30, "n_val": 10, "max_digits": 1},
    "bootstrap": {"steps": 100, "batch_size": 16, "lr": 1e-2},
    "rollout": {"problems_per_iter": 4, "group_size": 4},
    "optim": {"minibatch_size": 8, "lr": 1e-3},
    "sampling": {"max_new_tokens": 4},
    "eval": {"every": 1, "pass_k": 2},
    "run": {"checkpoint_every": 1},
}
TWO = [{"kind": "curriculum"}, {"kind": "skill_bank"}]


def params_file(root: Path, name: str, iterations: int, coevolver: list | None = None) -> Path:
    raw = yaml.safe_load(TINY_PARAMS.read_text())
    for section, values in TINY.items():
        raw[section].update(values)
    raw["run"].update({"iterations": iterations, "out_dir": str(root / name / "run")})
    raw["problems"]["data_dir"] = str(root / name / "data")
    raw["tracking"].update({"mlflow_uri": f"sqlite:///{root / name / 'mlflow.db'}", "experiment": name})
    if coevolver is not None:
        raw["coevolver"] = coevolver
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def train(params: Path, *flags: str, pause: str | None = None) -> None:
    """`coevo train` in a subprocess; with `pause` (point:where), SIGKILLed when it reaches it."""
    env = {key: value for key, value in os.environ.items() if key not in ("COEVO_PAUSE", "PREFECT_API_URL")}
    if pause:
        env["COEVO_PAUSE"] = f"{pause}:300"
    command = [sys.executable, "-m", "coevo.cli", "train", "--params", str(params), *flags]
    process = subprocess.Popen(
        command, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, start_new_session=True
    )
    for line in process.stderr:
        if pause and line.strip() == f"coevo-pause {pause.replace(':', ' ')}":
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return
    if process.wait() != 0:
        raise SystemExit(f"{' '.join(command)}: exit {process.returncode}")
    if pause:
        raise SystemExit(f"{params}: the run ended without reaching {pause}")


def weights(params: Path) -> dict[str, str]:
    """Checkpoint name -> the weights sha256 its coevo.json records (0 = the bootstrap)."""
    run = Path(yaml.safe_load(params.read_text())["run"]["out_dir"])
    found = {"0": json.loads((run / "bootstrap" / "coevo.json").read_text())["weights_sha256"]}
    for checkpoint in sorted((run / "checkpoints").iterdir()):
        found[str(int(checkpoint.name.removeprefix("iter_")))] = json.loads((checkpoint / "coevo.json").read_text())[
            "weights_sha256"
        ]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        plain = params_file(root, "plain", 3)
        train(plain, "--plain")
        flow = params_file(root, "flow", 4, TWO)
        train(flow)
        killed = params_file(root, "killed", 4, TWO)
        train(killed, pause="update:2")
        train(killed)
        result = {"plain": weights(plain), "flow": weights(flow), "killed": weights(killed)}
    result["killed_equals_flow"] = result["killed"] == result["flow"]
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
