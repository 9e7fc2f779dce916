"""Isolation modes of the sandbox, chosen by a runtime probe (a registry of modes, not if-chains).

- "namespaces": `unshare` (util-linux) puts the child in new network, mount and pid namespaces; as
  an unprivileged user also a new user namespace (`--user --map-root-user`), which needs
  unprivileged user namespaces enabled. The harness then builds a private root (see supervisor.py),
  chroots into it and, if it started as real root, drops to nobody; rlimits on top; last, right
  before the program runs, a seccomp filter refusing syscalls a test program never needs (seccomp.py;
  no libseccomp here is a loud RuntimeError, not a silent fallback).
- "rlimits": the documented fallback where namespaces are unavailable: rlimits, a new session,
  a scrubbed environment and an empty private working directory; the child runs as the caller.
- "none": a bare child process (no limits, caller's environment); for the benchmark's overhead
  comparison only, never chosen by "auto".

`MODES` builds each mode's `Isolation` (None: "namespaces" without `unshare`). Choosing one by name,
"auto" included, runs a probe job, so it lives with the runner (runner.py: `isolation_for`,
`namespaces_available`): "auto" probes "namespaces" once per process by running a trivial program
in it and falls back to "rlimits" when that does not pass (no `unshare`, user namespaces disabled,
no CAP_SYS_ADMIN, ...).
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field

from coevo.sandbox.seccomp import filter_bpf

NOBODY = 65534


@dataclass(frozen=True)
class Isolation:
    name: str
    prefix: tuple[str, ...]  # command placed before the interpreter
    python: str
    confine: bool  # private root + chroot (+ drop to nobody when started as root) inside the harness
    limits: bool  # apply rlimits
    scrub_env: bool
    ro_binds: tuple[str, ...] = ()
    drop_to: int | None = None  # uid/gid the confined child switches to
    seccomp: bytes = field(
        default=b"", repr=False
    )  # classic BPF the harness installs before the program runs (seccomp.py); b"": none

    def promises(self) -> set[str]:
        """What this mode contains, as the hostile-program tests check it."""
        base = {"env", "cwd", "timeout", "memory", "output", "nofile"} if self.limits else set()
        if self.limits and (os.geteuid() != 0 or self.drop_to is not None):
            base.add("nproc")  # RLIMIT_NPROC does not bind real root
        if self.confine:
            base |= {"network", "files", "parent", "fork"}
        if self.seccomp:
            base.add("syscalls")
        return base


def python_executable() -> str:
    """The real interpreter behind this venv: its stdlib is all a sandboxed program can import."""
    return os.path.realpath(sys.executable)


def _ro_binds() -> tuple[str, ...]:
    """System directories the interpreter needs, bound read-only at the same paths inside the root."""
    prefix = os.path.realpath(sys.base_prefix)
    paths = ["/usr", "/lib", "/lib64", "/bin"]
    if not any(prefix == p or prefix.startswith(p + "/") for p in paths):
        paths.append(prefix)
    return tuple(paths)


def _namespaces() -> Isolation | None:
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    flags = ["--net", "--mount", "--pid", "--fork", "--kill-child"]
    root = os.geteuid() == 0
    if not root:
        flags = ["--user", "--map-root-user", *flags]
    return Isolation(
        name="namespaces", prefix=(unshare, *flags), python=python_executable(), confine=True, limits=True,
        scrub_env=True, ro_binds=_ro_binds(), drop_to=NOBODY if root else None, seccomp=filter_bpf(),
    )  # fmt: skip


def _rlimits() -> Isolation:
    return Isolation(name="rlimits", prefix=(), python=python_executable(), confine=False, limits=True, scrub_env=True)


def _none() -> Isolation:
    return Isolation(name="none", prefix=(), python=python_executable(), confine=False, limits=False, scrub_env=False)


MODES = {"namespaces": _namespaces, "rlimits": _rlimits, "none": _none}
