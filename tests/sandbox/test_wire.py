"""The plain-data encoding between the supervisor and the program's process (coevo/sandbox/wire.py):
exact round trips of every plain type, and refusal of anything that is not plain or not well formed."""

from __future__ import annotations

import json
import math

import pytest

from coevo.sandbox.wire import MAX_DEPTH, NotPlain, decode, dumps, encode, loads

VALUES = [
    None, True, False, 0, -7, 2**200, -(3**300), 0.1, -0.0, math.inf, 1e-310, 3 + 4j, "", "naïve \udc80", b"\x00\xff",
    [1, [2, (3,)]], (), {1: "a", (2, 3): [4.5]}, {1, "x", (2,)}, frozenset({1, 2}), {"k": {frozenset(): None}},
]  # fmt: skip


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_plain_values_round_trip_exactly_through_a_json_line(value):
    back = decode(loads(dumps({"ok": encode(value)}).rstrip(b"\n"))["ok"])
    assert back == value and type(back) is type(value)
    assert repr(back) == repr(value)  # -0.0, big ints, nested container types kept


def test_nan_round_trips_as_nan():
    assert math.isnan(decode(encode(math.nan)))


class Fake(int):
    def __eq__(self, other):
        return True


@pytest.mark.parametrize(
    "value", [Fake(1), [Fake(1)], {"k": object()}, (print,)], ids=["int-subclass", "nested", "object", "builtin"]
)
def test_anything_not_plain_is_refused_or_a_handle(value):
    with pytest.raises(NotPlain):
        encode(value)
    kept = []
    node = encode(value, handle=lambda v: kept.append(v) or len(kept) - 1)
    assert kept and "h" in json.dumps(node)


def test_nesting_past_the_limit_is_refused():
    deep: list = []
    for _ in range(MAX_DEPTH + 2):
        deep = [deep]
    with pytest.raises(NotPlain, match="deeper"):
        encode(deep)


@pytest.mark.parametrize(
    "node",
    [
        ["i", 5],
        ["b", 1],
        ["f", 1.0],
        ["x", "1"],
        [],
        "s",
        ["l", "abc"],
        ["d", [[["s", "a"]]]],
        ["S", [["l", []]]],
        ["h", 0],
        ["i", "zz"],
    ],
    ids=str,
)
def test_malformed_encodings_are_refused(node):
    with pytest.raises(NotPlain):
        decode(node)  # no handle factory: a handle is malformed too


def test_malformed_lines_are_refused():
    for line in (b"[1, 2]", b"{not json", b"[" * 100000):
        with pytest.raises(NotPlain):
            loads(line)
