"""The mutation check's entries stay applicable: a refactor that moves a mutated text makes its entry
STALE, and the check would then guard nothing. This test reads the entries only (the check itself,
`python -m tests.mutations`, runs minutes of trainings and is not part of the default run)."""

from __future__ import annotations

import re

import pytest

from tests.mutations import MUTATIONS, ROOT


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_each_mutation_applies_once_and_names_existing_tests(mutation):
    text = (ROOT / mutation.file).read_text()
    assert text.count(mutation.find) == 1, (
        f"{mutation.name}: its text is in {mutation.file} {text.count(mutation.find)} times"
    )
    assert mutation.find != mutation.replace
    for node in mutation.tests:
        path, _, name = node.partition("::")
        source = (ROOT / path).read_text()
        function = re.sub(r"\[.*\]$", "", name.split("::")[-1])
        assert re.search(rf"^\s*(async )?def {re.escape(function)}\(", source, re.M), f"{mutation.name}: no test {node}"


def test_entry_names_are_unique():
    names = [m.name for m in MUTATIONS]
    assert len(names) == len(set(names))
