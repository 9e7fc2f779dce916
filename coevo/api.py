"""coevo's Python API for notebooks and scripts: `train`, `evaluate` and `lineage`, each returning
exactly the object the matching CLI command prints with `--json` (the CLI calls these functions).

    import coevo

    result = coevo.train(params="params.yaml", overrides={"run.iterations": 2})
    metrics = coevo.evaluate(result["final_checkpoint"], params="params.yaml")
    chain = coevo.lineage(result["final_checkpoint"], verify=True)

`overrides` is what `--set` gives on the command line: {"section.key": value} pairs, nested dicts
({"run": {"iterations": 2}}), or both. Bad input raises the same errors the CLI reports with exit 2
(coevo.errors.InputError, coevo.config.ConfigError, ...), a held run directory `RunLocked` (exit 3).
Nothing here prints: library and engine logs go where the libraries send them.
"""

from __future__ import annotations

from pathlib import Path

from coevo.config import Config, deep_merge, load_config

TRAIN_KEYS = (
    "final_checkpoint",
    "final_coevolver",
    "checkpoints",
    "initial_eval",
    "final_eval",
    "wall_time_s",
    "iterations",
)


def nested_overrides(overrides: dict | None) -> dict:
    """`overrides` as a nested dict: "section.key" keys split, nested dicts merged key by key."""
    tree: dict = {}
    for key, value in (overrides or {}).items():
        if not isinstance(key, str) or not key:
            raise TypeError(f"overrides: keys are 'section.key' strings, got {key!r}")
        *parents, leaf = key.split(".")
        node: dict = {leaf: value}
        for part in reversed(parents):
            node = {part: node}
        tree = deep_merge(tree, node)
    return tree


def config(params: str | Path = "params.yaml", overrides: dict | None = None) -> Config:
    """The validated run config of `params` with `overrides` (ConfigError names the file and the key)."""
    return load_config(params, nested_overrides(overrides))


def train(
    params: str | Path = "params.yaml",
    overrides: dict | None = None,
    *,
    plain: bool = False,
    continue_latest: bool = False,
) -> dict:
    """`coevo train --json`: bootstrap, then run.iterations of training (the Prefect flow, or the
    plain driver with `plain=True`); returns {final_checkpoint, final_coevolver, checkpoints,
    initial_eval, final_eval, wall_time_s, iterations}."""
    return train_summary(params, overrides, plain=plain, continue_latest=continue_latest, quiet=True)["json"]


def train_summary(
    params: str | Path, overrides: dict | None, *, plain: bool, continue_latest: bool, quiet: bool, console=None
) -> dict:
    """{"summary": the run's whole summary, "json": its `--json` part}, holding the run lock."""
    from rich.console import Console

    from coevo.runlock import run_lock

    cfg = config(params, overrides)
    console = console or Console(soft_wrap=True, quiet=quiet)
    with run_lock(cfg.run.out_dir, "coevo train" + (" --plain" if plain else ""), log=console.print):
        _quiet_libraries()
        if plain:
            from coevo.driver import train as run_training

            summary = run_training(cfg, console, continue_latest)
        else:
            from flows.train import train_flow

            summary = train_flow(str(params), nested_overrides(overrides), continue_latest)
    return {"summary": summary, "json": {key: summary[key] for key in TRAIN_KEYS}}


def evaluate(
    checkpoint: str | Path,
    params: str | Path = "params.yaml",
    overrides: dict | None = None,
    *,
    problems: str | Path | None = None,
    coevolver: str | Path | None = None,
    out: str | Path | None = None,
    pass_curve: int | None = None,
) -> dict:
    """`coevo eval --json`: held-out greedy accuracy and pass@k per family of `checkpoint` (a
    directory, models:/NAME@ALIAS, or 'latest'); returns {checkpoint, problems, n, metrics}, and with
    `pass_curve=N` (N >= 16 samples per problem, drawn only then) also `pass_curve`: pass@k for k = 1..16
    with 95% intervals (coevo.evaluation.sampled_pass_curve)."""
    from coevo.coevolvers.composite import load_coevolvers
    from coevo.errors import InputError
    from coevo.evaluation import CURVE_K, eval_seed, sampled_pass_curve
    from coevo.evaluation import evaluate as held_out
    from coevo.io import write_json
    from coevo.layout import RunLayout
    from coevo.model.checkpoint import load_policy, policy_version, read_meta
    from coevo.prepare import load_user_problems
    from coevo.rollout.engines import LIVE
    from coevo.stages.prepare import prepare_stage
    from coevo.stages.resume import latest_complete
    from coevo.store.lineage import resolve_checkpoint
    from coevo.store.tables import problems as read_split

    if pass_curve is not None and pass_curve < CURVE_K:  # before anything loads
        raise InputError(f"--pass-curve {pass_curve}: a pass@k curve to k={CURVE_K} needs at least {CURVE_K} samples")
    cfg = config(params, overrides)
    _quiet_libraries()
    layout, newest = RunLayout(cfg.run.out_dir), latest_complete(cfg)
    path = (
        layout.checkpoint(newest)
        if str(checkpoint) == "latest"
        else resolve_checkpoint(str(checkpoint), cfg.tracking.mlflow_uri)
    )
    if str(checkpoint) == "latest" and not path.is_dir():
        raise InputError(
            f"no run in {cfg.run.out_dir} yet, so no 'latest' checkpoint: `coevo train` (or `coevo bootstrap` for the "
            "initial policy alone) makes one; or name a checkpoint directory, or pass the --params of another run"
        )
    test = (
        load_user_problems(cfg, problems) if problems else read_split(prepare_stage(cfg).test.path)
    )  # as `coevo prepare` writes it, any source
    bank_dir = layout.coevolver(newest) if coevolver == "latest" else coevolver
    context_for = load_coevolvers(bank_dir, cfg).context_for if bank_dir else None
    try:  # the policy is loaded only if the engine needs it (HF; vLLM loads a full checkpoint itself)
        engine = LIVE.get(
            cfg, path, policy_version(path), lambda: load_policy(path, cfg.policy.device, cfg.policy.dtype)
        )
        seed = eval_seed(cfg.seed, int(read_meta(path).get("iteration") or 0))  # as training evaluated it
        metrics = held_out(engine, test, cfg, seed, context_for)
        curve = sampled_pass_curve(engine, test, cfg, pass_curve, seed) if pass_curve else None
    finally:
        LIVE.close()
    result = {"checkpoint": str(path), "problems": str(problems or "test split"), "n": len(test), "metrics": metrics}
    if curve is not None:
        result["pass_curve"] = curve
    if out is not None:
        write_json(Path(out), result)
    return result


def lineage(checkpoint: str | Path, *, verify: bool = False, tracking_uri: str | None = None) -> dict:
    """`coevo lineage --json`: {"chain": what `checkpoint` was made from, back to the bootstrap}, and
    with `verify=True` "mismatches": every recomputed hash that differs from its record ([] = sound)."""
    from coevo.store.lineage import lineage_chain, resolve_checkpoint, verify_lineage

    path = resolve_checkpoint(str(checkpoint), tracking_uri)
    out: dict = {"chain": lineage_chain(path)}
    if verify:
        out["mismatches"] = [mismatch.to_dict() for mismatch in verify_lineage(path)]
    return out


def _quiet_libraries() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


__all__ = ["config", "evaluate", "lineage", "train"]
