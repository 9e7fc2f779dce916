"""Durable publish and copies that share nothing (coevo/io.py).

The power-loss audit: a real checkpoint save and a JSON record write run under `strace -f -y -e
trace=fsync,rename,renameat,renameat2`; the trace must show every file of the new directory
and the temporary directory itself fsynced before the rename that publishes it, and the parent
directory fsynced after it. Without those fsyncs a power loss after the rename could leave the final
name holding empty files (ext4's delayed allocation). Skipped, with the reason, where strace is absent
(.ci/run installs it).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from coevo import io
from coevo.io import atomic_path, clone_file, hash_file, remove_orphans, write_json

ROOT = Path(__file__).resolve().parents[1]
STRACE = shutil.which("strace")

SAVE = """
import sys
from pathlib import Path
from coevo.io import write_json
from coevo.model.checkpoint import load_policy, save_checkpoint
policy = load_policy(sys.argv[1], "cpu")
out = Path(sys.argv[2])
save_checkpoint(out / "checkpoints" / "iter_0001", policy, {"iteration": 1})
write_json(out / "reports" / "iter_0001.json", {"iteration": 1})
"""

_CALL = re.compile(r"^(\d+)\s+(\w+)\((.*)\)\s+=\s+(-?\d+)")


def trace_events(log: Path) -> list[tuple[str, str, str | None]]:
    """(call, path, second path) in order: fsync of the path its fd names (strace -y), rename from -> to."""
    events = []
    for line in log.read_text().splitlines():
        match = _CALL.match(line)
        if not match or int(match.group(4)) < 0:
            continue
        call, args = match.group(2), match.group(3)
        if call == "fsync":
            events.append(("fsync", re.match(r"\d+<(.*)>$", args).group(1), None))
        elif call.startswith("rename"):
            paths = re.findall(r'"((?:[^"\\]|\\.)*)"', args)
            events.append(("rename", paths[0], paths[1]))
    return events


@pytest.mark.skipif(STRACE is None, reason="strace is not installed (apt-get install -y strace; .ci/run does)")
def test_a_published_checkpoint_and_record_were_fsynced_before_and_after_their_rename(tmp_path, tiny_policy_dir):
    log, out = tmp_path / "strace.log", tmp_path / "run"
    done = subprocess.run(
        [STRACE, "-f", "-qq", "-y", "-o", str(log), "-e", "trace=fsync,rename,renameat,renameat2"]
        + [sys.executable, "-c", textwrap.dedent(SAVE), str(tiny_policy_dir), str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    events = trace_events(log)
    checkpoint, report = out / "checkpoints" / "iter_0001", out / "reports" / "iter_0001.json"
    for final in (checkpoint, report):
        published = [i for i, e in enumerate(events) if e[0] == "rename" and e[2] == str(final)]
        assert len(published) == 1, (final, events[-20:])
        at, tmp = published[0], Path(events[published[0]][1])
        synced_before = {e[1] for e in events[:at] if e[0] == "fsync"}
        names = sorted(p.name for p in final.iterdir()) if final.is_dir() else [final.name]
        tmp_dir = tmp if final.is_dir() else tmp.parent
        assert {str(tmp_dir / name) for name in names} <= synced_before, (final, names, synced_before)
        assert str(tmp_dir) in synced_before  # the directory entries of the files, before the rename
        assert str(final.parent) in {e[1] for e in events[at + 1 :] if e[0] == "fsync"}  # the rename itself


def test_fsync_calls_are_counted_per_publish(tmp_path):
    before = io.fsync_calls
    with atomic_path(tmp_path / "d", is_dir=True) as tmp:
        (tmp / "a").write_text("1")
        (tmp / "sub").mkdir()
        (tmp / "sub" / "b").write_text("2")
    assert io.fsync_calls - before == 5  # a, sub/b, sub, the temporary directory, then the parent after the rename
    before = io.fsync_calls
    write_json(tmp_path / "r.json", {"x": 1})
    assert io.fsync_calls - before == 3  # the file, its temporary directory, the parent


def test_clone_file_shares_no_bytes_with_its_source(tmp_path):
    """A clone (reflink) or a copy: another inode, the same bytes; a write into one never reaches the other."""
    source, target = tmp_path / "weights", tmp_path / "copy"
    source.write_bytes(os.urandom(1 << 16))
    how = clone_file(source, target)
    assert how in ("reflink", "copy") and hash_file(target) == hash_file(source)
    assert os.stat(target).st_ino != os.stat(source).st_ino and os.stat(source).st_nlink == 1
    before = hash_file(source)
    with target.open("r+b") as fh:
        fh.write(b"\0" * 16)
    assert hash_file(source) == before != hash_file(target)
    with pytest.raises(FileExistsError):  # never writes into an existing file
        clone_file(source, target)


def test_remove_orphans_deletes_only_temporary_siblings(tmp_path):
    kept = [tmp_path / "iter_0001", tmp_path / ".hidden", tmp_path / "notes.tmp"]
    orphans = [tmp_path / ".iter_0002.ab12cd34.tmp", tmp_path / ".iter_0001.old"]
    for path in kept + orphans:
        path.mkdir()
    assert remove_orphans(tmp_path) == sorted(orphans)
    assert all(p.exists() for p in kept) and not any(p.exists() for p in orphans)
