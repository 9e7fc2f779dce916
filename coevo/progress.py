"""Progress of long work, for a person watching: the bootstrap's steps and loss, each iteration's
stages, evaluations, comparison arms, a model import.

The work reports through two functions that do nothing unless a reporter is installed (`reporting`):
`task(name)`, a context manager around a piece of work, and `update(name, done, total, **fields)`, a
count inside the innermost open task (created at its first update, removed when that task ends). The
CLI installs one for its human output; under `--json` and in the Python API (coevo/api.py) none is
installed, so nothing is printed. `RichReporter` draws rich progress bars with elapsed and remaining
time on a terminal; `LineReporter` writes a status line every 10 seconds for logs and pipes
(COEVO_PROGRESS_EVERY sets the seconds; 0 writes a line at every start, count and end).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from rich.console import Console, RenderableType
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from coevo.errors import InputError


class Reporter(Protocol):
    def begin(self, name: str) -> None: ...

    def update(self, name: str, done: float, total: float | None, info: str) -> None: ...

    def end(self, name: str) -> None: ...


_LOCK = threading.Lock()
_REPORTER: Reporter | None = None


@contextmanager
def reporting(reporter: Reporter | None) -> Iterator[None]:
    """Install `reporter` (None: stay quiet) while the block runs; the previous one after."""
    global _REPORTER
    with _LOCK:
        previous, _REPORTER = _REPORTER, reporter
    try:
        yield
    finally:
        with _LOCK:
            _REPORTER = previous


@contextmanager
def task(name: str) -> Iterator[None]:
    """A piece of work named `name`, shown while it runs (nothing without a reporter)."""
    reporter = _REPORTER
    if reporter is None:
        yield
        return
    reporter.begin(name)
    try:
        yield
    finally:
        reporter.end(name)


def update(name: str, done: float, total: float | None = None, **fields: object) -> None:
    """`done` of `total` units of the count `name` (steps, problems, iterations), with `fields` shown
    beside it (loss=0.42); nothing without a reporter."""
    reporter = _REPORTER
    if reporter is not None:
        info = " ".join(
            f"{key} {value:.3f}" if isinstance(value, float) else f"{key} {value}" for key, value in fields.items()
        )
        reporter.update(name, done, total, info)


class Counted(ProgressColumn):
    """A column shown for counts only (a task with a total); blank beside an open task's spinner."""

    def __init__(self, column: ProgressColumn):
        super().__init__()
        self.column = column

    def render(self, task: Task) -> RenderableType:
        return self.column.render(task) if task.total is not None else Text("")


class RichReporter:
    """rich progress bars on `console`: a spinner and elapsed time per open task, and a bar with its
    count, elapsed and remaining time per count; a count ends with the task it was made in."""

    def __init__(self, console: Console):
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("[progress.description]{task.description}"),
            Counted(BarColumn(bar_width=24)),
            Counted(MofNCompleteColumn()),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            Counted(TextColumn("eta")),
            Counted(TimeRemainingColumn()),
            console=console,
            transient=True,
            refresh_per_second=4,
        )
        self.open: list[tuple[str, TaskID, list[TaskID]]] = []  # tasks, each with its counts
        self.counts: dict[str, TaskID] = {}

    def __enter__(self) -> RichReporter:
        self.progress.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.progress.stop()

    def begin(self, name: str) -> None:
        with _LOCK:
            self.open.append((name, self.progress.add_task(name, total=None, info=""), []))

    def update(self, name: str, done: float, total: float | None, info: str) -> None:
        with _LOCK:
            if name not in self.counts:
                self.counts[name] = self.progress.add_task(f"  {name}", total=total, info=info)
                if self.open:
                    self.open[-1][2].append(self.counts[name])
            self.progress.update(self.counts[name], completed=done, total=total, info=info)

    def end(self, name: str) -> None:
        with _LOCK:
            for index in range(len(self.open) - 1, -1, -1):
                if self.open[index][0] == name:
                    _, task_id, counts = self.open.pop(index)
                    for count in counts:
                        self.progress.remove_task(count)
                        self.counts = {k: v for k, v in self.counts.items() if v != count}
                    self.progress.remove_task(task_id)
                    return


class LineReporter:
    """Plain lines on `console` (a log file, a pipe). With `every` > 0 a status line every `every`
    seconds while work is open (the open tasks with their seconds, the latest counts), so a log shows
    the run is alive without a line per stage; with `every` = 0 a line at every start, count and end."""

    def __init__(self, console: Console, every: float = 10.0):
        self.console, self.every = console, every
        self.started = time.perf_counter()
        self.open: list[tuple[str, float]] = []
        self.counts: dict[str, tuple[int, str]] = {}  # name -> (tasks open when it began, its line)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._beat, name="coevo-progress", daemon=True)

    def __enter__(self) -> LineReporter:
        if self.every > 0:
            self.thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join()

    def _print(self, text: str) -> None:
        self.console.print(f"[{time.perf_counter() - self.started:6.0f}s] {text}", highlight=False, markup=False)

    def _beat(self) -> None:
        while not self.stop.wait(self.every):
            with _LOCK:
                now = time.perf_counter()
                work = [f"{name} ({now - since:.0f} s)" for name, since in self.open[-2:]]
                status = " | ".join(work + [line for _, line in self.counts.values()])
            if status:
                self._print(status)

    def begin(self, name: str) -> None:
        with _LOCK:
            self.open.append((name, time.perf_counter()))
        if self.every == 0:
            self._print(f"{name} ...")

    def update(self, name: str, done: float, total: float | None, info: str) -> None:
        line = f"{name} {done:g}{f'/{total:g}' if total is not None else ''} {info}".rstrip()
        with _LOCK:
            self.counts[name] = (self.counts.get(name, (len(self.open), ""))[0], line)
        if self.every == 0:
            self._print(line)

    def end(self, name: str) -> None:
        with _LOCK:
            index = max((i for i, (n, _) in enumerate(self.open) if n == name), default=None)
            since = self.open.pop(index)[1] if index is not None else time.perf_counter()
            self.counts = {k: v for k, v in self.counts.items() if v[0] <= len(self.open)}  # its own go with it
        if self.every == 0:
            self._print(f"{name} done in {time.perf_counter() - since:.1f} s")


@contextmanager
def shown_on(console: Console, quiet: bool = False) -> Iterator[None]:
    """Progress for the CLI's human output on `console`: bars on a terminal, lines elsewhere; none when `quiet`."""
    if quiet:
        with reporting(None):
            yield
        return
    if console.is_terminal and not console.is_dumb_terminal:
        with RichReporter(console) as reporter, reporting(reporter):
            yield
        return
    with LineReporter(console, line_interval()) as reporter, reporting(reporter):
        yield


def line_interval() -> float:
    """Seconds between status lines off a terminal: COEVO_PROGRESS_EVERY (0: a line at every start,
    count and end), else 10."""
    raw = os.environ.get("COEVO_PROGRESS_EVERY", "")
    try:
        return max(0.0, float(raw)) if raw.strip() else 10.0
    except ValueError:
        raise InputError(f"COEVO_PROGRESS_EVERY={raw!r}: seconds between progress lines, a number such as 10") from None
