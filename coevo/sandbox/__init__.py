"""Isolated execution of untrusted generated code: programs plus unit tests, one process per sample.

Generated code comes from a model optimised to get reward, so the sandbox is a security boundary.
`run_jobs` runs many samples in parallel (a thread pool driving one child process each) and returns
one `Verdict` per sample: passed, failed (with the first failing test), timeout, memory, crashed,
invalid (does not compile) or spoofed (it tried to fake a pass), plus the outcome of every test
(the pass-table row CURE needs; a spoofed sample passes none).

Two processes per sample (supervisor.py, worker.py): the supervisor owns the tests, the verdict and
the report pipe with its nonce; the program runs in a second process, forked before the supervisor
reads the nonce and the tests, that closes stdin and the report pipe before the program starts, so
it never holds any of them. The tests run in the supervisor,
where the program's functions, classes and objects are stand-ins: a call carries plain data
(exact int/float/complex/str/bool/None/bytes/list/tuple/dict/set/frozenset, wire.py) both ways and
every assertion is evaluated there on genuine built-in values. So a program that walks its own
interpreter (a function's __closure__, sys._getframe, gc) finds no nonce and no report channel, and
cannot make a failing assertion pass. A function returning anything but plain data is "spoofed"; so
is a program that patches builtins or exits cleanly before the tests are done (tricks and verdicts:
bench/spoof_guards.py). What a test may do with a program's object: call it, read attributes and
items, iterate, len, in, bool, str/repr; `==` between program objects is identity; arguments the
program mutates in place (list, dict, set) are copied back; a test passing a lambda or an object of
its own to the program errors.

How a sample ends is read where it cannot be faked or lost: the supervisor waits on the program's
process (os.wait4), so killed by SIGXCPU, or by SIGKILL having used its CPU limit, is "timeout" however
loaded the machine is, whatever a helper such as `unshare` does with the signal. Per-test timers
count the program's CPU seconds (ITIMER_PROF); only the wall-clock limits (the sample's `wall_s`,
and a per-test backstop of 5x the per-test budget for a program that sleeps) depend on load.

What every mode except "none" does (mode "rlimits", the fallback):
- a new session (process group); on the wall-clock deadline or on output overflow the parent
  SIGKILLs the whole group; per-test CPU timers inside both processes; RLIMIT_CPU (soft = cpu_s,
  hard = cpu_s + 1, so SIGXCPU comes first) on each;
- rlimits: CPU seconds, address space (memory), processes (RLIMIT_NPROC, per user), open files,
  file size, no core dumps;
- stdout+stderr are read up to `output_bytes`; more ends the sample as crashed ("output limit");
- the environment is replaced by PATH and LANG only (no parent variables, no secrets); the
  interpreter runs with -I -S -B (no PYTHON* variables, no site-packages, no user site);
- the working directory is a new empty 0700 temporary directory, removed afterwards.
What "rlimits" does NOT protect: the child runs as the calling user, so it can read and write
every file that user can (outside its directory too), open network sockets, signal the parent and
other processes of the user (as root, or where ptrace is allowed, also read the runner's memory,
where the nonce is too: the verdict guarantee above holds fully only in "namespaces"), and leave
the process group with setsid (such stragglers survive the group kill; RLIMIT_CPU still ends busy
ones). Run as real root, RLIMIT_NPROC does not bind, so a
fork bomb is bounded only by the wall-clock kill.

Mode "namespaces" (chosen by "auto" when a probe passes; see isolation.py and runner.py) adds:
- new network namespace: only a down loopback, no route anywhere (no network);
- new pid namespace: the supervisor is pid 1 (the program's process 2); the parent and every
  other process are invisible and cannot be signalled; when pid 1 dies the kernel kills every
  process in the namespace, so nothing escapes the group kill (setsid included);
- new mount namespace with a private root: a 1 MiB read-only tmpfs holding read-only, nosuid bind
  mounts of /usr, /lib, /lib64, /bin and the interpreter's prefix, plus the working directory at
  /work (the only writable place); chroot into it. The caller's files, /tmp, /home, /root, /etc,
  /proc, /dev and the project are not there to read, write or delete;
- started as real root, it switches to uid/gid 65534 (nobody) after the chroot (no capabilities;
  RLIMIT_NPROC binds); as an unprivileged user it runs in a new user namespace as mapped root,
  which has no more rights over host files than the user;
- a seccomp filter (seccomp.py; libseccomp through pyseccomp, required: without it building this
  mode raises) installed with no_new_privs before the program's process starts: default allow, but
  mount/umount2/pivot_root/chroot/unshare/setns and the new mount API, clone with namespace flags
  (clone3: ENOSYS), ptrace, process_vm_readv/writev, open_by_handle_at, keyctl/add_key/request_key,
  bpf, perf_event_open, userfaultfd, io_uring, kexec, module loading, reboot, swap, personality,
  clock/time setting, acct, quotactl, syslog and socket/socketpair of any family but AF_UNIX answer
  EPERM (the program sees PermissionError; the verdict's detail names it); a syscall through a
  foreign ABI (x32, int 0x80) kills the process (SIGSYS, named in the detail).
What neither mode protects: the test snippets themselves run in the supervisor and are trusted
there (a hostile test, e.g. one the CURE tester wrote, could reach the report pipe and its nonce).
What "namespaces" does NOT protect: kernel exploits through the syscalls the filter still allows
(open, mmap, ioctl, futex, ...: a deny-list, not an allow-list); the shared read-only
system directories stay readable; CPU and memory contention between parallel samples;
RLIMIT_NPROC counts all processes of the sandbox user across parallel samples.
"""

from coevo.sandbox.isolation import Isolation
from coevo.sandbox.runner import STATUSES, Job, Limits, Verdict, isolation_for, namespaces_available, run_job, run_jobs

__all__ = [
    "STATUSES",
    "Isolation",
    "Job",
    "Limits",
    "Verdict",
    "isolation_for",
    "namespaces_available",
    "run_job",
    "run_jobs",
]
