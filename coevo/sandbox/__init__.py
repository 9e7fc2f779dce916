"""Isolated execution of untrusted generated code: programs plus unit tests, one process per sample.

Generated code comes from a model optimised to get reward, so the sandbox is a security boundary.
`run_jobs` runs many samples in parallel (a thread pool driving one child process each) and returns
one `Verdict` per sample: passed, failed (with the first failing test), timeout, memory, crashed,
invalid (does not compile) or spoofed (it tried to fake a pass), plus the outcome of every test
(the pass-table row CURE needs; a spoofed sample passes none).

Spoof guards (harness.py; tricks and verdicts: bench/spoof_guards.py): every function, bound method
or callable instance the program defines is wrapped so each value it returns must be plain data
(exact int/float/complex/str/bool/None/bytes/list/tuple/dict/set/frozenset, recursively) before a
test compares it; builtins and the harness's os.write/os._exit/sys.exit/signal.setitimer are
fingerprinted before the program loads and checked after loading and after every test; the harness
decides each test's outcome itself with references taken before the program ran, and a child that
exits cleanly without the harness's final report line is spoofed (os._exit(0), fake "pass" prints).

What every mode except "none" does (mode "rlimits", the fallback):
- a new session (process group); on the wall-clock deadline or on output overflow the parent
  SIGKILLs the whole group; per-test interval timers inside the harness, RLIMIT_CPU outside it;
- rlimits: CPU seconds, address space (memory), processes (RLIMIT_NPROC, per user), open files,
  file size, no core dumps;
- stdout+stderr are read up to `output_bytes`; more ends the sample as crashed ("output limit");
- the environment is replaced by PATH and LANG only (no parent variables, no secrets); the
  interpreter runs with -I -S -B (no PYTHON* variables, no site-packages, no user site);
- the working directory is a new empty 0700 temporary directory, removed afterwards.
What "rlimits" does NOT protect: the child runs as the calling user, so it can read and write
every file that user can (outside its directory too), open network sockets, signal the parent and
other processes of the user, and leave the process group with setsid (such stragglers survive the
group kill; RLIMIT_CPU still ends busy ones). Run as real root, RLIMIT_NPROC does not bind, so a
fork bomb is bounded only by the wall-clock kill.

Mode "namespaces" (chosen by "auto" when a probe passes; see isolation.py) adds:
- new network namespace: only a down loopback, no route anywhere (no network);
- new pid namespace: the harness is pid 1; the parent and every other process are invisible and
  cannot be signalled; when pid 1 dies the kernel kills every process in the namespace, so nothing
  escapes the group kill (setsid included);
- new mount namespace with a private root: a 1 MiB read-only tmpfs holding read-only, nosuid bind
  mounts of /usr, /lib, /lib64, /bin and the interpreter's prefix, plus the working directory at
  /work (the only writable place); chroot into it. The caller's files, /tmp, /home, /root, /etc,
  /proc, /dev and the project are not there to read, write or delete;
- started as real root, it switches to uid/gid 65534 (nobody) after the chroot (no capabilities;
  RLIMIT_NPROC binds); as an unprivileged user it runs in a new user namespace as mapped root,
  which has no more rights over host files than the user;
- a seccomp filter (seccomp.py; libseccomp through pyseccomp, required: without it building this
  mode raises) installed with no_new_privs right before the program is compiled: default allow, but
  mount/umount2/pivot_root/chroot/unshare/setns and the new mount API, clone with namespace flags
  (clone3: ENOSYS), ptrace, process_vm_readv/writev, open_by_handle_at, keyctl/add_key/request_key,
  bpf, perf_event_open, userfaultfd, io_uring, kexec, module loading, reboot, swap, personality,
  clock/time setting, acct, quotactl, syslog and socket/socketpair of any family but AF_UNIX answer
  EPERM (the program sees PermissionError; the verdict's detail names it); a syscall through a
  foreign ABI (x32, int 0x80) kills the process (SIGSYS, named in the detail).
What "namespaces" does NOT protect: kernel exploits through the syscalls the filter still allows
(open, mmap, ioctl, futex, ...: a deny-list, not an allow-list); the shared read-only
system directories stay readable; CPU and memory contention between parallel samples; the verdict
protocol itself (a program that walks the interpreter -- sys._getframe, gc, the report function's
__closure__ -- can find the report pipe and its nonce and forge "pass" lines; bench/spoof_guards.py
keeps that trick as the documented residual gap: closing it needs the tests run in a process the
program cannot reach); RLIMIT_NPROC counts all processes of the sandbox user across parallel samples.
"""

from coevo.sandbox.isolation import Isolation, isolation_for, namespaces_available
from coevo.sandbox.runner import STATUSES, Job, Limits, Verdict, run_job, run_jobs

__all__ = ["STATUSES", "Isolation", "Job", "Limits", "Verdict", "isolation_for", "namespaces_available", "run_job", "run_jobs"]
