"""What the CLI tells a person about finished work, as tables and sentences (never a Python repr):
the prepared splits, the bootstrap, the evaluation of checkpoint 0. The
`--json` objects carry the same facts for machines (coevo/cli.py)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
from rich.table import Table

from coevo.problems.splits import SPLITS
from coevo.records import Bootstrapped


def split_counts(data_dir: str | Path) -> dict[str, int]:
    """Problems per split file under `data_dir` (train, val, test: the ones written), from the parquet metadata."""
    out = {}
    for name in SPLITS:
        path = Path(data_dir) / f"{name}.parquet"
        if path.is_file():
            out[name] = pq.ParquetFile(path).metadata.num_rows
    return out


def splits_table(source: str, data_dir: str | Path) -> Table:
    """The prepared splits: one row per split with its problems and file."""
    table = Table(title=f"problems from {source} (validated)")
    table.add_column("split")
    table.add_column("problems", justify="right")
    table.add_column("file")
    for name, n in split_counts(data_dir).items():
        table.add_row(name, f"{n:,}", str(Path(data_dir) / f"{name}.parquet"))
    return table


def bootstrap_sentence(boot: Bootstrapped, source: str | Path | None = None) -> str:
    """What the bootstrap stage made (its record: coevo/stages/prepare.py `bootstrap_stage`), as one sentence."""
    where, report = f"initial policy {boot.checkpoint.path}", boot.report
    if not report:
        made = f"the checkpoint {source}" if source else "the checkpoint params name"
        return f"{where}: {made}, copied as checkpoint 0; co-evolver {boot.coevolver.path}"
    stopped = {
        "steps": "all of them",
        "replay_steps": "a replay of a time-budgeted run",
        "time_budget": "stopped by bootstrap.time_budget_s",
    }.get(report.get("stopped_by", "steps"), report.get("stopped_by"))
    loss = report.get("final_loss")
    loss_text = f", final loss {loss:.3f}" if isinstance(loss, float) and loss == loss else ""
    return (
        f"{where}: the tiny {report.get('kind', '')} warm start, {report.get('steps', 0):,} steps ({stopped}) "
        f"in {report.get('seconds', 0.0):.0f} s{loss_text}, {report.get('parameters', 0):,} parameters, "
        f"{report.get('demonstrations', 0):,} demonstrations; co-evolver {boot.coevolver.path}"
    )


def first_eval_sentence(it: int, where: str | Path, metrics: dict[str, float]) -> str:
    """The held-out evaluation of the checkpoint the first iteration starts from (rich markup)."""
    name = "the bootstrap" if it == 0 else f"iteration {it}"
    parts = [f"eval/acc {metrics['eval/acc']:.3f}"]
    parts += [f"{key} {metrics[key]:.3f}" for key in ("val/acc",) if key in metrics]
    return f"[bold]checkpoint {it}[/] ({name}, {where}): held-out {', '.join(parts)}"
