"""`coevo query ...`: read-only questions to a run's catalog (mounted by coevo/cli.py).

Each command opens the catalog read-only (--catalog FILE, --run DIR, or the run.out_dir of --params
FILE), runs one of its documented queries and prints a rich table, or with `--json` the rows as a
JSON list of records. A missing or locked catalog, or an id the catalog does not hold, exits with
code 2 and says what to do (a `--plain` run keeps no catalog; `--ids` lists the ids).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import duckdb
import numpy as np
import pandas as pd
import typer
from rich.console import Console
from rich.table import Table

from coevo.store.catalog import Catalog

query_app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Query a run's DuckDB catalog: pass rates, a skill's history, a problem's completions or episodes, tests.",
)
console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)

CatalogOpt = Annotated[
    Path | None,
    typer.Option("--catalog", help="The run's catalog file (default: <run.out_dir>/catalog.duckdb of --params)."),
]
RunOpt = Annotated[
    Path | None, typer.Option("--run", help="The run directory (run.out_dir) whose catalog.duckdb to read.")
]
ParamsOpt = Annotated[
    Path, typer.Option("--params", "-p", help="params.yaml whose run.out_dir holds the catalog (default params.yaml).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the rows as a JSON list of records instead of a table.")]
DEFAULT_CATALOG = Path("runs/default/catalog.duckdb")
DEFAULT_PARAMS = Path("params.yaml")


def fail(message: str) -> typer.Exit:
    """Print `message` as an error on stderr; the exit (code 2, bad input) to raise."""
    err_console.print(f"[red]error:[/] {message}", highlight=False)
    return typer.Exit(2)


def catalog_path(catalog: Path | None, run: Path | None, params: Path) -> Path:
    """Which catalog to read: --catalog, else --run's, else the one of --params' run.out_dir (params.yaml
    where it exists, else runs/default)."""
    if catalog is not None:
        return catalog
    if run is not None:
        return Path(run) / "catalog.duckdb"
    if params == DEFAULT_PARAMS and not params.is_file():
        return DEFAULT_CATALOG
    from coevo.config import ConfigError, load_config

    try:
        return load_config(params).catalog_path
    except ConfigError as exc:
        raise fail(str(exc)) from exc


def missing_catalog(path: Path) -> str:
    """Why there is no catalog at `path`, and what to do."""
    run = path.parent
    if (run / "metrics.jsonl").is_file() or (run / "summary.json").is_file():
        return (
            f"no catalog at {path}: the run in {run} was trained with `coevo train --plain`, which keeps none (the "
            "Prefect flow, `coevo train` without --plain, ingests every iteration into it); its metrics are in "
            f"{run / 'metrics.jsonl'}"
        )
    if run.is_dir():
        return f"no catalog at {path}: no iteration of {run} has finished yet (`coevo train` writes it as it goes)"
    return (
        f"no catalog at {path}: no run in {run} yet; `coevo train` makes one (or name another: --run DIR, "
        "--params FILE, --catalog FILE)"
    )


def open_catalog(catalog: Path | None, run: Path | None = None, params: Path = DEFAULT_PARAMS) -> Catalog:
    """The catalog, read-only; exit 2 with a clear message when it is missing or held by the writer."""
    path = catalog_path(catalog, run, params)
    if not path.is_file():
        raise fail(missing_catalog(path))
    try:
        return Catalog(path, read_only=True)
    except duckdb.IOException as exc:
        raise fail(f"cannot open {path} (is the writer still running?): {exc}") from exc


def require_known(cat: Catalog, kind: str, wanted: str, command: str) -> None:
    """Exit 2 when the catalog holds no `kind` ('problem' or 'skill') with id `wanted`, naming a few it holds."""
    known = cat.ids(kind)
    if wanted in known:
        return
    sample = ", ".join(known[:5]) + (", ..." if len(known) > 5 else "")
    holds = f"it holds {len(known)}: {sample}" if known else "it holds none"
    raise fail(f"no {kind} {wanted!r} in {cat.path}; {holds} (`coevo query {command} --ids` lists them all)")


def show(frame: pd.DataFrame, title: str, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(records(frame), indent=2))
        return
    table = Table(title=title)
    for column in frame.columns:
        table.add_column(str(column), justify="right" if pd.api.types.is_numeric_dtype(frame[column]) else "left")
    for row in frame.itertuples(index=False):
        table.add_row(*(_cell(value) for value in row))
    console.print(table)
    if frame.empty:
        console.print("no rows")


def records(frame: pd.DataFrame) -> list[dict]:
    """Rows as plain JSON values: lists for list cells, None for nulls, exact floats."""
    return [{str(key): _plain(value) for key, value in row.items()} for row in frame.to_dict("records")]


def _plain(value: object) -> object:
    if isinstance(value, np.ndarray):
        return [_plain(item) for item in value.tolist()]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _cell(value: object) -> str:
    if isinstance(value, (list, tuple, np.ndarray)):
        return ", ".join(str(item) for item in value)
    if isinstance(value, (float, np.floating)):
        return "" if math.isnan(value) else f"{value:.3f}"
    return str(value)


@query_app.command("pass-rate")
def pass_rate(
    catalog: CatalogOpt = None, run: RunOpt = None, params: ParamsOpt = DEFAULT_PARAMS, as_json: JsonOpt = False
) -> None:
    """Pass rate per problem family per iteration (all context variants together)."""
    with open_catalog(catalog, run, params) as cat:
        show(cat.pass_rate_by_family(), "pass rate by family", as_json)


IdsOpt = Annotated[bool, typer.Option("--ids", help="List the ids the catalog holds instead.")]


def one_or_ids(cat: Catalog, kind: str, wanted: str | None, list_ids: bool, as_json: bool) -> bool:
    """Answer `--ids` (or a missing id) with the ids the catalog holds; True when answered. An unknown id exits 2."""
    if list_ids or wanted is None:
        if wanted is None and not list_ids:
            raise fail(f"name a {kind} id, or pass --ids to list the {len(cat.ids(kind))} the catalog holds")
        show(pd.DataFrame({f"{kind}_id": pd.Series(cat.ids(kind), dtype=str)}), f"{kind} ids", as_json)
        return True
    require_known(cat, kind, wanted, kind)
    return False


@query_app.command("skill")
def skill(
    skill_id: Annotated[str | None, typer.Argument(help="A skill id (skills.jsonl of a co-evolver version).")] = None,
    list_ids: IdsOpt = False,
    catalog: CatalogOpt = None,
    run: RunOpt = None,
    params: ParamsOpt = DEFAULT_PARAMS,
    as_json: JsonOpt = False,
) -> None:
    """One skill's lifecycle across iterations: created, measured gaps, admitted/rejected/promoted/retired."""
    with open_catalog(catalog, run, params) as cat:
        if not one_or_ids(cat, "skill", skill_id, list_ids, as_json):
            show(cat.skill_history(skill_id), f"skill {skill_id}", as_json)


@query_app.command("rubric")
def rubric(
    catalog: CatalogOpt = None, run: RunOpt = None, params: ParamsOpt = DEFAULT_PARAMS, as_json: JsonOpt = False
) -> None:
    """Each rubric criterion's weight and discrimination per iteration and family (coevolver.kind: rubrics)."""
    with open_catalog(catalog, run, params) as cat:
        show(cat.rubric_criteria(), "rubric criteria", as_json)


@query_app.command("problem")
def problem(
    problem_id: Annotated[str | None, typer.Argument(help="A problem id (problems table).")] = None,
    list_ids: IdsOpt = False,
    catalog: CatalogOpt = None,
    run: RunOpt = None,
    params: ParamsOpt = DEFAULT_PARAMS,
    as_json: JsonOpt = False,
) -> None:
    """Every completion sampled for one problem across iterations, with its context and reward."""
    with open_catalog(catalog, run, params) as cat:
        if not one_or_ids(cat, "problem", problem_id, list_ids, as_json):
            show(cat.problem_completions(problem_id), f"problem {problem_id}", as_json)


@query_app.command("episodes")
def episodes(
    problem_id: Annotated[str | None, typer.Argument(help="A problem id (problems table).")] = None,
    list_ids: IdsOpt = False,
    catalog: CatalogOpt = None,
    run: RunOpt = None,
    params: ParamsOpt = DEFAULT_PARAMS,
    as_json: JsonOpt = False,
) -> None:
    """One problem's multi-turn episodes (runs with tools or an environment): turns, tool calls and errors,
    the messages, reward."""
    with open_catalog(catalog, run, params) as cat:
        if not one_or_ids(cat, "problem", problem_id, list_ids, as_json):
            show(cat.episodes(problem_id), f"episodes of problem {problem_id}", as_json)


@query_app.command("unit-tests")
def unit_tests(
    catalog: CatalogOpt = None, run: RunOpt = None, params: ParamsOpt = DEFAULT_PARAMS, as_json: JsonOpt = False
) -> None:
    """The test bank's admitted and retired unit tests per iteration (kind=unit_tests)."""
    with open_catalog(catalog, run, params) as cat:
        show(cat.unit_tests(), "unit tests", as_json)


@query_app.command("curriculum")
def curriculum(
    catalog: CatalogOpt = None, run: RunOpt = None, params: ParamsOpt = DEFAULT_PARAMS, as_json: JsonOpt = False
) -> None:
    """Each curriculum category's value, count, last reward and draw probability per iteration (kind=curriculum)."""
    with open_catalog(catalog, run, params) as cat:
        show(cat.curriculum_values(), "curriculum values", as_json)
