"""The settle comparison's table from the finished runs committed so far, nothing run: table.json and
table.md of bench/results/compare-smollm2-frontier-settle, a partial table while seeds are missing
(each arm lists the seeds it has; differences pair only the seeds both arms have).

    .venv/bin/python bench/settle_table.py
"""

from __future__ import annotations

import json
from pathlib import Path

from coevo.compare.results import finished_runs
from coevo.compare.spec import load_spec
from coevo.compare.table import build_table, markdown
from coevo.io import write_text

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "bench" / "specs" / "smollm2_frontier_settle.yaml"
OUT = ROOT / "bench" / "results" / "compare-smollm2-frontier-settle"


def main() -> None:
    spec = load_spec(SPEC)
    table = build_table(spec, list(finished_runs(spec, [OUT]).values()))
    write_text(OUT / "table.json", json.dumps(table, indent=2, sort_keys=True) + "\n")
    write_text(OUT / "table.md", markdown(table))
    print((OUT / "table.md").read_text())


if __name__ == "__main__":
    main()
