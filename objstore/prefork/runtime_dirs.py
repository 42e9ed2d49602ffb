"""The runtime directories of supervised nodes (`$TMPDIR/objstore-run-*`).

A supervisor makes one at start (shared counters, key locks, metrics files of its workers)
and removes it when it stops. One that was SIGKILLed (OOM killer, `kill -9`) cannot, so each
directory names its owner (pid and the kernel's start time of that process, which tells a
reused pid apart) and every supervisor start removes the directories of owners that are
gone. Only directories of the current user are touched.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time

PREFIX = "objstore-run-"
OWNER_FILE = "owner"
# A directory without an owner file older than this is stale (an owner writes the file
# right after making the directory; versions before this module wrote none).
UNOWNED_GRACE_SECONDS = 600.0


def process_start_ticks(pid: int) -> str | None:
    """The start time of `pid` in clock ticks since boot (Linux), or None without /proc."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
    except OSError:
        return None
    return fields[19] if len(fields) > 19 else None


def owner_alive(pid: int, start_ticks: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive, and not ours to judge
    if start_ticks is None:
        return True
    current = process_start_ticks(pid)
    return current is None or current == start_ticks


def make_runtime_dir() -> str:
    """A new private runtime directory owned by this process."""
    path = tempfile.mkdtemp(prefix=PREFIX)
    pid = os.getpid()
    with open(os.path.join(path, OWNER_FILE), "w") as owner:
        owner.write(f"{pid} {process_start_ticks(pid) or '-'}\n")
    return path


def is_stale(path: str, *, now: float | None = None) -> bool:
    try:
        with open(os.path.join(path, OWNER_FILE)) as owner:
            fields = owner.read().split()
    except FileNotFoundError:
        try:
            age = (time.time() if now is None else now) - os.stat(path).st_mtime
        except OSError:
            return False
        return age > UNOWNED_GRACE_SECONDS
    except OSError:
        return False
    try:
        pid = int(fields[0])
    except (IndexError, ValueError):
        return True
    ticks = fields[1] if len(fields) > 1 and fields[1] != "-" else None
    return not owner_alive(pid, ticks)


def sweep_stale_runtime_dirs(parent: str | None = None) -> list[str]:
    """Remove the runtime directories whose supervisor is gone; returns their paths."""
    parent = parent or tempfile.gettempdir()
    removed: list[str] = []
    uid = os.getuid()
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.startswith(PREFIX):
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat().st_uid != uid:
                continue
        except OSError:
            continue
        if is_stale(entry.path):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    return removed
