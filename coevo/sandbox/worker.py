"""The program's process: the code that runs the untrusted program, inside the sandbox; stdlib only.

The supervisor (supervisor.py) forks this process after reading only the setup half of its stdin
(program, limits) and before reading the nonce and the tests; the child closes stdin and the report
pipe first thing and then runs this source (after wire.py's) with REQUESTS, REPLY, PROGRAM and
PER_TEST_S in its globals. So it never holds the nonce, the report channel or a test. Protocol (one
JSON line each way on its two pipes, values in wire.py's encoding):
1. on start: compile and execute PROGRAM under a CPU timer (ITIMER_PROF: CPU seconds, so load on the
   machine does not change it), then answer {"load": "ok", "names": {name: value}} where each
   top-level name is plain data, a module (["m", name]: the supervisor imports its own copy) or a
   handle (["h", i]: an index into `objects`); or {"load": "invalid"|"error"|"timeout"|"memory"|
   "spoofed", "detail": ...};
2. then requests {"op": "begin"} (arm the per-test CPU timer), {"op": "call"|"get"|"len"|"item"|
   "iter"|"contains"|"str"|"repr"|"bool", "h": i, ...} (each answered {"ok": value, "back": [...]},
   {"raise": name, "detail": ...}, {"timeout": 1}, {"memory": 1} or {"spoofed": reason}) and
   {"op": "end"} (disarm; answered {"ok": null, "admits": a spoof reason or null}); end of the
   request pipe: exit.
A function's or method's return value must be plain data (anything else: "spoofed"); constructors,
attributes and items may come back as handles, which the supervisor can only call or inspect
through this protocol and compares by identity. The self-checks kept from the one-process harness
(guarded builtins, wrapped entry points) can only make a verdict worse: whatever this process
claims, the supervisor evaluates the tests' assertions itself.
"""

WORKER = r'''
import builtins, os, signal, sys, types

_write, _read, _exit = os.write, os.read, os._exit
objects = []  # handles: index -> object the supervisor refers to
_spoofed = []
state = {"in_call": False, "expired": False}


class TestTimeout(BaseException):
    pass


class Spoofed(BaseException):
    pass


def handle(value):
    objects.append(value)
    return len(objects) - 1


def guarded():
    return {
        **{("b", k): id(v) for k, v in vars(builtins).items()},
        ("os", "write"): id(os.write),
        ("os", "_exit"): id(os._exit),
        ("sys", "exit"): id(sys.exit),
        ("signal", "setitimer"): id(signal.setitimer),
        ("AE", "eq"): id(AssertionError.__init__),
    }


def checked(fn):
    def call(*args, **kwargs):
        result = fn(*args, **kwargs)
        try:
            encode(result)
        except NotPlain as exc:
            _spoofed.append("returned %s" % exc)
            raise Spoofed("returned a %s, not plain data" % exc)
        return result
    call.__name__, call.__qualname__, call.__wrapped__ = fn.__name__, fn.__qualname__, fn
    return call


def wrap_entry_points(namespace):
    for name, value in list(namespace.items()):
        if isinstance(value, types.FunctionType) and value.__globals__ is namespace:
            namespace[name] = checked(value)
        elif isinstance(value, types.MethodType) and getattr(value.__func__, "__globals__", None) is namespace:
            namespace[name] = checked(value)
        elif callable(value) and not isinstance(value, type) and type(value).__module__ == "__main__":
            namespace[name] = checked(value)
        elif isinstance(value, type) and value.__module__ == "__main__":
            for attr, member in list(vars(value).items()):
                if isinstance(member, types.FunctionType) and not attr.startswith("__"):
                    setattr(value, attr, checked(member))


def on_cpu_timer(signum, frame):
    state["expired"] = True
    if state["in_call"]:
        raise TestTimeout()


def reply(message):
    for stream in (sys.stdout, sys.stderr):  # the program's output reaches the sample's output before the answer
        try:
            stream.flush()
        except BaseException:
            pass
    data = dumps(message)
    while data:
        data = data[_write(REPLY, data):]


def requests():
    buffer = b""
    while True:
        while b"\n" not in buffer:
            chunk = _read(REQUESTS, 1 << 16)
            if not chunk:
                _exit(0)
            buffer += chunk
        line, buffer = buffer.split(b"\n", 1)
        yield loads(line)


def plain_or_handle(value):
    """Plain data as itself; anything else (a function, an object, a container holding one, a
    cycle) as one handle to the whole value."""
    try:
        return encode(value)
    except Exception:
        return ["h", handle(value)]


def name_of(value):
    if isinstance(value, types.ModuleType):
        return ["m", value.__name__]
    return plain_or_handle(value)


def load(first):
    signal.signal(signal.SIGPROF, on_cpu_timer)
    try:
        code = compile(first["program"], "program.py", "exec")
    except (SyntaxError, ValueError) as exc:
        return {"load": "invalid", "detail": "%s %s" % (type(exc).__name__, detail_of(exc))}
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    before, saved = guarded(), dict(vars(builtins))
    try:
        state["in_call"] = True
        signal.setitimer(signal.ITIMER_PROF, first["per_test_s"])
        exec(code, namespace)
    except TestTimeout:
        return {"load": "timeout", "detail": ""}
    except MemoryError:
        return {"load": "memory", "detail": ""}
    except BaseException as exc:
        return {"load": "error", "detail": "%s %s" % (type(exc).__name__, detail_of(exc))}
    finally:
        state["in_call"] = False
        signal.setitimer(signal.ITIMER_PROF, 0)
    if guarded() != before:
        table = vars(builtins)
        table.clear()
        table.update(saved)  # this process's own encoding needs the real builtins to answer
        return {"load": "spoofed", "detail": "patched builtins or harness functions"}
    wrap_entry_points(namespace)
    globals()["GUARDED"] = before
    return {"load": "ok", "names": {k: name_of(v) for k, v in namespace.items() if not k.startswith("__")}}


def invoke(message):
    """Run one operation on a handle; the result (plain data where the program computed it)."""
    target = objects[message["h"]]
    op = message["op"]
    args = [decode(a, objects.__getitem__) for a in message.get("args", [])]
    if op == "call":
        kwargs = {k: decode(v, objects.__getitem__) for k, v in message.get("kwargs", {}).items()}
        result = target(*args, **kwargs)
        back = [plain_or_handle(a) if type(a) in (list, dict, set) else None for a in args]
        if isinstance(target, type):  # a constructor may hand back an object; a function may not
            return {"ok": plain_or_handle(result), "back": back}
        return {"ok": encode(result), "back": back}
    if op == "get":
        return {"ok": plain_or_handle(getattr(target, args[0]))}
    if op == "item":
        return {"ok": plain_or_handle(target[args[0]])}
    if op == "iter":
        return {"ok": ["l", [plain_or_handle(x) for x in list(target)]]}
    outcome = {"len": len, "contains": lambda t: args[0] in t, "str": str, "repr": repr, "bool": bool}[op](target)
    return {"ok": encode(outcome)}


def detail_of(exc):
    try:
        return str(exc)[:300]
    except BaseException:
        return ""


def serve(message):
    if message["op"] == "begin":
        state["expired"] = False
        signal.setitimer(signal.ITIMER_PROF, PER_TEST_S)
        return None
    if message["op"] == "end":
        signal.setitimer(signal.ITIMER_PROF, 0)
        spoofed = (
            _spoofed[0] if _spoofed else ("patched builtins or harness functions" if guarded() != GUARDED else None)
        )
        return {"ok": ["n"], "admits": spoofed}
    if state["expired"]:
        return {"timeout": 1}
    try:
        state["in_call"] = True
        answer = invoke(message)
    except TestTimeout:
        answer = {"timeout": 1}
    except MemoryError:
        answer = {"memory": 1}
    except Spoofed as exc:
        answer = {"spoofed": str(exc)}
    except NotPlain as exc:
        answer = {"spoofed": "returned a %s, not plain data" % exc}
    except BaseException as exc:
        answer = {"raise": type(exc).__name__, "detail": detail_of(exc)}
    finally:
        state["in_call"] = False
    return {"spoofed": _spoofed[0]} if _spoofed else answer


reply(load({"program": PROGRAM, "per_test_s": PER_TEST_S}))
stream = requests()
for message in stream:
    answer = serve(message)
    if answer is not None:
        reply(answer)
'''
