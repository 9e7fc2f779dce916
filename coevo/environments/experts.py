"""Experts of the built-in environments: who plays a demonstrated episode for the tool warm start
(coevo/model/tool_warm_start.py).

An expert is `expert(row, results) -> str`: the next assistant turn of an episode on the problem row,
given the tool results so far (in order), either one `<tool_call>` or the final answer. The warm start
runs each call through the run's own tools, so the results a demonstration shows are the tools' own.

- the calculator: the tool of the question's family with its operands, then the result, boxed;
- the guessing game: halving the range the prompt names by the feedback, then the number, boxed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from coevo.problems.proposer import parse_question
from coevo.rollout.tools import format_tool_call

Expert = Callable[[Mapping[str, Any], Sequence[str]], str]

# a question's family -> the tool of coevo/environments/calculator.py that computes it
CALCULATOR_TOOLS = {"add": "add", "sub": "subtract", "mul": "multiply"}
_RANGE = re.compile(r"from (\d+) to (\d+)")
_FEEDBACK = re.compile(r"^(\d+) is (too low|too high|correct)")


def answer(value: object) -> str:
    return f"The answer is \\boxed{{{value}}}."


def calculator(row: Mapping[str, Any], results: Sequence[str]) -> str:
    """One call of the family's tool on the question's two operands, then its result as the answer."""
    if results:
        return answer(results[-1])
    parsed = parse_question(str(row["prompt"]).strip())
    if parsed is None or parsed[1] not in CALCULATOR_TOOLS or len(parsed[2]) != 2:
        raise ValueError(f"problem {row.get('id')!r}: the calculator's expert plays add, sub and mul questions only")
    _, family, (a, b) = parsed
    return format_tool_call(CALCULATOR_TOOLS[family], {"a": a, "b": b})


def guessing(row: Mapping[str, Any], results: Sequence[str]) -> str:
    """The middle of the range the feedback so far leaves, until a guess is correct."""
    found = _RANGE.search(str(row["prompt"]))
    if found is None:
        raise ValueError(f"problem {row.get('id')!r}: the guessing game's expert needs 'from LOW to HIGH' in it")
    low, high = int(found[1]), int(found[2])
    for result in results:
        said = _FEEDBACK.match(result)
        if said is None:
            raise ValueError(f"problem {row.get('id')!r}: unexpected feedback {result!r}")
        number, verdict = int(said[1]), said[2]
        if verdict == "correct":
            return answer(number)
        low, high = (number + 1, high) if verdict == "too low" else (low, number - 1)
    return format_tool_call("guess", {"number": (low + high) // 2})


EXPERTS: dict[str, Expert] = {"coevo.environments.calculator": calculator, "coevo.environments.guessing": guessing}


def expert_for(factory: str | None, tools: Sequence[str]) -> Expert | None:
    """The expert of the run's environment class (`module:Class`), else of its tools when they all
    come from one module; None where no built-in environment is named."""
    modules = {factory.split(":")[0]} if factory else {path.split(":")[0] for path in tools}
    return EXPERTS.get(modules.pop()) if len(modules) == 1 else None
