"""The seccomp filter of the namespaces mode: a deny-list compiled by libseccomp (pyseccomp), loaded by the harness.

Source: seccomp(2) / libseccomp's seccomp_rule_add(3); the list follows the kernel surface Docker's
default profile and systemd's @mount/@privileged/@obsolete groups refuse, cut to what a test
program never needs. Departures: default ALLOW (an allow-list breaks CPython in subtle ways: each
release, libc and C extension adds syscalls), and every refusal is EPERM rather than a kill, so the
program sees a PermissionError and the verdict's detail names it ("crashed ... PermissionError").

The parent compiles the filter once (libseccomp resolves the names for this machine's
architecture) and exports it as raw classic BPF; the harness, which runs stdlib only (`-I -S`, no
site-packages), installs those bytes with prctl(PR_SET_NO_NEW_PRIVS) + prctl(PR_SET_SECCOMP) right
before it compiles the program (supervisor.py). A syscall made through another ABI than the native one
(int 0x80 on x86_64) hits libseccomp's bad-architecture action, which kills the process.
What it does NOT do: the allowed remainder is still the whole rest of the kernel (open, mmap,
ioctl, ...); on s390 clone's flags are its second argument, which the clone rule does not check.
"""

from __future__ import annotations

import errno
import functools
import tempfile

DENIED = (
    # mounts, namespaces, roots: the sandbox's walls themselves
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
    "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
    # other processes' memory and state
    "ptrace", "process_vm_readv", "process_vm_writev", "open_by_handle_at",
    # kernel subsystems with a long exploit record and no use in a test program
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    # the machine itself
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot",
    "swapon", "swapoff", "personality", "clock_settime", "clock_adjtime", "settimeofday",
    "acct", "quotactl", "syslog",
)  # fmt: skip
AF_UNIX = 1
# clone(2) flags that make new namespaces (arg 0 on x86_64/aarch64): unshare's back door
CLONE_NEW = {"NEWNS": 0x00020000, "NEWCGROUP": 0x02000000, "NEWUTS": 0x04000000, "NEWIPC": 0x08000000,
             "NEWUSER": 0x10000000, "NEWPID": 0x20000000, "NEWNET": 0x40000000}  # fmt: skip


def _libseccomp():
    """pyseccomp, or a loud error: the namespaces mode does not run without its filter."""
    try:
        import pyseccomp
    except (ImportError, OSError, RuntimeError) as exc:  # pyseccomp raises RuntimeError when libseccomp.so is missing
        raise RuntimeError(
            f"the namespaces sandbox needs libseccomp (the pyseccomp package and the system libseccomp.so.2, "
            f"e.g. Debian/Ubuntu libseccomp2): {type(exc).__name__}: {exc}; use sandbox mode 'rlimits' to run "
            f"without it"
        ) from exc
    return pyseccomp


@functools.cache
def filter_bpf() -> bytes:
    """The filter as classic BPF for this machine's architecture (struct sock_filter[], 8 bytes each)."""
    sc = _libseccomp()
    deny = sc.ERRNO(errno.EPERM)
    flt = sc.SyscallFilter(sc.ALLOW)
    for name in DENIED:
        flt.add_rule(deny, name)
    for name in ("socket", "socketpair"):  # only AF_UNIX; the network namespace has no route anyway
        flt.add_rule(deny, name, sc.Arg(0, sc.NE, AF_UNIX))
    for flag in CLONE_NEW.values():
        flt.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    flt.add_rule(
        sc.ERRNO(errno.ENOSYS), "clone3"
    )  # its flags sit in memory BPF cannot read; ENOSYS makes libc fall back to clone
    with tempfile.TemporaryFile() as out:
        flt.export_bpf(out)
        out.seek(0)
        return out.read()
