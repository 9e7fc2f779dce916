"""run.out_dir/metrics.jsonl: one JSON line of metrics per finished iteration, for both runners.

Each iteration's line is appended as the iteration ends, so a crash keeps the lines of the
iterations done, and a `--continue` (every nightly run) adds to the earlier runs' lines. Opening the
log for a run starting at iteration `first` drops the lines of iterations >= first (a fresh run
starts an empty log; a continued or resumed one re-writes the iterations it re-runs), and the torn
last line a kill in the middle of an append can leave.
"""

from __future__ import annotations

import json
from pathlib import Path

from coevo.errors import InputError
from coevo.io import write_text

NAME = "metrics.jsonl"


class MetricsLog:
    def __init__(self, run_dir: str | Path, first: int):
        self.path = Path(run_dir) / NAME
        kept = [line for line in self._lines() if line["iteration"] < first]
        write_text(self.path, "".join(_line(m) for m in kept))

    def append(self, metrics: dict[str, float]) -> None:
        with self.path.open("a") as fh:
            fh.write(_line(metrics))

    def _lines(self) -> list[dict]:
        if not self.path.is_file():
            return []
        lines = self.path.read_text().splitlines()
        parsed = []
        for number, line in enumerate(lines, start=1):
            try:
                parsed.append(json.loads(line))
            except json.JSONDecodeError as exc:
                if number == len(lines):  # the torn tail of an append a kill interrupted
                    break
                raise InputError(
                    f"{self.path}: line {number} is not JSON ({exc.msg}); the metrics log was edited or damaged"
                ) from None
        return parsed


def _line(metrics: dict) -> str:
    return json.dumps(metrics, sort_keys=True) + "\n"
