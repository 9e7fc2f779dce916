"""The xdist groups of tests/conftest.py name files and folders that exist: a moved test file would
otherwise silently leave its group and run beside the tests it must not run beside."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import LONGEST_FIRST, XDIST_GROUPS

TESTS = Path(__file__).resolve().parent


def test_every_group_member_exists():
    missing = [m for members in XDIST_GROUPS.values() for m in members if not (TESTS / m).exists()]
    assert not missing, f"tests/conftest.py XDIST_GROUPS names what is not under tests/: {missing}"


def test_every_longest_first_entry_is_a_group_or_a_file():
    unknown = [g for g in LONGEST_FIRST if g not in XDIST_GROUPS and not (TESTS / g).is_file()]
    assert not unknown, f"tests/conftest.py LONGEST_FIRST names neither a group nor a test file: {unknown}"
