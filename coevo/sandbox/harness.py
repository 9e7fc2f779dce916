"""The code that runs INSIDE the sandboxed process (passed to `python -I -S -B -c`); stdlib only.

Protocol: the parent writes one JSON object to stdin {nonce, program, tests, per_test_s, limits,
confine, report_fd}; the harness reads it and closes stdin, then
1. confines itself when `confine` says so (namespaces mode): a private tmpfs root holding read-only
   bind mounts of the system directories Python needs plus the private working directory at /work,
   chroot into it, and, when it was started as real root, drops to uid/gid 65534 (nobody);
2. applies the resource limits (CPU, address space, processes, open files, file size);
3. compiles and executes the program (SyntaxError -> "invalid"; an exception -> "load-error");
4. runs each test snippet in the program's namespace under a per-test interval timer, reporting one
   line per test on the report pipe: "<nonce> test <i> <pass|fail|error|timeout|memory> <detail>".
The nonce keeps the program's own prints off the report channel; it does not stop a program that
inspects this interpreter's memory from forging lines (see coevo/sandbox/__init__.py).
"""

HARNESS = r'''
import json, os, resource, signal, sys

cfg = json.loads(sys.stdin.read())
sys.stdin.close()
NONCE, REPORT = cfg["nonce"], cfg["report_fd"]


def report(*parts):
    os.write(REPORT, (" ".join([NONCE] + [str(p).replace("\n", " ")[:300] for p in parts]) + "\n").encode())


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


class TestTimeout(BaseException):
    pass


def on_alarm(signum, frame):
    raise TestTimeout()


try:
    if cfg["confine"]:
        confine(cfg["confine"])
    lim = cfg["limits"] or {}
    for name, value in () if not lim else (("RLIMIT_CPU", lim["cpu_s"]), ("RLIMIT_AS", lim["memory_bytes"]), ("RLIMIT_NPROC", lim["nproc"]),
                        ("RLIMIT_NOFILE", lim["nofile"]), ("RLIMIT_FSIZE", lim["fsize_bytes"]), ("RLIMIT_CORE", 0)):
        resource.setrlimit(getattr(resource, name), (value, value))
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
for i, test in enumerate(cfg["tests"]):
    try:
        test_code = compile(test, "test_%d.py" % i, "exec")
    except (SyntaxError, ValueError) as exc:
        report("test", i, "invalid", type(exc).__name__)
        continue
    try:
        signal.setitimer(signal.ITIMER_REAL, cfg["per_test_s"])
        exec(test_code, namespace)
        signal.setitimer(signal.ITIMER_REAL, 0)
        report("test", i, "pass", "")
    except TestTimeout:
        report("test", i, "timeout", "")
    except MemoryError:
        signal.setitimer(signal.ITIMER_REAL, 0)
        report("test", i, "memory", "")
    except AssertionError as exc:
        signal.setitimer(signal.ITIMER_REAL, 0)
        report("test", i, "fail", exc)
    except BaseException as exc:
        signal.setitimer(signal.ITIMER_REAL, 0)
        report("test", i, "error", type(exc).__name__, exc)
report("done")
sys.stdout.flush()
os._exit(0)
'''
