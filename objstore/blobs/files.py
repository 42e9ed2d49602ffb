"""File primitives shared by the blob store, the blob writer and the control record: write
every byte of a buffer, make a directory entry durable, remove a file that may be gone.

Blocking (the IO pool, or a synchronous tool); no Twisted, no policy: whether to fsync at
all (`[storage] fsync`) is the caller's decision.
"""

from __future__ import annotations

import os


def write_all(fd: int, data: bytes | bytearray | memoryview) -> int:
    """Write all of `data` (os.write may write less than asked); returns its length."""
    view = memoryview(data)
    total = len(view)
    while view:
        view = view[os.write(fd, view):]
    return total


def fsync_dir(path: str) -> None:
    """fsync a directory, so the renames and creations in it survive a crash."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
