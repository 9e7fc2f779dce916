"""`coevo` command line: prepare, bootstrap, train, eval.

Every command reads params.yaml (`--params`) and accepts `--set section.key=value` overrides, so the
file stays the single source of knobs and a one-off change is visible in the command.
`--json` prints one JSON object for machines; otherwise a human summary is printed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
import yaml
from rich.console import Console
from rich.table import Table

from coevo.config import Config, ConfigError, load_config

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Co-evolutionary RL of language models.")
console = Console(soft_wrap=True)

ParamsOpt = Annotated[Path, typer.Option("--params", "-p", help="params.yaml to read.")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", "-s", help="Override a param: section.key=value (YAML value).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")]


def parse_overrides(pairs: list[str] | None) -> dict:
    tree: dict = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"--set expects section.key=value, got {pair!r}")
        node = tree
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(value)
    return tree


def config_from(params: Path, overrides: list[str] | None) -> Config:
    try:
        return load_config(params, parse_overrides(overrides))
    except ConfigError as exc:
        console.print(f"[red]invalid parameters[/]\n{exc}")
        raise typer.Exit(2) from exc


def fail_cleanly(command):
    """Bad input (a problems file, a table, params) exits with code 2 and its message, no traceback."""
    from functools import wraps

    from coevo.problems.loader import ProblemsFileError
    from schemas.errors import SchemaError

    @wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except (ProblemsFileError, SchemaError, ConfigError, FileNotFoundError) as exc:
            console.print(f"[red]error:[/] {exc}", markup=True, highlight=False)
            raise typer.Exit(2) from exc

    return wrapper


def quiet_libraries() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def print_json(obj: object) -> None:
    typer.echo(json.dumps(obj, indent=2, sort_keys=True, default=str))


def metrics_table(title: str, rows: dict[str, dict[str, float]]) -> Table:
    """rows: column name -> {metric: value}; one line per metric."""
    table = Table(title=title)
    table.add_column("metric")
    for column in rows:
        table.add_column(column, justify="right")
    for metric in sorted({m for values in rows.values() for m in values}):
        table.add_row(metric, *(f"{values[metric]:.3f}" if metric in values else "" for values in rows.values()))
    return table


@app.command()
@fail_cleanly
def prepare(params: ParamsOpt = Path("params.yaml"), set_: SetOpt = None, as_json: JsonOpt = False) -> None:
    """Write the train/test problem splits (validated parquet) to problems.data_dir."""
    from coevo.prepare import prepare_problems

    cfg = config_from(params, set_)
    train, test = prepare_problems(cfg)
    result = {"data_dir": str(cfg.problems.data_dir), "train": len(train), "test": len(test)}
    print_json(result) if as_json else console.print(result)


@app.command()
@fail_cleanly
def bootstrap(params: ParamsOpt = Path("params.yaml"), set_: SetOpt = None, as_json: JsonOpt = False) -> None:
    """Prepare problems and create the initial policy checkpoint (tiny warm start or your checkpoint)."""
    from coevo.policy.bootstrap import bootstrap_policy
    from coevo.prepare import prepare_problems

    cfg = config_from(params, set_)
    quiet_libraries()
    train, _ = prepare_problems(cfg)
    _, meta = bootstrap_policy(cfg, train)
    result = {"checkpoint": str(cfg.bootstrap_dir), **meta}
    print_json(result) if as_json else console.print(result)


@app.command()
@fail_cleanly
def train(
    params: ParamsOpt = Path("params.yaml"),
    set_: SetOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Bootstrap, then train for run.iterations with the plain driver; writes run.out_dir/summary.json."""
    from coevo.driver import train as run_training

    cfg = config_from(params, set_)
    quiet_libraries()
    summary = run_training(cfg, Console(soft_wrap=True, quiet=as_json))
    if as_json:
        print_json({k: summary[k] for k in ("final_checkpoint", "final_coevolver", "checkpoints", "initial_eval", "final_eval", "wall_time_s", "iterations")})
        return
    console.print(metrics_table("held-out evaluation", {"bootstrap": summary["initial_eval"], "final": summary["final_eval"]}))
    skills = summary["skills"]
    console.print(f"skills admitted {skills['n_admitted']}, rejected {skills['n_rejected']}; wall time {summary['wall_time_s']:.0f}s")
    console.print(f"summary: {Path(cfg.run.out_dir) / 'summary.json'}")


@app.command("eval")
@fail_cleanly
def eval_(
    checkpoint: Annotated[Path, typer.Argument(help="A Hugging Face checkpoint directory.")],
    problems: Annotated[Path | None, typer.Option(help="jsonl/parquet problems to evaluate on (default: the test split).")] = None,
    coevolver: Annotated[Path | None, typer.Option(help="A saved co-evolver directory: also report accuracy with its retrieved skills.")] = None,
    params: ParamsOpt = Path("params.yaml"),
    set_: SetOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Held-out greedy accuracy and pass@k per family (with skills when --coevolver is given)."""
    from coevo.coevolvers import load_coevolver
    from coevo.engines.hf import HFEngine
    from coevo.evaluate import evaluate
    from coevo.policy.checkpoint import load_policy
    from coevo.prepare import build_splits
    from coevo.problems.loader import load_problem_file

    cfg = config_from(params, set_)
    quiet_libraries()
    test = load_problem_file(problems) if problems else build_splits(cfg)[1]
    policy = load_policy(checkpoint, cfg.policy.device, cfg.policy.dtype)
    context_for = load_coevolver(coevolver, cfg.coevolver, cfg.seed).context_for if coevolver else None
    metrics = evaluate(HFEngine(policy, cfg.engine.batch_size), test, cfg.sampling, cfg.eval.pass_k, cfg.seed, context_for)
    result = {"checkpoint": str(checkpoint), "problems": str(problems or "test split"), "n": len(test), "metrics": metrics}
    print_json(result) if as_json else console.print(metrics_table(f"{checkpoint} on {result['problems']}", {"value": metrics}))


if __name__ == "__main__":
    app()
