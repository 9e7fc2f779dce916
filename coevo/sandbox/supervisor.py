"""The supervisor: the code that runs INSIDE the sandbox as its first process (`python -I -S -B -c
BOOT` reads it, compiled with wire.py's source in front, from stdin); stdlib only. It owns the
tests, the verdict and the report channel; the program runs in a second process it starts
(worker.py) and never sees them.

Protocol: after the supervisor's own code, the parent writes to stdin a 10-digit length, the setup
half {program, per_test_s, limits, confine, report_fd, seccomp, worker}, then the secret half
{nonce, tests}; the supervisor
1. reads the setup half only and confines itself when `confine` says so (namespaces mode): a private
   tmpfs root holding read-only bind mounts of the system directories Python needs plus the private
   working directory at /work, chroot into it, and, when it was started as real root, drops to
   uid/gid 65534 (nobody);
2. applies the resource limits (RLIMIT_CPU soft = cpu_s, hard = cpu_s + 1, so SIGXCPU comes first;
   address space, processes, open files, file size) and, when `seccomp` holds a compiled filter
   (namespaces mode; coevo/sandbox/seccomp.py), installs it with no_new_privs; both are inherited
   by the program's process; it makes itself non-dumpable (no ptrace or /proc/<pid>/mem by its user);
3. forks the program's process (worker.py), which closes stdin and the report pipe before anything
   else, holding only a request pipe, a reply pipe and the sample's output; only then reads the
   secret half (nonce, tests), which therefore never exists in the program's memory; the program's
   load answer becomes "invalid", "load-error", "load-timeout", "load-memory" or its top-level names;
4. runs each test snippet HERE, in its own namespace where the program's plain values are copies
   and its functions, classes and objects are `Remote` stand-ins: a call sends plain-data
   arguments and gets plain data back (wire.py), so every assertion is evaluated by this
   interpreter on genuine built-in values; reports one line per test on the report pipe,
   "<nonce> test <i> <pass|fail|error|timeout|memory|spoofed|crashed> <detail>", then "done";
5. when the program's process ends, reads its exit signal and accounted CPU time (os.wait4): killed
   by SIGXCPU, or by SIGKILL having used its CPU limit, is "timeout", however loaded the machine is.
The nonce keeps the supervisor's lines apart from the output; the program cannot forge them: it
never holds the nonce or the report pipe, and the supervisor trusts nothing it says but plain values.
"""

import functools
import marshal
from pathlib import Path

from coevo.sandbox import wire
from coevo.sandbox.worker import WORKER as _WORKER

WIRE = Path(wire.__file__).read_text()  # the encoding, defined once, executed on both sides of the boundary
WORKER_SOURCE = WIRE + _WORKER  # what the program's process runs

# What `python -c` runs: it reads a length-prefixed marshalled code object (the supervisor, compiled
# once by the parent, same interpreter) from stdin and runs it; compiling ~20 kB of source in every
# sample would cost more than the sample's own work.
BOOT = r"""import marshal, os


def read_exactly(n):
    data = b""
    while len(data) < n:
        chunk = os.read(0, n - len(data))
        if not chunk:
            raise EOFError("the payload was cut short")
        data += chunk
    return data


exec(marshal.loads(read_exactly(int(read_exactly(10)))))
"""


@functools.cache
def compiled() -> tuple[bytes, str]:
    """(the supervisor's code, marshalled; the program's process's code, marshalled as hex)."""
    return marshal.dumps(compile(HARNESS, "harness", "exec")), marshal.dumps(
        compile(WORKER_SOURCE, "worker", "exec")
    ).hex()


HARNESS = (
    WIRE
    + r'''
import builtins, json, marshal, os, resource, signal, sys, time


def read_secret():
    """The second half of stdin (nonce, tests), read once the program's process exists without fd 0."""
    chunks = []
    while True:
        chunk = os.read(0, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(0)
    return json.loads(b"".join(chunks))


cfg = json.loads(read_exactly(int(read_exactly(10))))  # the setup half only: no nonce, no tests yet


def reporter(nonce, fd, write):
    """report(*parts): one line on the report pipe; the nonce lives only in this closure, in this process."""
    def report(*parts):
        write(fd, (" ".join([nonce] + [str(p).replace("\n", " ")[:300] for p in parts]) + "\n").encode())
    return report



def confine(c):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    RDONLY, NOSUID, NODEV, REMOUNT, BIND, REC = 1, 2, 4, 32, 4096, 16384

    def mount(src, dst, fstype, flags, data=None):
        if (
            libc.mount(src and src.encode(), dst.encode(), fstype and fstype.encode(), flags, data and data.encode())
            != 0
        ):
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
    if (
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
        or libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0
    ):
        raise OSError(ctypes.get_errno(), "seccomp filter not installed")


class TestTimeout(BaseException):
    pass


class Spoofed(BaseException):
    pass


class WorkerGone(BaseException):
    """The program's process ended (or was ended); .outcome: (verdict, detail)."""


WALL_FACTOR = 5  # wall-clock backstop per test, in per-test CPU budgets (for a program that sleeps)
CPU_SLACK_S = 0.1  # rusage samples CPU time at tick granularity
SIGNALS = {
    signal.SIGXCPU: "SIGXCPU",
    signal.SIGKILL: "SIGKILL",
    signal.SIGSEGV: "SIGSEGV",
    signal.SIGSYS: "SIGSYS",
    signal.SIGABRT: "SIGABRT",
}
_spoofed = []


class Worker:
    """The program's process, seen from the supervisor: requests out, plain answers in."""

    def __init__(self, source, cpu_s, program, per_test_s):
        code = marshal.loads(bytes.fromhex(source))
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the program's process: nothing secret was read yet; drop stdin and the report pipe first
            try:
                for fd in (0, cfg["report_fd"], req_w, rep_r):
                    os.close(fd)
                exec(
                    code,
                    {
                        "__name__": "__worker__",
                        "REQUESTS": req_r,
                        "REPLY": rep_w,
                        "PROGRAM": program,
                        "PER_TEST_S": per_test_s,
                    },
                )
            except BaseException:
                import traceback
                traceback.print_exc()
            os._exit(1)
        os.close(req_r)
        os.close(rep_w)
        self.pid, self.requests, self.replies, self.buffer, self.cpu_s = pid, req_w, rep_r, b"", cpu_s
        self.ended, self.killed, self.deadline = None, False, None

    def send(self, message):
        if self.ended is not None:
            raise WorkerGone(self.ended)
        data = dumps(message)
        try:
            while data:
                data = data[os.write(self.requests, data):]
        except OSError:
            raise WorkerGone(self.finish()) from None

    def receive(self):
        """The next answer; WorkerGone when the process ends or passes the wall backstop first."""
        import select
        while b"\n" not in self.buffer:
            if self.ended is not None:
                raise WorkerGone(self.ended)
            left = self.deadline - time.monotonic()
            if left <= 0 or not select.select([self.replies], [], [], left)[0]:
                self.killed = True
                raise WorkerGone(self.finish())
            chunk = os.read(self.replies, 1 << 20)
            if not chunk or len(self.buffer) > 64 << 20:
                raise WorkerGone(self.finish())
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return loads(line)

    def finish(self):
        """End the process (if it still runs) and classify how it ended, from its signal and CPU time."""
        if self.ended is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except OSError:
                pass
            _, status, usage = os.wait4(self.pid, 0)
            self.ended = ended_as(status, usage.ru_utime + usage.ru_stime, self.cpu_s, self.killed)
        return self.ended

    def ask(self, message):
        self.send(message)
        answer = self.receive()
        if "ok" in answer:
            return answer
        if "timeout" in answer:
            raise TestTimeout()
        if "memory" in answer:
            raise MemoryError()
        if "spoofed" in answer:
            _spoofed.append(str(answer["spoofed"])[:200])
            raise Spoofed()
        if "raise" in answer:
            raise program_error(answer)
        raise NotPlain("malformed answer")


def ended_as(status, cpu, cpu_s, killed):
    """(verdict, detail) of a program's process that ended: timeout at its CPU limit, whatever the load."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        name = SIGNALS.get(sig, "signal %d" % sig)
        # The kernel sends SIGXCPU only at the soft RLIMIT_CPU, yet the CPU time wait4 accounts was seen
        # under the limit by more than the slack on a loaded machine (1 run in 10 beside two busy loops);
        # a program that sends it to itself gains nothing, a timeout fails like a crash. SIGKILL also comes
        # from elsewhere (the memory killer), so it is the hard limit only with the CPU time to show it.
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu >= cpu_s - CPU_SLACK_S):
            return ("timeout", "cpu limit: %s after %.2fs CPU" % (name, cpu))
        if killed:
            return ("timeout", "no answer within the wall-clock backstop (%.2fs CPU)" % cpu)
        if sig == signal.SIGSYS:
            return ("crashed", "SIGSYS: the seccomp filter killed it (a syscall through a foreign ABI)")
        return ("crashed", "killed by %s after %.2fs CPU" % (name, cpu))
    code = os.WEXITSTATUS(status)
    if code == 0:
        return ("spoofed", "exited cleanly before the harness finished its tests")
    return ("crashed", "exited with %d" % code)


def program_error(answer):
    """The exception a program's call raised, as a built-in exception of the same name where one exists."""
    name, detail = str(answer.get("raise")), str(answer.get("detail", ""))[:300]
    kind = getattr(builtins, name, None)
    if isinstance(kind, type) and issubclass(kind, Exception):
        try:
            return kind(detail)
        except Exception:
            pass
    return ProgramError("%s: %s" % (name, detail))


class ProgramError(Exception):
    pass


def local_handle(value):
    return object.__getattribute__(value, "_h") if type(value) is Remote else None


def _copy_back(args, back):
    """Arguments the program mutated in place (list, dict, set) get their new contents here too."""
    for arg, node in zip(args, back if type(back) is list else []):
        if node is None or type(arg) not in (list, dict, set):
            continue
        new = decode(node, Remote)
        if type(new) is not type(arg):
            continue
        if type(arg) is list:
            arg[:] = new
        else:
            arg.clear()
            arg.update(new)


class Remote:
    """A stand-in for an object in the program's process: it can be called and inspected, never
    trusted to compare equal (identity only)."""

    __slots__ = ("_h",)

    def __init__(self, ref):
        object.__setattr__(self, "_h", ref)

    def _ask(self, op, *args):
        message = {"op": op, "h": object.__getattribute__(self, "_h"), "args": [encode(a, local_handle) for a in args]}
        return decode(WORKER.ask(message)["ok"], Remote)

    def __call__(self, *args, **kwargs):
        message = {
            "op": "call",
            "h": object.__getattribute__(self, "_h"),
            "args": [encode(a, local_handle) for a in args],
            "kwargs": {str(k): encode(v, local_handle) for k, v in kwargs.items()},
        }
        answer = WORKER.ask(message)
        _copy_back(args, answer.get("back"))
        return decode(answer["ok"], Remote)

    def __getattr__(self, name):
        return self._ask("get", name)

    def __setattr__(self, name, value):
        raise TypeError("objects of the program cannot be changed from a test")

    def __len__(self):
        return self._ask("len")

    def __getitem__(self, key):
        return self._ask("item", key)

    def __iter__(self):
        return iter(self._ask("iter"))

    def __contains__(self, item):
        return self._ask("contains", item)

    def __bool__(self):
        return self._ask("bool")

    def __str__(self):
        return self._ask("str")

    def __repr__(self):
        return self._ask("repr")

    __hash__ = object.__hash__
    __eq__ = object.__eq__


def on_cpu_timer(signum, frame):
    raise TestTimeout()


def namespace_of(names):
    """The tests' namespace: the program's top-level names as copies, stand-ins or stdlib modules."""
    import importlib
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    for name, node in (names.items() if type(names) is dict else ()):
        if name.startswith("__"):
            continue
        if type(node) is list and len(node) == 2 and node[0] == "m" and type(node[1]) is str:
            if node[1].split(".")[0] in sys.stdlib_module_names:
                try:
                    namespace[name] = importlib.import_module(node[1])
                except Exception:
                    pass
            continue
        namespace[name] = decode(node, Remote)
    return namespace


def load(per_test_s):
    """Send the program; its namespace, or None after reporting why it did not load."""
    WORKER.deadline = time.monotonic() + WALL_FACTOR * per_test_s + 2
    try:
        answer = WORKER.receive()
        if answer.get("load") == "ok":
            return namespace_of(answer.get("names"))
        kind = {"invalid": "invalid", "timeout": "load-timeout", "memory": "load-memory", "spoofed": "spoofed"}.get(
            answer.get("load"), "load-error"
        )
        report(kind, str(answer.get("detail", ""))[:300])
    except WorkerGone as gone:
        verdict, detail = gone.args[0]
        kind = {"timeout": "load-timeout", "spoofed": "spoofed"}.get(verdict, "load-error")
        report(kind, "the program's process ended while loading: %s" % detail)
    except (NotPlain, TestTimeout, MemoryError) as exc:
        report("load-error", "malformed answer: %s" % type(exc).__name__)
    return None


def run_test(i, test, namespace, per_test_s):
    """(outcome, detail) of one test snippet, decided here."""
    try:
        code = compile(test, "test_%d.py" % i, "exec")
    except (SyntaxError, ValueError) as exc:
        return ("invalid", type(exc).__name__)
    WORKER.deadline = time.monotonic() + WALL_FACTOR * per_test_s + 1
    try:
        WORKER.send({"op": "begin"})
        signal.setitimer(signal.ITIMER_PROF, per_test_s)
        exec(code, namespace)
        outcome = ("pass", "")
    except TestTimeout:
        outcome = ("timeout", "")
    except WorkerGone as gone:
        outcome = gone.args[0]
    except MemoryError:
        outcome = ("memory", "")
    except Spoofed:
        outcome = ("spoofed", "")
    except AssertionError:
        outcome = ("fail", "")
    except BaseException as exc:
        outcome = ("error", type(exc).__name__)
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
    return settle(outcome)


def settle(outcome):
    """The outcome once the program's process has had its say: its end, or a spoof it admits."""
    if WORKER.ended is not None:
        return WORKER.ended  # a swallowed WorkerGone still ends the test as the process ended
    try:
        admitted = WORKER.ask({"op": "end"}).get("admits")
    except WorkerGone as gone:
        return gone.args[0]
    except BaseException:
        admitted = None
    if _spoofed or admitted:
        return ("spoofed", (_spoofed or [str(admitted)])[0])
    return outcome


try:
    if cfg["confine"]:
        confine(cfg["confine"])
    lim = cfg["limits"] or {}
    for name, value in () if not lim else (
        ("RLIMIT_CPU", lim["cpu_s"]),
        ("RLIMIT_AS", lim["memory_bytes"]),
        ("RLIMIT_NPROC", lim["nproc"]),
        ("RLIMIT_NOFILE", lim["nofile"]),
        ("RLIMIT_FSIZE", lim["fsize_bytes"]),
        ("RLIMIT_CORE", 0),
    ):
        resource.setrlimit(getattr(resource, name), (value, value + 1 if name == "RLIMIT_CPU" else value))
    if cfg["seccomp"]:
        install_seccomp(bytes.fromhex(cfg["seccomp"]))
    import ctypes
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: the program's user cannot ptrace or read this process
    WORKER = Worker(cfg["worker"], lim.get("cpu_s", float("inf")), cfg["program"], cfg["per_test_s"])
    failed = None
except Exception as exc:
    failed = exc
secret = read_secret()
report = reporter(secret.pop("nonce"), cfg["report_fd"], os.write)
if failed is not None:
    report("setup", type(failed).__name__, failed)
    sys.exit(3)

report("ready")
signal.signal(signal.SIGPROF, on_cpu_timer)
namespace = load(cfg["per_test_s"])
if namespace is not None:
    for i, test in enumerate(secret["tests"]):
        outcome = run_test(i, test, namespace, cfg["per_test_s"])
        report("test", i, *outcome)
        if outcome[0] == "spoofed":
            break
        if WORKER.ended is not None:  # the program's process is gone: the remaining tests are not run
            report("done")
            break
    else:
        report("done")
WORKER.finish()
try:
    sys.stdout.flush()
finally:
    os._exit(0)
'''
)
