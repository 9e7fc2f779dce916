"""Every module of the coevo package says what it owns: a module docstring of at least one sentence.

Every .py file under coevo/ counts, a subpackage's __init__.py included; the docstring is read from
the source with `ast` (nothing is imported).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SENTENCE = re.compile(r"\w[^.!?]*\w[^.!?]*[.!?](\s|$)")  # words, then a full stop (or ! or ?) that ends it


def test_a_sentence_is_words_and_a_full_stop():
    assert SENTENCE.search("Co-evolvers: the artifacts that evolve. More.")
    assert SENTENCE.search("The learning-curve figure: held-out accuracy against training iteration.")
    assert not SENTENCE.search("")
    assert not SENTENCE.search("TODO")
    assert not SENTENCE.search("coevo.model")


def test_every_coevo_module_has_a_docstring_of_at_least_one_sentence():
    lacking = []
    for file in sorted((ROOT / "coevo").rglob("*.py")):
        docstring = ast.get_docstring(ast.parse(file.read_text(), str(file)))
        if docstring is None or not SENTENCE.search(docstring):
            lacking.append(
                f"{file.relative_to(ROOT)}: "
                f"{'no module docstring' if docstring is None else f'no sentence in {docstring[:60]!r}'}"
            )
    assert not lacking, "modules without a docstring of at least one sentence:\n" + "\n".join(lacking)
