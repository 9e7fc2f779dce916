"""The program a code completion stands for (coevo/code/extract.py), run in the real sandbox."""

from __future__ import annotations

from coevo.code.extract import extract_program, fenced_blocks
from coevo.code.problems import program_of
from coevo.sandbox import Job, run_jobs

STUB = 'from typing import List\n\n\ndef total(xs: List[int]) -> int:\n    """Sum of xs."""\n'
TESTS = ("assert total([1, 2, 3]) == 6", "assert total([]) == 0")


def passes(program: str) -> bool:
    return run_jobs([Job(program, TESTS)])[0].passed


def test_plain_continuation_is_stub_plus_completion():
    assert extract_program(STUB, "    return sum(xs)\n") == STUB + "    return sum(xs)\n"
    assert passes(program_of(STUB, "    return sum(xs)\n"))


def test_fenced_function_replaces_the_stub_and_keeps_its_imports():
    completion = "Here it is:\n```python\ndef total(xs: List[int]) -> int:\n    return sum(xs)\n```\nIt sums the list."
    program = extract_program(STUB, completion)
    assert program.startswith("from typing import List") and "It sums" not in program
    assert passes(program)


def test_the_block_that_defines_the_function_wins_and_unclosed_fences_count():
    completion = (
        "```\nprint('usage')\n```\n```py\ndef total(xs):\n    return sum(xs)\n"  # second block cut at max tokens
    )
    assert fenced_blocks(completion) == ["print('usage')\n", "def total(xs):\n    return sum(xs)\n"]
    assert passes(extract_program(STUB, completion))


def test_a_fenced_body_continues_the_stub_and_an_invalid_stub_is_dropped():
    assert passes(extract_program(STUB, "```python\n    return sum(xs)\n```"))
    cut = "def f(x):\n    return (x"  # not valid Python alone: the block is the program
    assert extract_program(cut, "```python\ndef f(x): return x+3\n```") == "def f(x): return x+3\n"


def test_prose_without_code_stays_invalid():
    assert not passes(extract_program(STUB, "It returns the sum."))
