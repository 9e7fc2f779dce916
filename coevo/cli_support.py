"""What every `coevo` command (coevo/cli.py) shares: its common options (`--params`, `--set`,
`--json`), the one JSON object of `--json` on the real stdout (`machine_output`), clean errors with
their exit codes (`fail_cleanly`: 2 bad input, 1 a failure a rerun resumes, 3 a run directory in use),
the run lock of a writing command, progress on the human console, and tables of metrics."""

from __future__ import annotations

import json
import os
import re
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from coevo import progress
from coevo.config import Config, ConfigError, load_config
from coevo.config import parse_overrides as parse_set_pairs

console = Console(soft_wrap=True)  # stdout (resolved at each print: under --json it is stderr)
err_console = Console(soft_wrap=True, stderr=True)
_PENDING: list[object] = []  # the JSON object of the running --json command, printed when it ends

ParamsOpt = Annotated[Path, typer.Option("--params", "-p", help="params.yaml to read.")]
SetOpt = Annotated[
    list[str] | None, typer.Option("--set", "-s", help="Override a param: section.key=value (YAML value).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")]


def parse_overrides(pairs: list[str] | None) -> dict:
    return parse_set_pairs(pairs)  # ConfigError: reported by fail_cleanly (exit 2)


def config_from(params: Path, overrides: list[str] | None) -> Config:
    return load_config(params, parse_overrides(overrides))  # ConfigError: reported by fail_cleanly (exit 2)


def fail_cleanly(command):
    """Bad input (a problems file, a table, params) exits with code 2 and its message on stderr, no
    traceback; with --json, stdout holds one JSON object whatever happens (`machine_output`).
    The error classes are imported when one is raised: importing them up front would load torch and
    transformers (~10 s) for every command, the quick refusals included."""
    from functools import wraps

    @wraps(command)
    def wrapper(*args, **kwargs):
        as_json = bool(kwargs.get("as_json"))
        with machine_output(as_json):
            try:
                return command(*args, **kwargs)
            except typer.Exit:  # already reported
                raise
            except Exception as exc:
                raise typer.Exit(report_error(exc, as_json)) from exc

    return wrapper


def report_error(exc: Exception, as_json: bool) -> int:
    """Print `exc` on stderr (and, with --json, as the command's JSON object); its exit code. A bug
    (an error that is not bad input) is re-raised after its JSON object, with its traceback."""
    from coevo.runlock import EXIT_LOCKED, RunLocked

    bad_input, resumable = clean_errors()
    code = (
        2
        if isinstance(exc, bad_input)
        else 1
        if isinstance(exc, resumable)
        else EXIT_LOCKED
        if isinstance(exc, RunLocked)
        else None
    )
    if as_json:
        _PENDING[:] = [{"error": str(exc), "setting": error_setting(exc), "exit_code": code if code is not None else 1}]
    if code is None:
        raise exc
    label = "invalid parameters" if isinstance(exc, ConfigError) else "error:"
    err_console.print(f"[red]{label}[/] {exc}", markup=True, highlight=False)
    return code


_SETTING = re.compile(r"(?<![\w/.-])([a-z_]+(?:\[\d+\])?(?:\.[a-z_]+(?:\[\d+\])?)+)")


def error_setting(exc: Exception) -> str | None:
    """The params.yaml key an error names (`rewards[3].function`, `coevolver.update_context`,
    `run.iterations`), or None."""
    sections = set(Config.model_fields)
    for match in _SETTING.finditer(str(exc)):
        if match.group(1).split(".")[0].split("[")[0] in sections:
            return match.group(1)
    return None


@contextmanager
def machine_output(as_json: bool):
    """Under --json: stdout holds exactly the command's one JSON object. File descriptor 1 is pointed
    at stderr for the command (a spawned engine process inherits it) and stays there afterwards, so
    nothing printed at exit (an engine's shutdown) follows the object; where stdout is not fd 1 (a
    test runner's capture), sys.stdout alone is swapped."""
    if not as_json:
        yield
        return
    _PENDING.clear()
    real = sys.stdout
    real.flush()
    saved = _redirect_fd1()
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        _close_engines()
        sys.stdout.flush()
        text = (
            json.dumps(
                _PENDING[-1] if _PENDING else {"error": "the command printed no result", "setting": None},
                indent=2,
                sort_keys=True,
                default=str,
            )
            + "\n"
        )
        _PENDING.clear()
        if saved is not None:
            os.write(saved, text.encode())
            os.close(saved)
        else:
            sys.stdout = real
            real.write(text)
            real.flush()


def _redirect_fd1() -> int | None:
    """A duplicate of fd 1 after pointing fd 1 at stderr, or None when sys.stdout is not fd 1."""
    try:
        if sys.stdout.fileno() != 1:
            return None
    except (AttributeError, OSError, ValueError):
        return None
    saved = os.dup(1)
    os.dup2(2, 1)
    return saved


def _close_engines() -> None:
    """Shut a live generation engine down while fd 1 still points at stderr (its shutdown prints)."""
    engines = sys.modules.get("coevo.rollout.engines")
    if engines is not None:
        engines.LIVE.close()


def clean_errors() -> tuple[tuple[type[Exception], ...], tuple[type[Exception], ...]]:
    """(bad-input errors, resumable errors): the ones `fail_cleanly` reports without a traceback."""
    from coevo.coevolvers.writers import EndpointError
    from coevo.errors import InputError
    from coevo.io import DiskFullError
    from coevo.model.import_model import ModelImportError
    from coevo.model.lora import LoraTargetError
    from coevo.problems.loader import ProblemsFileError
    from schemas.errors import SchemaError

    return (
        ProblemsFileError,
        SchemaError,
        ConfigError,
        FileNotFoundError,
        ModelImportError,
        InputError,
        LoraTargetError,
    ), (EndpointError, DiskFullError)


@contextmanager
def writer_lock(cfg: Config, command: str):
    """Hold run.out_dir's run lock (coevo/runlock.py) for a writing command; another holder -> exit 3
    (RunLocked, reported by fail_cleanly)."""
    from coevo.runlock import run_lock

    with run_lock(cfg.run.out_dir, f"coevo {command}", log=err_console.print):
        yield


@contextmanager
def shown(name: str, as_json: bool):
    """The work of a command, named `name`, shown with its progress (coevo/progress.py) on the human
    console: bars on a terminal, a line every few seconds elsewhere; nothing under --json."""
    with progress.shown_on(console, quiet=as_json), progress.task(name):
        yield


def quiet_libraries() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def print_json(obj: object) -> None:
    """The command's JSON result: kept for `machine_output` to print on the real stdout at the end."""
    _PENDING[:] = [obj]


def metrics_table(title: str, rows: dict[str, dict[str, float]]) -> Table:
    """rows: column name -> {metric: value}; one line per metric."""
    table = Table(title=title)
    table.add_column("metric")
    for column in rows:
        table.add_column(column, justify="right")
    for metric in sorted({m for values in rows.values() for m in values}):
        table.add_row(metric, *(f"{values[metric]:.3f}" if metric in values else "" for values in rows.values()))
    return table
