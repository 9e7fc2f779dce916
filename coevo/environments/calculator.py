"""A calculator: stateless tools for the arithmetic families, written as TRL's `tools=[...]` are.

    tools: [coevo.environments.calculator:add, coevo.environments.calculator:subtract,
            coevo.environments.calculator:multiply]

Integers only: the arithmetic families' operands are integers, and an exact integer result is what
their verifier compares.
"""

from __future__ import annotations

TOOLS = [f"{__name__}:{name}" for name in ("add", "subtract", "multiply")]  # the three, as `tools:` names them


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first integer.
        b: The second integer.

    Returns:
        The sum a + b.
    """
    return a + b


def subtract(a: int, b: int) -> int:
    """Subtract one integer from another.

    Args:
        a: The integer to subtract from.
        b: The integer to subtract.

    Returns:
        The difference a - b.
    """
    return a - b


def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: The first factor.
        b: The second factor.

    Returns:
        The product a * b.
    """
    return a * b
