"""Plain data across the sandbox's process boundary: the one encoding the supervisor and the program's
process speak (stdlib only; this file's source is also sent into the sandbox, see supervisor.py).

A value is encoded as a tagged JSON list and decoded into exact built-in types only (int, float,
complex, str, bool, None, bytes, list, tuple, dict, set, frozenset, nested at most MAX_DEPTH deep),
so whatever a program sends, the supervisor compares genuine built-in values with its own `==`.
Anything else is either a handle (an index into the sender's table of objects, when the caller
allows handles) or refused with NotPlain naming the type. Ints and floats travel as hex (exact, no
digit limit, nan/inf included).
"""

import json

MAX_DEPTH = 50
_SEQUENCES = {list: "l", tuple: "t", set: "S", frozenset: "F"}
_BUILD = {"l": list, "t": tuple, "S": set, "F": frozenset}


class NotPlain(Exception):
    """A value that is not plain data (and no handle was allowed), or a malformed encoding."""


def encode(value, handle=None, depth=0):
    """The tagged form of `value`; `handle(value)` -> int or None makes handles of non-plain values."""
    kind = type(value)
    if depth > MAX_DEPTH:
        raise NotPlain("nested deeper than %d" % MAX_DEPTH)
    if value is None:
        return ["n"]
    if kind is bool:
        return ["b", value]
    if kind is int:
        return ["i", hex(value)]
    if kind is float:
        return ["f", value.hex()]
    if kind is complex:
        return ["c", value.real.hex(), value.imag.hex()]
    if kind is str:
        return ["s", value]
    if kind is bytes:
        return ["y", value.hex()]
    if kind in _SEQUENCES:
        return [_SEQUENCES[kind], [encode(item, handle, depth + 1) for item in value]]
    if kind is dict:
        return ["d", [[encode(k, handle, depth + 1), encode(v, handle, depth + 1)] for k, v in value.items()]]
    ref = handle(value) if handle is not None else None
    if ref is None:
        raise NotPlain(kind.__name__)
    return ["h", ref]


def decode(node, handle=None, depth=0):
    """The value of a tagged form; `handle(int)` builds the receiver's stand-in for a handle."""
    if depth > MAX_DEPTH or type(node) is not list or not node or type(node[0]) is not str:
        raise NotPlain("malformed value")
    tag, args = node[0], node[1:]
    try:
        if tag == "n" and not args:
            return None
        if tag == "b" and type(args[0]) is bool:
            return args[0]
        if tag == "i" and type(args[0]) is str:
            return int(args[0], 16)
        if tag == "f" and type(args[0]) is str:
            return float.fromhex(args[0])
        if tag == "c" and type(args[0]) is str and type(args[1]) is str:
            return complex(float.fromhex(args[0]), float.fromhex(args[1]))
        if tag in ("s", "y") and type(args[0]) is str:
            return args[0] if tag == "s" else bytes.fromhex(args[0])
        if tag in _BUILD and type(args[0]) is list:
            return _BUILD[tag](decode(item, handle, depth + 1) for item in args[0])
        if tag == "d" and type(args[0]) is list:
            return {decode(k, handle, depth + 1): decode(v, handle, depth + 1) for k, v in (_pair(p) for p in args[0])}
        if tag == "h" and type(args[0]) is int and handle is not None:
            return handle(args[0])
    except (IndexError, ValueError, TypeError, OverflowError) as exc:
        raise NotPlain("malformed %r value: %s" % (tag, exc)) from None
    raise NotPlain("malformed %r value" % tag)


def _pair(item):
    if type(item) is not list or len(item) != 2:
        raise NotPlain("malformed dict item")
    return item


def dumps(message):
    """One protocol line (bytes, newline-terminated) from a JSON-able message."""
    return (json.dumps(message, separators=(",", ":")) + "\n").encode()


def loads(line):
    """The message of one protocol line; NotPlain when it is not a JSON object."""
    try:
        message = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise NotPlain("malformed line: %s" % exc) from None
    if type(message) is not dict:
        raise NotPlain("malformed line: not an object")
    return message
