"""Async reward functions called where an event loop is already running, as in a notebook
(coevo/verification/reward_calls.py `call_plugins`): they run together on a loop of their own in a
worker thread, the caller's loop is neither used, blocked for good nor closed, and an async function
that raises is a RewardError naming its entry."""

from __future__ import annotations

import asyncio
import threading

import pytest

from coevo.verification.reward_calls import RewardError, RewardLog, call_plugins
from coevo.verification.rewards import RewardTerm

ARGS = {"completions": ["4", "6"], "prompts": ["2+2=", "2+3="], "answer": ["4", "5"]}


def async_pair(seen: dict):
    """Two async functions that each wait (at most 10 s) for the other to start: both finish only
    when they run together; one after the other, the first times out."""
    started = {"a": asyncio.Event(), "b": asyncio.Event()}  # bound to a loop on first use, not here

    def make(name: str, other: str):
        async def reward(completions, answer, **_):
            seen[name] = (asyncio.get_running_loop(), threading.get_ident())
            started[name].set()
            await asyncio.wait_for(started[other].wait(), timeout=10)
            return [float(c == a) for c, a in zip(completions, answer)]

        return reward

    pairs = (("a", "b"), ("b", "a"))
    return [RewardTerm(f"rewards[{i}].function", name, 1.0, make(name, other)) for i, (name, other) in enumerate(pairs)]


def test_async_rewards_run_together_inside_a_running_event_loop():
    seen: dict = {}

    async def notebook_cell():  # the notebook's own loop is running while the cell calls coevo
        outer = asyncio.get_running_loop()
        returned = call_plugins(async_pair(seen), dict(ARGS), RewardLog(2))
        await asyncio.sleep(0)  # the notebook's loop still runs afterwards
        return outer, returned

    outer, returned = asyncio.run(notebook_cell())
    assert returned == {"a": [1.0, 0.0], "b": [1.0, 0.0]}
    assert all(loop is not outer for loop, _ in seen.values())  # a private loop, not the notebook's
    assert seen["a"][1] != threading.get_ident()  # ... in a worker thread
    assert outer.is_closed()  # closed by asyncio.run, its owner, not by coevo earlier


def test_async_rewards_without_a_running_loop_use_a_private_one():
    seen: dict = {}
    assert call_plugins(async_pair(seen), dict(ARGS), RewardLog(2)) == {"a": [1.0, 0.0], "b": [1.0, 0.0]}
    assert seen["a"][1] == threading.get_ident()  # no loop to avoid: the caller's thread


def test_an_async_reward_that_raises_inside_a_running_loop_names_its_entry():
    async def broken(**_):
        raise ZeroDivisionError("division by zero")

    async def notebook_cell():
        call_plugins([RewardTerm("rewards[3].function 'mine:broken'", "broken", 1.0, broken)], dict(ARGS), RewardLog(2))

    with pytest.raises(RewardError, match=r"rewards\[3\]\.function 'mine:broken' \(async\) raised ZeroDivisionError"):
        asyncio.run(notebook_cell())
