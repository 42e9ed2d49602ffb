"""Owner-only modes for what a node keeps on disk, and the start-up check of them.

The data directory holds every credential's secret (in the SQLite database and in the
control record's `credentials/`) and every object's bytes and metadata. This module owns
the rule: the node creates its directories 0700 and its files 0600 whatever the umask; the
process that prepares storage refuses to start (one line, exit 2) when a file holding
secrets is open to group or others, and warns when a directory of the node is. It never
changes the mode of something it did not create: a wider mode may be an operator's choice,
and a silent chmod would hide that the secrets were exposed until now. Plain file-system
calls, no Twisted.
"""

from __future__ import annotations

import os
import shlex
import stat
from collections.abc import Iterable

OWNER_ONLY_DIR = 0o700
OWNER_ONLY_FILE = 0o600
_GROUP_AND_OTHERS = 0o077


class ExposedSecrets(OSError):
    """A file holding secrets is open to group or others (a start-up error)."""


def make_private_dir(path: str) -> None:
    """Create the directory `path` 0700 (its missing parents as the umask says) unless it
    exists; an existing one keeps its mode (see `directory_warnings`)."""
    if os.path.isdir(path):
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    try:
        os.mkdir(path, OWNER_ONLY_DIR)
    except FileExistsError:
        return  # made by a sibling process meanwhile
    os.chmod(path, OWNER_ONLY_DIR)  # a umask can take owner bits away too


def create_private_file(path: str) -> bool:
    """Create `path` empty and 0600 unless it exists; True when it was created."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                     OWNER_ONLY_FILE)
    except FileExistsError:
        return False
    try:
        os.fchmod(fd, OWNER_ONLY_FILE)
    finally:
        os.close(fd)
    return True


def open_to_others(path: str) -> int | None:
    """The permission bits of `path` when group or others have any of them, else None (also
    when it does not exist)."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return None
    return mode if mode & _GROUP_AND_OTHERS else None


def refuse_exposed(paths: Iterable[str], holds: str) -> None:
    """Raise ExposedSecrets for the first of `paths` open to group or others; `holds` says
    what it holds ("every credential's secret")."""
    for path in paths:
        mode = open_to_others(path)
        if mode is not None:
            raise ExposedSecrets(
                f"{path} holds {holds} but is open to group or others (mode {mode:04o}); "
                f"restrict it (chmod 600 {shlex.quote(path)}) and start again")


def directory_warnings(paths: Iterable[str]) -> list[str]:
    """One warning per directory of `paths` open to group or others."""
    warnings = []
    for path in dict.fromkeys(paths):
        mode = open_to_others(path)
        if mode is not None:
            warnings.append(
                f"{path} is open to group or others (mode {mode:04o}); objstore keeps "
                f"secrets and object data under it: chmod 700 {shlex.quote(path)}")
    return warnings
