"""Lint and format: `ruff check` ([tool.ruff] in pyproject.toml: pycodestyle with line length 120, pyflakes,
import order) reports nothing, and `ruff format --check` finds every file already formatted. Guards the tree
against lines over 120 columns, unused names and imports, unsorted imports and unformatted code; ruff is pinned
in the `test` extra, so CI and developers run the same release."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff_check_reports_nothing():
    result = _ruff("check", ".")
    assert result.returncode == 0, f"ruff check failed:\n{result.stdout}\n{result.stderr}"


def test_ruff_format_leaves_every_file_unchanged():
    result = _ruff("format", "--check", ".")
    assert result.returncode == 0, f"ruff format --check failed:\n{result.stdout}\n{result.stderr}"
