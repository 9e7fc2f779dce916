"""`coevo query ...`: read-only questions to a run's catalog (mounted by coevo/cli.py).

Each command opens the catalog read-only, runs one of its documented queries and prints a rich table,
or with `--json` the rows as a JSON list of records. A missing or locked catalog exits with code 2.
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
    help="Query a run's DuckDB catalog: pass rates, a skill's history, a problem's completions.",
)
console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)

CatalogOpt = Annotated[Path, typer.Option("--catalog", help="The run's catalog file (<run.out_dir>/catalog.duckdb).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the rows as a JSON list of records instead of a table.")]
DEFAULT_CATALOG = Path("runs/default/catalog.duckdb")


def open_catalog(path: Path) -> Catalog:
    """The catalog, read-only; exit 2 with a clear message when it is missing or held by the writer."""
    if not path.is_file():
        err_console.print(
            f"[red]error:[/] no catalog at {path} (a run's ingest step writes it; pass --catalog)", highlight=False
        )
        raise typer.Exit(2)
    try:
        return Catalog(path, read_only=True)
    except duckdb.IOException as exc:
        err_console.print(f"[red]error:[/] cannot open {path} (is the writer still running?): {exc}", highlight=False)
        raise typer.Exit(2) from exc


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
def pass_rate(catalog: CatalogOpt = DEFAULT_CATALOG, as_json: JsonOpt = False) -> None:
    """Pass rate per problem family per iteration (all context variants together)."""
    with open_catalog(catalog) as cat:
        show(cat.pass_rate_by_family(), "pass rate by family", as_json)


@query_app.command("skill")
def skill(
    skill_id: Annotated[str, typer.Argument(help="A skill id (skills.jsonl of a co-evolver version).")],
    catalog: CatalogOpt = DEFAULT_CATALOG,
    as_json: JsonOpt = False,
) -> None:
    """One skill's lifecycle across iterations: created, measured gaps, admitted/rejected/promoted/retired."""
    with open_catalog(catalog) as cat:
        show(cat.skill_history(skill_id), f"skill {skill_id}", as_json)


@query_app.command("rubric")
def rubric(catalog: CatalogOpt = DEFAULT_CATALOG, as_json: JsonOpt = False) -> None:
    """Each rubric criterion's weight and discrimination per iteration and family (coevolver.kind: rubrics)."""
    with open_catalog(catalog) as cat:
        show(cat.rubric_criteria(), "rubric criteria", as_json)


@query_app.command("problem")
def problem(
    problem_id: Annotated[str, typer.Argument(help="A problem id (problems table).")],
    catalog: CatalogOpt = DEFAULT_CATALOG,
    as_json: JsonOpt = False,
) -> None:
    """Every completion sampled for one problem across iterations, with its context and reward."""
    with open_catalog(catalog) as cat:
        show(cat.problem_completions(problem_id), f"problem {problem_id}", as_json)


@query_app.command("curriculum")
def curriculum(catalog: CatalogOpt = DEFAULT_CATALOG, as_json: JsonOpt = False) -> None:
    """Each curriculum category's value, count, last reward and draw probability per iteration (kind=curriculum)."""
    with open_catalog(catalog) as cat:
        show(cat.curriculum_values(), "curriculum values", as_json)
