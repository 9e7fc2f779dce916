"""Which arm runs a comparison has: the order it runs them in, the finished ones it finds (its own
results directory and `--merge` directories), and its MLflow parent run.

Order: seed by seed, every arm once per seed, the arms' order rotated by the seed's place in the
spec's seeds (seeds 0, 1: A B, B A), so that machine load drifting over a sitting falls on every arm
alike; the rotation follows the spec, not the sitting, so a comparison run one seed per sitting
still starts each seed with another arm.

Results sets: a results directory is a comparison's `--out` directory; its finished arm runs are
`runs/<arm>-seed<k>/compare_arm.json`. A run merges into the table when its arm and seed are in the
spec and its identity equals what the spec's arm computes for that seed (else an InputError names
it); the same cell in two directories is accepted only with an identical record.
"""

from __future__ import annotations

from pathlib import Path

from coevo.compare.runs import MARKER, read_marker
from coevo.compare.spec import Spec, arm_config, identities, reference_tracking
from coevo.errors import InputError


def interleaved(spec: Spec, seeds: list[int]) -> list[tuple[str, int]]:
    """The (arm, seed) runs of a sitting over `seeds`, in the order they run (see the module docstring)."""
    names = [a.name for a in spec.arms]
    return [(names[(spec.seeds.index(seed) + j) % len(names)], seed) for seed in seeds for j in range(len(names))]


def sitting_seeds(spec: Spec, seeds: list[int] | None) -> list[int]:
    """The seeds a sitting runs: `seeds` (`--seed`), default every seed of the spec. A comparison's
    seeds are fixed in its spec before it runs (its sha256 is recorded with every run), so a seed
    outside them is refused rather than run as an exploratory extra: a results directory's table
    covers every finished run in it, and a seed added after seeing a result is not evidence."""
    unknown = sorted(set(seeds or []) - set(spec.seeds))
    if unknown:
        raise InputError(
            f"--seed {unknown}: not among the seeds of {spec.path} ({spec.seeds}). A comparison's seeds are fixed "
            f"in its spec before it runs; to run more, list them in the spec (or a new one) before running any of them"
        )
    return list(seeds or spec.seeds)


def expected_identities(spec: Spec, arm: str, seed: int) -> set[str]:
    return identities(arm_config(spec, spec.arm(arm), seed, Path("compare-check")))


def finished_runs(spec: Spec, dirs: list[Path]) -> dict[tuple[str, int], dict]:
    """{(arm, seed): marker} of the finished arm runs in the results directories `dirs`."""
    found: dict[tuple[str, int], tuple[dict, Path]] = {}
    arms = {a.name for a in spec.arms}
    for root in dirs:
        if not Path(root).is_dir():
            raise InputError(f"{root}: no such results directory (a `coevo compare --out` directory)")
        for path in sorted(Path(root).glob(f"runs/*/{MARKER}")):
            marker = read_marker(path.parent)
            cell = (marker["arm"], marker["seed"])
            if marker["arm"] not in arms or marker["seed"] not in spec.seeds:
                raise InputError(
                    f"{path}: arm {marker['arm']!r} seed {marker['seed']} is not in {spec.path} (arms "
                    f"{sorted(arms)}, seeds {spec.seeds})"
                )
            if marker["identity"] not in expected_identities(spec, *cell):
                raise InputError(
                    f"{path}: this run of arm {marker['arm']!r} seed {marker['seed']} computed other params than "
                    f"{spec.path} gives that arm now; it cannot enter this comparison"
                )
            if cell in found and found[cell][0]["record"] != marker["record"]:
                raise InputError(
                    f"{path}: arm {cell[0]!r} seed {cell[1]} is also in {found[cell][1]} with other results; "
                    f"merge one of them"
                )
            found.setdefault(cell, (marker, path))
    return {cell: marker for cell, (marker, _) in found.items()}


class ParentRun:
    """The comparison's MLflow run (in the reference arm's store, experiment `coevo-compare` unless the
    spec's `tracking` says otherwise); its arm runs are nested under it (tag mlflow.parentRunId).
    A killed comparison's rerun resumes the same parent run (coevo.tracking.mlflow_tracker.Tracker)."""

    def __init__(self, spec: Spec, root: Path):
        from coevo.config import TrackingConfig
        from coevo.tracking.mlflow_tracker import Tracker

        self.tracker = Tracker(TrackingConfig(**reference_tracking(spec)), root)
        budget = (
            {"iterations": spec.iterations}
            if spec.iterations is not None
            else {"train_seconds": spec.train_seconds, "max_iterations": spec.max_iterations}
        )
        params = {
            "spec": str(spec.path),
            "arms": [a.name for a in spec.arms],
            "seeds": spec.seeds,
            "reference": spec.reference,
            "eval_every": spec.eval_every,
            **budget,
        }
        self.run_id = self.tracker.start(params, run_name=f"compare-{spec.name}")

    def nest(self, run_dir: Path, arm: str, seed: int) -> bool:
        """Tag the arm run's MLflow run as a child of this one (unless an earlier parent has it).
        False, nothing tagged, for a finished run whose MLflow run is not in this store: a results
        directory carried from another machine holds only its runs' compare_arm.json."""
        import json

        from mlflow.exceptions import MlflowException

        from coevo.tracking.mlflow_tracker import RUN_FILE

        if not (Path(run_dir) / RUN_FILE).is_file():
            return False
        child = json.loads((Path(run_dir) / RUN_FILE).read_text())["run_id"]
        client = self.tracker.client
        try:
            client.get_run(child)
        except MlflowException:
            return False
        if "mlflow.parentRunId" not in client.get_run(child).data.tags:
            client.set_tag(child, "mlflow.parentRunId", self.run_id)
        client.set_tag(child, "coevo.compare.arm", arm)
        client.set_tag(child, "coevo.compare.seed", str(seed))
        return True

    def finish(self, table: dict, files: dict[str, Path]) -> None:
        from coevo.tracking.mlflow_tracker import metric_name

        client = self.tracker.client
        metrics = {}
        for arm in table["arms"]:
            metrics[f"compare/{arm['arm']}/acc_mean"] = arm["acc_mean"]
            if "vs_reference" in arm:
                vs = arm["vs_reference"]
                metrics.update(
                    {
                        f"compare/{arm['arm']}/diff": vs["mean_diff"],
                        f"compare/{arm['arm']}/diff_ci_low": vs["ci95"][0],
                        f"compare/{arm['arm']}/diff_ci_high": vs["ci95"][1],
                        f"compare/{arm['arm']}/diff_p": vs["p_value"],
                    }
                )
        for key, value in metrics.items():
            client.log_metric(self.run_id, metric_name(key), float(value))
        for path in files.values():
            client.log_artifact(self.run_id, str(path), "compare")
        self.tracker.end("FINISHED")
