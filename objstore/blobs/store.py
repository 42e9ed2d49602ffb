"""Blob files and their sidecars on the data volume.

Layout under `<data_dir>`:
  blobs/<id[0:2]>/<id[2:4]>/<blob_id>            object bytes (one new file per version)
  blobs/<id[0:2]>/<id[2:4]>/<blob_id>.meta.json  sidecar: everything needed to rebuild the row
  tmp/                                            spools of uploads in flight (swept at start)
  control/                                        control-plane records (see control.py)

Durability order for a write (DESIGN invariant 1): blob fsync, rename into place, sidecar
written to a temp name, fsync, rename, directory fsync; only then may the caller commit the
metadata row. Every method here is blocking and runs on the IO thread pool; nothing here
imports Twisted.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from objstore.blobs.segments import Segment

SIDECAR_SUFFIX = ".meta.json"
COPY_CHUNK_BYTES = 1024 * 1024
SIDECAR_FORMAT = 1


def is_valid_blob_id(blob_id: str) -> bool:
    """Blob ids become paths: only canonical UUID strings are accepted."""
    try:
        return str(uuid.UUID(blob_id)) == blob_id
    except (ValueError, AttributeError, TypeError):
        return False


def new_blob_id() -> str:
    return str(uuid.uuid4())


@dataclass(frozen=True)
class BlobInfo:
    blob_id: str
    size: int
    has_sidecar: bool


class BlobStore:
    def __init__(self, data_dir: str, *, fsync: bool = True) -> None:
        self.data_dir = os.path.abspath(data_dir)
        self.blob_root = os.path.join(self.data_dir, "blobs")
        self.tmp_dir = os.path.join(self.data_dir, "tmp")
        self._fsync = fsync
        self._known_dirs: set[str] = set()
        # Temporary names: unique per store object and process without a random draw
        # (each `uuid4` is a getrandom system call, which on a busy writer also means
        # waiting to get the GIL back). O_EXCL refuses any clash.
        self._tmp_token = uuid.uuid4().hex[:12]
        self._tmp_serial = itertools.count()

    # -- layout ----------------------------------------------------------------------
    def prepare(self) -> int:
        """Create the layout and sweep leftover spools of a previous run. Returns the number
        of leftovers removed."""
        for path in (self.data_dir, self.blob_root, self.tmp_dir):
            os.makedirs(path, exist_ok=True)
        removed = 0
        for name in os.listdir(self.tmp_dir):
            try:
                os.unlink(os.path.join(self.tmp_dir, name))
                removed += 1
            except (IsADirectoryError, FileNotFoundError, PermissionError):
                pass
        return removed

    def blob_path(self, blob_id: str) -> str:
        if not is_valid_blob_id(blob_id):
            raise ValueError(f"invalid blob id {blob_id!r}")
        return os.path.join(self.blob_root, blob_id[0:2], blob_id[2:4], blob_id)

    def sidecar_path(self, blob_id: str) -> str:
        return self.blob_path(blob_id) + SIDECAR_SUFFIX

    def _tmp_name(self, suffix: str) -> str:
        return f"{os.getpid()}-{self._tmp_token}-{next(self._tmp_serial)}{suffix}"

    def _ensure_dir(self, path: str) -> None:
        if path in self._known_dirs:
            return
        parent = os.path.dirname(path)
        if not os.path.isdir(path):
            self._ensure_dir(parent)
            try:
                os.mkdir(path)
            except FileExistsError:
                pass
            self._fsync_dir(parent)
        self._known_dirs.add(path)

    # -- writes ----------------------------------------------------------------------
    def commit_file(self, fd: int, spool_path: str, blob_id: str, sidecar: dict[str, Any]) -> None:
        """Make a spooled upload durable as blob `blob_id` with its sidecar. Takes ownership
        of fd (closed here) and of the spool file (renamed, or removed on failure)."""
        path = self.blob_path(blob_id)
        try:
            if self._fsync:
                os.fdatasync(fd)
        finally:
            os.close(fd)
        try:
            self._ensure_dir(os.path.dirname(path))
            os.rename(spool_path, path)  # made durable by the sidecar's directory fsync
        except BaseException:
            _unlink_quietly(spool_path)
            raise
        self._finish_commit(blob_id, sidecar)

    def commit_bytes(self, data: bytes, blob_id: str, sidecar: dict[str, Any]) -> None:
        """Same as commit_file for a body that was kept in memory."""
        path = self.blob_path(blob_id)
        self._ensure_dir(os.path.dirname(path))
        self._write_atomically(path, data, sync_dir=False)
        self._finish_commit(blob_id, sidecar)

    def _finish_commit(self, blob_id: str, sidecar: dict[str, Any]) -> None:
        """The sidecar lives in the blob's directory, so the one directory fsync after its
        rename also makes the blob's rename durable."""
        try:
            self.write_sidecar(blob_id, sidecar)
        except BaseException:
            _unlink_quietly(self.blob_path(blob_id))
            raise

    def write_sidecar(self, blob_id: str, sidecar: dict[str, Any]) -> None:
        """Write (or replace) the sidecar of a blob atomically and durably."""
        path = self.sidecar_path(blob_id)
        self._ensure_dir(os.path.dirname(path))
        body = json.dumps({"format": SIDECAR_FORMAT, **sidecar}, sort_keys=True).encode()
        self._write_atomically(path, body)

    def _write_atomically(self, path: str, data: bytes, *, sync_dir: bool = True) -> None:
        tmp = os.path.join(self.tmp_dir, self._tmp_name(".tmp"))
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if self._fsync:
                os.fdatasync(fd)
        finally:
            os.close(fd)
        try:
            os.rename(tmp, path)
        except BaseException:
            _unlink_quietly(tmp)
            raise
        if sync_dir:
            self._fsync_dir(os.path.dirname(path))

    def _fsync_dir(self, path: str) -> None:
        if not self._fsync:
            return
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def delete(self, blob_id: str) -> None:
        """Remove a blob and its sidecar (sidecar first, so a crash in between leaves a blob
        that `check` reports as an orphan rather than a sidecar pointing at nothing)."""
        _unlink_quietly(self.sidecar_path(blob_id))
        _unlink_quietly(self.blob_path(blob_id))

    # -- reads -----------------------------------------------------------------------
    def open(self, blob_id: str) -> int:
        """An O_RDONLY fd of the blob; FileNotFoundError when it is missing."""
        return os.open(self.blob_path(blob_id), os.O_RDONLY)

    def read_range(self, blob_id: str, start: int, length: int) -> bytes:
        fd = self.open(blob_id)
        try:
            chunks = []
            while length > 0:
                data = os.pread(fd, length, start)
                if not data:
                    raise OSError(f"blob {blob_id} is shorter than expected")
                chunks.append(data)
                start += len(data)
                length -= len(data)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def read_segments(self, segments: Sequence[Segment]) -> bytes:
        return b"".join(self.read_range(s.blob_id, s.offset, s.length) for s in segments)

    def copy_segments(
        self, segments: Sequence[Segment], blob_id: str, sidecar: dict[str, Any], *,
        want_md5: bool,
    ) -> str | None:
        """Write the concatenation of `segments` as a new durable blob with its sidecar.
        The kernel copies the bytes (copy_file_range) unless an MD5 is wanted, in which case
        they pass through Python once. Returns the hex MD5 when asked."""
        tmp = os.path.join(self.tmp_dir, f"{uuid.uuid4()}.copy")
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        digest = hashlib.md5() if want_md5 else None
        try:
            for segment in segments:
                self._copy_segment(segment, out, digest)
        except BaseException:
            os.close(out)
            _unlink_quietly(tmp)
            raise
        self.commit_file(out, tmp, blob_id, sidecar)
        return None if digest is None else digest.hexdigest()

    def _copy_segment(self, segment: Segment, out: int, digest: Any) -> None:
        source = self.open(segment.blob_id)
        try:
            offset, remaining = segment.offset, segment.length
            while remaining > 0:
                if digest is None:
                    copied = os.copy_file_range(source, out, remaining, offset)
                else:
                    data = os.pread(source, min(remaining, COPY_CHUNK_BYTES), offset)
                    digest.update(data)
                    copied = _write_fully(out, data)
                if copied == 0:
                    raise OSError(f"blob {segment.blob_id} is shorter than expected")
                offset += copied
                remaining -= copied
        finally:
            os.close(source)

    def read_sidecar(self, blob_id: str) -> dict[str, Any]:
        with open(self.sidecar_path(blob_id), "rb") as handle:
            data: dict[str, Any] = json.load(handle)
        return data

    def blob_size(self, blob_id: str) -> int | None:
        try:
            return os.stat(self.blob_path(blob_id)).st_size
        except FileNotFoundError:
            return None

    def iter_blobs(self) -> Iterator[BlobInfo]:
        """Every blob id found on disk (blob file or sidecar), in sorted order per directory."""
        if not os.path.isdir(self.blob_root):
            return
        for first in sorted(os.listdir(self.blob_root)):
            first_path = os.path.join(self.blob_root, first)
            if not os.path.isdir(first_path):
                continue
            for second in sorted(os.listdir(first_path)):
                second_path = os.path.join(first_path, second)
                if not os.path.isdir(second_path):
                    continue
                yield from self._blobs_in(second_path)

    def _blobs_in(self, directory: str) -> Iterator[BlobInfo]:
        sizes: dict[str, int] = {}
        sidecars: set[str] = set()
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name.endswith(SIDECAR_SUFFIX):
                    sidecars.add(entry.name[: -len(SIDECAR_SUFFIX)])
                elif is_valid_blob_id(entry.name):
                    sizes[entry.name] = entry.stat().st_size
        for blob_id in sorted(set(sizes) | sidecars):
            if is_valid_blob_id(blob_id):
                yield BlobInfo(blob_id, sizes.get(blob_id, -1), blob_id in sidecars)


def _write_fully(fd: int, data: bytes) -> int:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    return len(data)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
