"""The code that runs INSIDE the sandboxed process (passed to `python -I -S -B -c`); stdlib only.

Protocol: the parent writes one JSON object to stdin {nonce, program, tests, per_test_s, limits,
confine, report_fd, seccomp}; the harness reads it and closes stdin, then
1. confines itself when `confine` says so (namespaces mode): a private tmpfs root holding read-only
   bind mounts of the system directories Python needs plus the private working directory at /work,
   chroot into it, and, when it was started as real root, drops to uid/gid 65534 (nobody);
2. applies the resource limits (CPU, address space, processes, open files, file size) and, when
   `seccomp` holds a compiled filter (namespaces mode; coevo/sandbox/seccomp.py), installs it with
   no_new_privs: from here on the refused syscalls answer EPERM to the program and to the harness;
3. compiles and executes the program (SyntaxError -> "invalid"; an exception -> "load-error");
4. wraps every function, bound method and callable instance the program defined so each value it
   returns must be plain data (exact built-in types, recursively) and fingerprints builtins and
   its own os/sys/signal entry points (a change after loading or after a test: "spoofed");
5. runs each test snippet in the program's namespace under a per-test interval timer, deciding the
   outcome itself with references taken before the program ran, and reports one line per test on
   the report pipe: "<nonce> test <i> <pass|fail|error|timeout|memory|spoofed> <detail>", then "done".
The nonce keeps the program's own prints off the report channel; it does not stop a program that
inspects this interpreter's memory from forging lines (see coevo/sandbox/__init__.py).
"""

HARNESS = r'''
import json, os, resource, signal, sys

cfg = json.loads(sys.stdin.read())
sys.stdin.close()


def reporter(nonce, fd, write):
    """report(*parts): one line on the report pipe; the nonce lives only in this closure."""
    def report(*parts):
        write(fd, (" ".join([nonce] + [str(p).replace("\n", " ")[:300] for p in parts]) + "\n").encode())
    return report


report = reporter(cfg.pop("nonce"), cfg["report_fd"], os.write)


def confine(c):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    RDONLY, NOSUID, NODEV, REMOUNT, BIND, REC = 1, 2, 4, 32, 4096, 16384

    def mount(src, dst, fstype, flags, data=None):
        if libc.mount(src and src.encode(), dst.encode(), fstype and fstype.encode(), flags, data and data.encode()) != 0:
            raise OSError(ctypes.get_errno(), "mount " + dst)

    root = c["root"]
    mount("tmpfs", root, "tmpfs", NOSUID | NODEV, "size=1m,mode=755")
    binds = []
    for path in c["ro_binds"]:
        if not os.path.exists(path):
            continue
        target = root + path
        if os.path.isdir(path):
            os.makedirs(target, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            open(target, "w").close()
        mount(path, target, None, BIND | REC)
        binds.append(target)
    os.makedirs(root + "/work")
    mount(c["work"], root + "/work", None, BIND)
    for target in binds:  # keep flags the kernel locks (nodev, noexec) when inside a user namespace
        kept = os.statvfs(target).f_flag & (NODEV | 8)
        mount(None, target, None, REMOUNT | BIND | RDONLY | NOSUID | kept)
    mount(None, root, None, REMOUNT | RDONLY | NOSUID | NODEV, "size=1m,mode=755")
    os.chroot(root)
    os.chdir("/work")
    if c["drop_to"] is not None:
        os.setgroups([])
        os.setgid(c["drop_to"])
        os.setuid(c["drop_to"])


def install_seccomp(bpf):
    """Load the parent's compiled filter (struct sock_filter[]) for this process and its children, for good."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    code = ctypes.create_string_buffer(bpf, len(bpf))
    prog = Fprog(len(bpf) // 8, ctypes.addressof(code))
    PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "seccomp filter not installed")


class TestTimeout(BaseException):
    pass


class Spoofed(BaseException):
    pass


import builtins, types
_write, _AssertionError, _exit, _setitimer = os.write, AssertionError, os._exit, signal.setitimer
PLAIN = (int, float, complex, str, bool, type(None), bytes, list, tuple, dict, set, frozenset)
_spoofed = []  # reasons; any entry makes the sample "spoofed", whatever the program catches


def guarded():
    """What a program could patch to fake a pass: builtins, the exceptions, os/sys/signal entry points."""
    return {**{("b", k): id(v) for k, v in vars(builtins).items()}, ("os", "write"): id(os.write), ("os", "_exit"): id(os._exit),
            ("sys", "exit"): id(sys.exit), ("signal", "setitimer"): id(signal.setitimer), ("AE", "eq"): id(AssertionError.__init__)}


def check_plain(value, depth=0):
    """Raise Spoofed unless value is plain data: exact built-in types, recursively (bounded)."""
    if type(value) not in PLAIN or depth > 50:
        _spoofed.append("returned %s" % type(value).__name__)
        raise Spoofed("returned a %s, not plain data" % type(value).__name__)
    if type(value) in (list, tuple, set, frozenset):
        for item in value:
            check_plain(item, depth + 1)
    elif type(value) is dict:
        for k, v in value.items():
            check_plain(k, depth + 1)
            check_plain(v, depth + 1)


def checked(fn):
    def call(*args, **kwargs):
        result = fn(*args, **kwargs)
        check_plain(result)
        return result
    call.__name__, call.__qualname__, call.__wrapped__ = fn.__name__, fn.__qualname__, fn
    return call


def wrap_entry_points(namespace):
    """Every function the program defined (top level, and methods of its classes) returns checked values."""
    for name, value in list(namespace.items()):
        if isinstance(value, types.FunctionType) and value.__globals__ is namespace:
            namespace[name] = checked(value)
        elif isinstance(value, types.MethodType) and getattr(value.__func__, "__globals__", None) is namespace:
            namespace[name] = checked(value)  # a bound method taken before its class was wrapped
        elif callable(value) and not isinstance(value, type) and type(value).__module__ == "__main__":
            namespace[name] = checked(value)  # an instance with __call__
        elif isinstance(value, type) and value.__module__ == "__main__":
            for attr, member in list(vars(value).items()):
                if isinstance(member, types.FunctionType) and not attr.startswith("__"):
                    setattr(value, attr, checked(member))


def on_alarm(signum, frame):
    raise TestTimeout()


try:
    if cfg["confine"]:
        confine(cfg["confine"])
    lim = cfg["limits"] or {}
    for name, value in () if not lim else (("RLIMIT_CPU", lim["cpu_s"]), ("RLIMIT_AS", lim["memory_bytes"]), ("RLIMIT_NPROC", lim["nproc"]),
                        ("RLIMIT_NOFILE", lim["nofile"]), ("RLIMIT_FSIZE", lim["fsize_bytes"]), ("RLIMIT_CORE", 0)):
        resource.setrlimit(getattr(resource, name), (value, value))
    if cfg["seccomp"]:
        install_seccomp(bytes.fromhex(cfg["seccomp"]))
except Exception as exc:
    report("setup", type(exc).__name__, exc)
    sys.exit(3)

report("ready")
try:
    code = compile(cfg["program"], "program.py", "exec")
except (SyntaxError, ValueError) as exc:
    report("invalid", type(exc).__name__, exc)
    sys.exit(0)
signal.signal(signal.SIGALRM, on_alarm)
namespace = {"__name__": "__main__", "__builtins__": __builtins__}
GUARDED = guarded()
try:
    signal.setitimer(signal.ITIMER_REAL, cfg["per_test_s"])
    exec(code, namespace)
    signal.setitimer(signal.ITIMER_REAL, 0)
except TestTimeout:
    report("load-timeout")
    sys.exit(0)
except MemoryError:
    report("load-memory")
    sys.exit(0)
except BaseException as exc:
    signal.setitimer(signal.ITIMER_REAL, 0)
    report("load-error", type(exc).__name__, exc)
    sys.exit(0)
if guarded() != GUARDED:
    report("spoofed", "load", "patched builtins or harness functions")
    _exit(0)
wrap_entry_points(namespace)
for i, test in enumerate(cfg["tests"]):
    try:
        test_code = compile(test, "test_%d.py" % i, "exec")
    except (SyntaxError, ValueError) as exc:
        report("test", i, "invalid", type(exc).__name__)
        continue
    try:
        _setitimer(signal.ITIMER_REAL, cfg["per_test_s"])
        exec(test_code, namespace)
        _setitimer(signal.ITIMER_REAL, 0)
        outcome = ("pass", "")
    except TestTimeout:
        outcome = ("timeout", "")
    except MemoryError:
        _setitimer(signal.ITIMER_REAL, 0)
        outcome = ("memory", "")
    except Spoofed as exc:
        _setitimer(signal.ITIMER_REAL, 0)
        outcome = ("spoofed", "returned non-plain data")
    except _AssertionError as exc:
        _setitimer(signal.ITIMER_REAL, 0)
        outcome = ("fail", "")
    except BaseException as exc:
        _setitimer(signal.ITIMER_REAL, 0)
        outcome = ("error", type(exc).__name__)
    if _spoofed or guarded() != GUARDED:  # the harness decides; a swallowed Spoofed still counts
        outcome = ("spoofed", (_spoofed or ["patched builtins or harness functions"])[0])
    report("test", i, *outcome)
    if outcome[0] == "spoofed":
        _exit(0)
report("done")
try:
    sys.stdout.flush()
finally:
    _exit(0)
'''
