"""Blob files and their sidecars on the data volume.

Layout under `<data_dir>`:
  blobs/<id[0:2]>/<id[2:4]>/<blob_id>            object bytes (one new file per version)
  blobs/<id[0:2]>/<id[2:4]>/<blob_id>.meta.json  sidecar: everything needed to rebuild the row
  tmp/                                            spools of uploads in flight (swept at start)
  control/                                        control-plane records (see control.py)
  uploads/<upload_id>.json                        an open multipart upload (its row as JSON)
  deleting/<blob_id>.meta.json                    the sidecar of a version whose permanent
                                                  delete is in progress (withdrawn)

Modes: directories 0700, blobs, sidecars and spools 0600, whatever the umask: they hold
the users' objects and metadata, which only the daemon reads (objstore.private_files).

Durability order for a write (DESIGN invariant 1): blob fsync, rename into place, sidecar
written to a temp name, fsync, rename, directory fsync; only then may the caller commit the
metadata row. A body kept in memory (`commit_bytes`, every small PUT) keeps that invariant's
promise (after a crash, the old state or the new one, never a torn one) with ONE sync
instead of three: its blob id is new, so the blob and its sidecar are created at their
final names, where nothing is replaced, and one barrier makes both files' data and the
directory's entries durable before the row commits (`commit_bytes_many` does this for
several such bodies at once, with one sync between them: the small PUTs that arrived
together). What renaming protected against is a
sidecar that a crash before that sync left whole beside a torn blob: a write that was
never answered and has no row, but that `recover` (which reads sidecars) would rebuild.
Such a sidecar carries the blob's check (`BLOB_CHECK`, the stored bytes' length and
CRC-32), and `recover` skips a sidecar whose blob fails it (`torn_blob`); the files are
then an orphan `check --repair` reclaims. A sidecar rewritten later (`write_sidecar`, by a
tag or lock change or a restamp) goes through a temp name and a rename again and carries no
check: its blob is durable by then. A sidecar of a new id that holds no bytes (a delete
marker, a completed multipart object: `create_sidecar`) is created at its final name in one
sync the same way; torn by a crash before that sync, it is not JSON, and recover skips
it. A fan-out directory the write creates on the way (a
new store creates one for most of its first writes) is made durable in the same barrier;
until a sync that covered its entry succeeded, every write into it syncs that entry again
(`_make_dirs`), so no write relies on a directory another thread created and has not yet
made durable. Every sync goes through the store's `SyncBarrier` (barrier.py): a write alone
on the pool runs its own fdatasync/fsync calls, as before; the writes in flight together
share one `syncfs` of the data volume per barrier.

A permanent delete goes the other way: the sidecar is withdrawn durably
(`withdraw_sidecar`) before the row goes, so that bytes a crash leaves behind are an orphan
and never a version `recover` would bring back (recover reads only `blobs/`). Withdrawing
moves the sidecar into `deleting/` rather than unlinking it, because the delete may still
not commit: the engine writes it back when the row stays (`reinstate_sidecar`), and removing
the version's files after the commit also drops it (`delete_version`). What a crash leaves in
`deleting/` is a delete in doubt, resolved by `settle_withdrawn` (at start-up and by `check
--repair`): a row that still holds the blob gets its sidecar back, otherwise the removal is
finished. A batch delete withdraws its versions with ONE manifest in `deleting/` instead
(`withdraw_versions`, manifests.py): the sidecars stay in place, recover skips the blobs a
manifest names, and `settle_withdrawn` resolves a manifest a crash left entry by entry.
That small directory is all start-up reads; it never scans the blobs. An open upload's
record is written the same
way before its row and withdrawn before an abort's; a completion removes it after its
commit (recover knows a completed upload by its parts, which the object then references).

The store is where bytes land and where they are found: a body received by a `BlobWriter`
(writer.py) becomes a blob through `commit`; object bytes are read only through a
`BlobReader` (reader.py) that `reader` makes. A copy is made by the kernel
(`copy_file_range`) when no digest is wanted, else it passes through a reader and a writer
once; a blob stored through a stage (stages.py) would take that second path, since its
stored bytes are not its logical bytes.

Removal of a version's files (`delete_version`) and a streamed read of a composite
object (`pin_parts`) agree through an advisory lock on the object's first part blob, so
that a read that started always finishes: a reader holds it shared; the deleter unlinks
that blob, then removes the other parts only when it can take it exclusively, and
otherwise leaves them to the last reader, who takes it exclusively when it lets go.
Unlinking first makes every later pin fail (the reader then looks the key up again). The
lock is flock(2): one per open file, shared by every worker process of the node.

Every method here is blocking and runs on the IO thread pool (small reads may run inline,
see reader.py), or in a synchronous tool (`objstore check`, `recover`).
"""

from __future__ import annotations

import errno
import fcntl
import functools
import itertools
import json
import os
import re
import threading
import uuid
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from objstore.blobs.barrier import SyncBarrier
from objstore.blobs.factory import BlobStages, StagedObject
from objstore.blobs.files import fsync_dir, unlink_quietly, write_all
from objstore.blobs.manifests import (
    MANIFEST_NAME,
    MANIFEST_SUFFIX,
    WithdrawnVersion,
    encode_manifest,
    parse_manifest,
)
from objstore.blobs.plan import plan_of
from objstore.blobs.reader import BlobFile, BlobReader
from objstore.blobs.segments import Segment
from objstore.blobs.writer import BlobWriter, HeldBody, HeldBytes
from objstore.crypto.customer_key import CustomerKey
from objstore.private_files import OWNER_ONLY_DIR, make_private_dir
from objstore.random_ids import random_uuid_text

SIDECAR_SUFFIX = ".meta.json"
COPY_CHUNK_BYTES = 1024 * 1024
SIDECAR_FORMAT = 1
# The key of the blob's check in a sidecar written in one sync with its blob
# (`BlobStore.commit_bytes`, `torn_blob`): {"bytes": stored length, "crc32": of the bytes}.
BLOB_CHECK = "blob_check"
# A write refused for want of room: the volume is full, or the daemon's quota is spent.
_NO_ROOM = frozenset((errno.ENOSPC, errno.EDQUOT))


# The canonical text of a UUID (`str(uuid.UUID(...))`: lowercase, hyphenated), matched
# whole: a regular expression costs a sixth of parsing the UUID and printing it again, and
# every blob path (each key of a DeleteObjects: three or four) checks one.
_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def blob_check(data: bytes) -> dict[str, int]:
    """The check a one-sync sidecar holds of its blob's stored bytes (`BLOB_CHECK`)."""
    return {"bytes": len(data), "crc32": zlib.crc32(data)}


# One body of `BlobStore.commit_bytes_many`: (its bytes, its new blob id, its sidecar).
SmallCommit = tuple[bytes, str, dict[str, Any]]


def is_valid_blob_id(blob_id: str) -> bool:
    """Blob ids become paths: only canonical UUID strings are accepted."""
    return isinstance(blob_id, str) and _CANONICAL_UUID.fullmatch(blob_id) is not None


# Upload ids become file names: what `new_upload_id` makes (hex), and nothing with a dot or
# a slash.
_UPLOAD_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
UPLOAD_RECORD_SUFFIX = ".json"


def new_blob_id() -> str:
    return random_uuid_text()


@dataclass
class SettledDeletes:
    """What `settle_withdrawn` did with each delete left in doubt (blob ids; a manifest's
    name for a manifest that could not be read)."""

    put_back: list[str] = field(default_factory=list)  # the row stays: sidecar restored
    finished: list[str] = field(default_factory=list)  # no row: the files went
    unresolved: list[str] = field(default_factory=list)  # unreadable, or the row unknown
    torn: list[str] = field(default_factory=list)  # manifests never made durable: dropped


def withdrawn_part_ids(sidecar: dict[str, Any]) -> list[str]:
    """The part blobs of a withdrawn composite version (none for other versions)."""
    found = (part.get("blob_id") for part in sidecar.get("parts") or ()
             if isinstance(part, dict))
    return [blob_id for blob_id in found if isinstance(blob_id, str)
            and is_valid_blob_id(blob_id)]


@dataclass(frozen=True)
class BlobInfo:
    blob_id: str
    size: int
    has_sidecar: bool


class BlobStore:
    def __init__(self, data_dir: str, *, fsync: bool = True, syncfs: bool = True,
                 stages: BlobStages | None = None) -> None:
        """`syncfs` False: never a whole-volume syncfs, each write syncs its own files
        ([storage] sync_method = "fsync")."""
        self.data_dir = os.path.abspath(data_dir)
        # Writers and readers of staged (encrypted) blobs: blobs/factory.py.
        self.stages = stages if stages is not None else BlobStages()
        self.blob_root = os.path.join(self.data_dir, "blobs")
        self.tmp_dir = os.path.join(self.data_dir, "tmp")
        self.upload_root = os.path.join(self.data_dir, "uploads")
        self.withdrawn_root = os.path.join(self.data_dir, "deleting")
        self._fsync = fsync
        # Every fsync of the store goes through this (barrier.py); None with fsync off.
        self.barrier = (None if not fsync else SyncBarrier(self.data_dir) if syncfs
                        else SyncBarrier(self.data_dir, syncfs=None))
        self._known_dirs: set[str] = set()  # exist, and their entries are durable
        # Created here, entries not yet known durable -> their parent directory.
        self._fresh_dirs: dict[str, str] = {}
        self._dirs_lock = threading.Lock()
        # Temporary names: unique per store object and process without a random draw
        # (each `uuid4` is a getrandom system call, which on a busy writer also means
        # waiting to get the GIL back). O_EXCL refuses any clash.
        self._tmp_token = uuid.uuid4().hex[:12]
        self._tmp_serial = itertools.count()

    # -- layout ----------------------------------------------------------------------
    def prepare(self) -> int:
        """Create the layout and sweep leftover spools of a previous run. Returns the number
        of leftovers removed."""
        for path in (self.data_dir, self.blob_root, self.tmp_dir, self.withdrawn_root):
            make_private_dir(path)
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
        """Create `path` (and missing parents) durably: their entries synced on return."""
        fresh = self._make_dirs(path)
        if fresh:
            self._sync(_fsync_parents_of(fresh))
            self._dirs_durable(fresh)

    def _make_dirs(self, path: str) -> list[str]:
        """Create `path` and its missing parents; returns the directories on that chain
        whose entries are not known to be durable yet (created now, or by a write still in
        flight), outermost first: sync their parents (`_fsync_parents_of`) before relying on
        `path`, then call `_dirs_durable`. A directory found on disk that this store did
        not create is taken as durable (an earlier run's)."""
        if path in self._known_dirs:
            return []
        with self._dirs_lock:
            missing: list[str] = []
            probe = path
            while (probe not in self._known_dirs and probe not in self._fresh_dirs
                   and not os.path.isdir(probe)):
                missing.append(probe)
                probe = os.path.dirname(probe)
            if probe not in self._fresh_dirs:
                self._known_dirs.add(probe)
            for directory in reversed(missing):
                self._fresh_dirs[directory] = os.path.dirname(directory)
                try:
                    os.mkdir(directory, OWNER_ONLY_DIR)
                except FileExistsError:
                    pass
            fresh: list[str] = []
            probe = path
            while probe in self._fresh_dirs:
                fresh.append(probe)
                probe = os.path.dirname(probe)
            if not fresh:
                self._known_dirs.add(path)
            return fresh[::-1]

    def _dirs_durable(self, fresh: Sequence[str]) -> None:
        """A sync of `fresh`'s parents succeeded: their entries are durable."""
        with self._dirs_lock:
            for directory in fresh:
                self._fresh_dirs.pop(directory, None)
                self._known_dirs.add(directory)

    # -- writes ----------------------------------------------------------------------
    def commit(self, body: HeldBody, blob_id: str, sidecar: dict[str, Any]) -> None:
        """Make a body handed over by a writer (`BlobWriter.detach`) durable as blob
        `blob_id` with its sidecar. Takes ownership of a spool file."""
        if isinstance(body, HeldBytes):
            self.commit_bytes(body.data, blob_id, sidecar)
        else:
            self.commit_file(body.fd, body.path, blob_id, sidecar)

    def commit_file(self, fd: int, spool_path: str, blob_id: str, sidecar: dict[str, Any]) -> None:
        """Make a spooled upload durable as blob `blob_id` with its sidecar. Takes ownership
        of fd (closed here) and of the spool file (renamed, or removed on failure)."""
        path = self.blob_path(blob_id)
        try:
            try:
                if self._fsync:
                    os.fdatasync(fd)  # may be where a full disk shows (delayed allocation)
            finally:
                os.close(fd)
            self._ensure_dir(os.path.dirname(path))
            os.rename(spool_path, path)  # made durable by the sidecar's directory fsync
        except BaseException:
            unlink_quietly(spool_path)
            raise
        self._finish_commit(blob_id, sidecar)

    def commit_bytes(self, data: bytes, blob_id: str, sidecar: dict[str, Any]) -> None:
        """Same as commit_file for a body that was kept in memory, in ONE sync: the blob
        and its sidecar are created at their final names (the blob id is new, so there is
        nothing to replace and nothing to rename), then one barrier makes both files'
        data and the directory's entries durable. The sidecar carries the blob's check
        (`BLOB_CHECK`: its stored length and CRC-32), so that a crash before that sync,
        which can leave a whole sidecar beside a torn blob (a write never answered, with
        no row), is never rebuilt into a version by `recover` (`torn_blob`). Should a name
        exist already (a peer's blob delivered twice at once, the same bytes; a repair of
        a lost blob whose sidecar stayed), the write takes the renaming path
        (`_commit_bytes_renamed`), which replaces what is there. A batch of one
        (`commit_bytes_many`)."""
        _raise_outcome(self.commit_bytes_many([(data, blob_id, sidecar)]))

    def commit_bytes_many(self, items: Sequence[SmallCommit]) -> list[Exception | None]:
        """`commit_bytes` of several bodies kept in memory, made durable by ONE sync
        between them (the small PUTs that arrived together, engine/objects.py
        `BlobFiles`): each item's blob and sidecar are created at their final names, as
        `commit_bytes` creates them, then one barrier round makes every file's data and
        every directory's entries durable (`_create_many`, which says how the items fail
        apart). An item whose name exists already takes `commit_bytes`' renaming path
        after the sync. Returns one outcome per item, in order: None once its files are
        durable, else the exception its commit raised."""
        def files(data: bytes, blob_id: str, sidecar: dict[str, Any]
                  ) -> Callable[[], list[tuple[str, bytes]]]:
            def made() -> list[tuple[str, bytes]]:
                path = self.blob_path(blob_id)
                return [(path, data),
                        (path + SIDECAR_SUFFIX, self._sidecar_bytes(sidecar, blob_check(data)))]
            return made

        return self._create_many(
            [files(*item) for item in items],
            [functools.partial(self._commit_bytes_renamed, *item) for item in items])

    def create_sidecars_many(self, items: Sequence[tuple[str, dict[str, Any]]]
                             ) -> list[Exception | None]:
        """`create_sidecar` of several blob ids that hold only a sidecar (the delete
        markers of a DeleteObjects, replicated markers), made durable by ONE sync between
        them (`_create_many`); a name that exists already is replaced (`write_sidecar`)
        after the sync. One outcome per item, in order, as `commit_bytes_many`."""
        def files(blob_id: str, sidecar: dict[str, Any]
                  ) -> Callable[[], list[tuple[str, bytes]]]:
            return lambda: [(self.sidecar_path(blob_id), self._sidecar_bytes(sidecar))]

        return self._create_many([files(*item) for item in items],
                                 [functools.partial(self.write_sidecar, *item)
                                  for item in items])

    def _create_many(self, files_of: Sequence[Callable[[], Sequence[tuple[str, bytes]]]],
                     replace: Sequence[Callable[[], None]]) -> list[Exception | None]:
        """Create the files of each item (`files_of[i]()`: new (path, data) pairs in one
        directory; it may raise, say for an invalid id) at their final names, then make
        them all durable in one barrier round: one `syncfs` for two items or more, or
        each file's data and each directory's entries where syncfs is not trusted; an
        item alone runs those own syncs of its files and directories, no `syncfs`.

        The items fail apart where they can: an item whose files cannot be created (a
        full disk, an invalid id) has what it created removed and fails alone; an item
        whose name exists is left to `replace[i]()` after the sync; a failed sync fails
        every item (the replacements are not tried) and removes every file created, the
        last first. Returns one outcome per item, in order: None, or its exception."""
        outcomes: list[Exception | None] = [None] * len(files_of)
        created: list[list[str]] = [[] for _ in files_of]
        fds: list[int] = []
        fresh: dict[str, None] = {}  # ordered: outermost first, as `_make_dirs` gives
        directories: dict[str, None] = {}
        existing: list[int] = []
        try:
            try:
                began = self._begin()
                for index, files in enumerate(files_of):
                    try:
                        named = files()
                        directory = os.path.dirname(named[0][0])
                        fresh.update(dict.fromkeys(self._make_dirs(directory)))
                        fds.extend(self._create_all(created[index], named))
                    except FileExistsError:
                        existing.append(index)
                        continue
                    except Exception as error:
                        outcomes[index] = error
                        continue
                    directories[directory] = None
                synced = sum(1 for names in created if names)
                if synced:
                    try:
                        self._sync(_many_syncs(fds, list(fresh), list(directories)), began,
                                   whole=synced > 1)
                    except Exception as error:
                        for index in range(len(files_of)):
                            if created[index]:
                                outcomes[index] = error
                        raise
                    self._dirs_durable(list(fresh))
            finally:
                for fd in fds:
                    os.close(fd)
        except BaseException as failure:
            for names in reversed(created):
                for name in reversed(names):
                    unlink_quietly(name)
            if not isinstance(failure, Exception):
                raise
            for index in existing:  # not tried: the volume's sync just failed
                outcomes[index] = failure
            return outcomes
        for index in existing:  # a repeat, or a repair: replace what is there
            try:
                replace[index]()
            except Exception as error:
                outcomes[index] = error
        return outcomes

    def _create_all(self, created: list[str], named: Sequence[tuple[str, bytes]]
                    ) -> list[int]:
        """Create each (path, data) of `named` (`_create`; names appended to `created`)
        and return their open descriptors; on any failure, close and remove what this
        call created (`created` is emptied) and raise."""
        fds: list[int] = []
        try:
            for path, data in named:
                fds.append(self._create(created, path, data))
        except BaseException:
            for fd in fds:
                os.close(fd)
            for name in reversed(created):
                unlink_quietly(name)
            created.clear()
            raise
        return fds

    def _commit_bytes_renamed(self, data: bytes, blob_id: str, sidecar: dict[str, Any]
                              ) -> None:
        """`commit_bytes` over a blob that exists: the blob and its sidecar are written
        to temp names, made durable together (one barrier), renamed over the names
        (blob first: a crash between the renames leaves an orphan blob, never a sidecar
        without its bytes), then the directory is made durable (a second barrier)."""
        path = self.blob_path(blob_id)
        directory = os.path.dirname(path)
        renamed: list[str] = []
        written: list[str] = []
        fds: list[int] = []
        try:
            try:
                began = self._begin()
                fresh = self._make_dirs(directory)  # their entries go in the first sync
                fds.append(self._write_temp(written, data))
                # The same sidecar as the one-sync path writes, check included (it always
                # holds here: both files are durable before either name appears).
                fds.append(self._write_temp(written,
                                            self._sidecar_bytes(sidecar, blob_check(data))))
                self._sync(_fdatasync_all(fds, fresh), began)
                self._dirs_durable(fresh)
            finally:
                for fd in fds:
                    os.close(fd)
            for tmp, final in zip(written, (path, path + SIDECAR_SUFFIX), strict=True):
                os.rename(tmp, final)
                renamed.insert(0, final)  # removed sidecar first on failure
            self._sync(_fsync_dir_of(directory))
        except BaseException:
            for name in renamed + written:
                unlink_quietly(name)
            raise

    def _finish_commit(self, blob_id: str, sidecar: dict[str, Any]) -> None:
        """The sidecar lives in the blob's directory, so the one directory fsync after its
        rename also makes the blob's rename durable."""
        try:
            self.write_sidecar(blob_id, sidecar)
        except BaseException:
            unlink_quietly(self.blob_path(blob_id))
            raise

    def create_sidecar(self, blob_id: str, sidecar: dict[str, Any]) -> None:
        """Make durable the sidecar of a blob id that holds no bytes of its own (a delete
        marker, a composite object whose bytes are its parts'), in ONE sync where the id
        is new: the sidecar is created at its final name and one barrier round makes its
        data and the directory's entries durable (`commit_bytes`' way, without a blob).
        A crash before that sync can leave a torn file, which is not a JSON document and
        which `recover` skips (the write was never answered); a whole one beside no row is
        the unanswered write `write_sidecar` can leave too. A name that exists already (a
        replicated row's sidecar written again) takes `write_sidecar`'s renaming path.
        A batch of one (`create_sidecars_many`)."""
        _raise_outcome(self.create_sidecars_many([(blob_id, sidecar)]))

    def write_sidecar(self, blob_id: str, sidecar: dict[str, Any]) -> None:
        """Write (or replace) the sidecar of a blob atomically and durably."""
        path = self.sidecar_path(blob_id)
        self._ensure_dir(os.path.dirname(path))
        self._write_atomically(path, self._sidecar_bytes(sidecar))

    @staticmethod
    def _sidecar_bytes(sidecar: dict[str, Any], check: dict[str, int] | None = None
                       ) -> bytes:
        document = {"format": SIDECAR_FORMAT, **sidecar}
        if check is not None:
            document[BLOB_CHECK] = check
        return json.dumps(document, sort_keys=True).encode()

    @staticmethod
    def _create(created: list[str], path: str, data: bytes) -> int:
        """Create `path` (never an existing file: FileExistsError) holding `data` (its
        name appended to `created` as soon as it exists, for the caller to remove on
        failure); returns its open descriptor."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        created.append(path)
        try:
            write_all(fd, data)  # ENOSPC on a full disk: the caller removes the file
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _write_temp(self, written: list[str], data: bytes) -> int:
        """Write `data` to a new temporary file (its name appended to `written` as soon as
        it exists, for the caller to remove on failure); returns its open descriptor."""
        return self._create(written, os.path.join(self.tmp_dir, self._tmp_name(".tmp")), data)

    def _write_atomically(self, path: str, data: bytes) -> None:
        written: list[str] = []
        try:
            began = self._begin()
            fd = self._write_temp(written, data)
            try:
                self._sync(_fdatasync_all([fd]), began)
            finally:
                os.close(fd)
            os.rename(written[0], path)
        except BaseException:
            for tmp in written:
                unlink_quietly(tmp)
            raise
        self._fsync_dir(os.path.dirname(path))

    def _begin(self) -> int | None:
        """Before writing data that `_sync` makes durable (barrier.py `begin`)."""
        return self.barrier.begin() if self.barrier is not None else None

    def _sync(self, alone: Callable[[], None], began: int | None = None, *,
              whole: bool = False) -> None:
        """Make what this thread wrote so far durable: `alone()` (its own syncs) or a
        shared barrier of the writes in flight (barrier.py). Nothing with fsync off.
        `began`: `_begin()`'s ticket, taken before the data was written; `whole`: `alone()`
        is many syncs, one `syncfs` is preferred (barrier.py `sync`)."""
        if self.barrier is not None:
            self.barrier.sync(alone, began, whole=whole)

    def _fsync_dir(self, path: str) -> None:
        self._sync(_fsync_dir_of(path))

    def delete(self, blob_id: str) -> None:
        """Remove a blob and its sidecar (sidecar first, so a crash in between leaves a blob
        that `check` reports as an orphan rather than a sidecar pointing at nothing)."""
        unlink_quietly(self.sidecar_path(blob_id))
        unlink_quietly(self.blob_path(blob_id))

    def remove_sidecar(self, blob_id: str) -> None:
        """Remove a blob's sidecar durably for good and keep its bytes (a replicated row
        that lost: no delete is in progress)."""
        path = self.sidecar_path(blob_id)
        try:
            os.unlink(path)
        except FileNotFoundError:
            return
        self._fsync_dir(os.path.dirname(path))

    # -- deletes in progress ---------------------------------------------------------
    def withdrawn_path(self, blob_id: str) -> str:
        if not is_valid_blob_id(blob_id):
            raise ValueError(f"invalid blob id {blob_id!r}")
        return os.path.join(self.withdrawn_root, blob_id + SIDECAR_SUFFIX)

    def withdraw_sidecar(self, blob_id: str) -> None:
        """Before a permanent delete's commit: move the blob's sidecar into `deleting/`,
        durably, and keep its bytes. From now on `recover` does not rebuild the version,
        and until the delete is resolved its sidecar is kept (see the module notes)."""
        path = self.sidecar_path(blob_id)
        self._ensure_dir(self.withdrawn_root)
        try:
            os.rename(path, self.withdrawn_path(blob_id))
        except FileNotFoundError:
            return
        # One round of the barrier: concurrent single deletes share one syncfs; alone,
        # `deleting/` first (the sidecar is never lost), then the blob's directory (it
        # is out of recover's sight).
        self._sync(_fsync_dirs_of((self.withdrawn_root, os.path.dirname(path))))

    def withdraw_sidecars(self, blob_ids: Sequence[str]) -> None:
        """`withdraw_sidecar` of many blobs (a batch delete, concurrent single deletes)
        with ONE sync: every sidecar
        is moved into `deleting/`, then one `syncfs` of the data volume makes all the
        renames durable (barrier.py; where it is not trusted, `deleting/` and each blob
        directory are synced in turn, as `withdraw_sidecar` does). Should a crash still
        leave a sidecar in both places, the start-up's `settle_withdrawn` resolves it as
        any delete in doubt (put back when its row holds the blob, else the version's
        files go)."""
        self._ensure_dir(self.withdrawn_root)
        directories: set[str] = set()
        withdrawn = self.withdrawn_root + os.sep
        for blob_id in blob_ids:
            path = self.sidecar_path(blob_id)  # checks the id: `withdrawn_path`, inlined
            try:
                os.rename(path, withdrawn + blob_id + SIDECAR_SUFFIX)
            except FileNotFoundError:
                continue
            directories.add(os.path.dirname(path))
        if not directories:
            return
        ordered = [self.withdrawn_root, *sorted(directories)]

        def each_directory() -> None:
            for directory in ordered:
                fsync_dir(directory)

        # Alone on the barrier, one sidecar's directories are synced as `withdraw_sidecar`
        # syncs them (a syncfs would also flush whatever else is being written).
        self._sync(each_directory, whole=len(directories) > 1)

    def withdraw_versions(self, bucket: str, versions: Sequence[WithdrawnVersion]
                          ) -> str | None:
        """Before a batch delete's commit: ONE manifest in `deleting/` naming `versions`
        (of `bucket`), durable on return (one round of the barrier: alone, the manifest's
        data and `deleting/`); the sidecars stay in place (manifests.py). Returns the
        manifest's name, for `drop_manifest` once the batch is resolved. On a volume
        without room for it (deletes must work on a full disk) each sidecar is withdrawn
        on its own instead (`withdraw_sidecars`: renames need no new block), and None is
        returned."""
        self._ensure_dir(self.withdrawn_root)
        name = self._tmp_name(MANIFEST_SUFFIX)
        path = os.path.join(self.withdrawn_root, name)
        data = encode_manifest(bucket, versions)
        began = self._begin()
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                write_all(fd, data)
                self._sync(_manifest_syncs(fd, self.withdrawn_root), began)
            finally:
                os.close(fd)
        except BaseException as error:
            unlink_quietly(path)
            if not (isinstance(error, OSError) and error.errno in _NO_ROOM):
                raise
        else:
            return name
        self.withdraw_sidecars([version.blob_id for version in versions])
        return None

    def manifest_path(self, name: str) -> str:
        if not MANIFEST_NAME.fullmatch(name):
            raise ValueError(f"invalid manifest name {name!r}")
        return os.path.join(self.withdrawn_root, name)

    def drop_manifest(self, name: str) -> None:
        """A batch delete is resolved (its versions' files removed, or their rows kept):
        its manifest goes. No sync: should it come back after a crash, `settle_withdrawn`
        resolves its versions again, which changes nothing."""
        unlink_quietly(self.manifest_path(name))

    def manifest_names(self) -> list[str]:
        """The manifests of batch deletes in progress (or left in doubt by a crash)."""
        if not os.path.isdir(self.withdrawn_root):
            return []
        return sorted(name for name in os.listdir(self.withdrawn_root)
                      if MANIFEST_NAME.fullmatch(name))

    def read_manifest(self, name: str) -> list[WithdrawnVersion]:
        """A manifest's versions; ValueError when it is torn (manifests.py)."""
        with open(self.manifest_path(name), "rb") as handle:
            return parse_manifest(handle.read(), is_valid_blob_id)

    def manifest_blob_ids(self) -> set[str]:
        """Every blob a readable manifest names: versions whose delete is in progress, or
        was left in doubt by a crash (`recover` skips their sidecars)."""
        named: set[str] = set()
        for name in self.manifest_names():
            try:
                named.update(version.blob_id for version in self.read_manifest(name))
            except (OSError, ValueError):
                continue  # gone meanwhile, or torn: it names nothing
        return named

    def reinstate_sidecar(self, blob_id: str, sidecar: dict[str, Any]) -> None:
        """A delete did not commit: the sidecar is written back (from the row, which is
        the truth) and the withdrawn one dropped. Dropping it needs no fsync: should it come
        back after a crash, `settle_withdrawn` finds the sidecar in place and drops it."""
        self.write_sidecar(blob_id, sidecar)
        unlink_quietly(self.withdrawn_path(blob_id))

    def put_back_withdrawn(self, blob_id: str) -> None:
        """A delete in doubt that did not commit: the withdrawn sidecar goes back in place,
        unless a sidecar is there already (written back from the row: it wins)."""
        marked, path = self.withdrawn_path(blob_id), self.sidecar_path(blob_id)
        self._ensure_dir(os.path.dirname(path))
        try:
            os.link(marked, path)  # never over a sidecar in place
        except FileExistsError:
            pass
        self._fsync_dir(os.path.dirname(path))
        unlink_quietly(marked)

    def withdrawn_ids(self) -> list[str]:
        """The blob ids whose delete is in progress (or was left in doubt by a crash)."""
        if not os.path.isdir(self.withdrawn_root):
            return []
        found = (name[: -len(SIDECAR_SUFFIX)] for name in os.listdir(self.withdrawn_root)
                 if name.endswith(SIDECAR_SUFFIX))
        return sorted(blob_id for blob_id in found if is_valid_blob_id(blob_id))

    def read_withdrawn(self, blob_id: str) -> dict[str, Any]:
        with open(self.withdrawn_path(blob_id), "rb") as handle:
            data: dict[str, Any] = json.load(handle)
        return data

    def settle_withdrawn(self, holds: Callable[[str, dict[str, Any]], bool | None], *,
                         older_than: float | None = None) -> SettledDeletes:
        """Resolve the deletes left in doubt: `holds(blob_id, sidecar)` tells whether a row
        still holds the blob (None: unknown, left as it is). Held: the sidecar goes back
        (the delete never committed, the version stays whole); not held: the version's
        files go (its own blob and its parts). `older_than` (a time): withdrawals since
        then are left alone, they may belong to a delete in flight."""
        settled = SettledDeletes()
        for blob_id in self.withdrawn_ids():
            try:
                if older_than is not None and os.stat(
                        self.withdrawn_path(blob_id)).st_mtime >= older_than:
                    continue
                sidecar = self.read_withdrawn(blob_id)
            except FileNotFoundError:
                continue  # resolved meanwhile
            except (OSError, ValueError):
                settled.unresolved.append(blob_id)
                continue
            held = holds(blob_id, sidecar)
            try:
                if held:
                    self.put_back_withdrawn(blob_id)
                    settled.put_back.append(blob_id)
                elif held is not None:
                    self.delete_version(blob_id, withdrawn_part_ids(sidecar),
                                        settling=True)
                    settled.finished.append(blob_id)
            except OSError:
                held = None
            if held is None:
                settled.unresolved.append(blob_id)
        for name in self.manifest_names():
            self._settle_manifest(name, holds, older_than, settled)
        return settled

    def _settle_manifest(self, name: str,
                         holds: Callable[[str, dict[str, Any]], bool | None],
                         older_than: float | None, settled: SettledDeletes) -> None:
        """`settle_withdrawn` of a batch delete's manifest: each version whose row still
        holds its blob stays (its sidecar never moved), the others' files go; the manifest
        goes once every version is resolved. A torn one names nothing (manifests.py)."""
        path = self.manifest_path(name)
        try:
            if older_than is not None and os.stat(path).st_mtime >= older_than:
                return
            versions = self.read_manifest(name)
        except FileNotFoundError:
            return  # resolved meanwhile
        except ValueError:
            self.drop_manifest(name)
            settled.torn.append(name)
            return
        except OSError:
            settled.unresolved.append(name)
            return
        resolved = True
        for version in versions:
            held = holds(version.blob_id, version.identity())
            try:
                if held:
                    settled.put_back.append(version.blob_id)
                elif held is not None:
                    self.delete_version(version.blob_id, version.part_ids, settling=True,
                                        sidecar_withdrawn=False)
                    settled.finished.append(version.blob_id)
            except OSError:
                held = None
            if held is None:
                settled.unresolved.append(version.blob_id)
                resolved = False
        if resolved:
            self.drop_manifest(name)

    def delete_version(self, blob_id: str | None, part_ids: Sequence[str] = (), *,
                       settling: bool = False, sidecar_withdrawn: bool = True) -> None:
        """Remove the files of a version that no row references any more: its own blob,
        then the blobs of its parts, unless a streamed read holds them (`pin_parts`): the
        last such reader removes them when it lets go. Last, its withdrawn sidecar, if a
        delete left one: until then a crash leaves the removal to `settle_withdrawn`.
        `sidecar_withdrawn` False: a batch delete's version (withdrawn by a manifest, its
        sidecar in place), whose `deleting/` has no sidecar of its own to remove. A
        version whose sidecar was moved still has `blobs/` tried first (`delete`): it is
        usually gone, but a `check --repair` that ran during the delete may have written
        it back from the row, and left there it would outlive the blob for `recover`.

        A version can be let go twice at once (a delete that lost its row to an
        overwrite, and the overwrite, both remove the replaced version): the removal that
        unlinked the first part owns the parts, so a later one that finds the first part
        gone leaves them alone; it would otherwise take them from under a pinned read.
        Only `settling` (a crash's deletes in doubt: the removal that unlinked the first
        part died with the process) removes them then."""
        if blob_id is not None:
            self.delete(blob_id)
        if part_ids:
            self._delete_pinned_parts(part_ids, settling=settling)
        if blob_id is not None and sidecar_withdrawn:
            unlink_quietly(self.withdrawn_path(blob_id))  # the delete is done

    def _delete_pinned_parts(self, part_ids: Sequence[str], *, settling: bool) -> None:
        try:
            fd = os.open(self.blob_path(part_ids[0]), os.O_RDONLY)
        except FileNotFoundError:
            if settling:
                self._delete_parts(part_ids)
            return  # another removal started first: the parts are its (or its readers')
        self.delete(part_ids[0])  # from here on, no new reader can pin the parts
        try:
            if _try_flock(fd, fcntl.LOCK_EX):
                self._delete_parts(part_ids)
        finally:
            os.close(fd)

    def _delete_parts(self, part_ids: Sequence[str]) -> None:
        for part_id in part_ids:
            self.delete(part_id)

    def pin_parts(self, part_ids: Sequence[str]) -> PartsPin:
        """Hold the part blobs of a composite object until the pin is released, so that a
        delete committed meanwhile can not remove them under a streamed read. Raises
        FileNotFoundError when the object's files are being removed already."""
        path = self.blob_path(part_ids[0])
        fd = os.open(path, os.O_RDONLY)
        pin = PartsPin(self, tuple(part_ids), fd)
        try:
            held = _try_flock(fd, fcntl.LOCK_SH) and os.fstat(fd).st_nlink > 0
        except BaseException:
            pin.release()
            raise
        if not held:
            pin.release()
            raise FileNotFoundError(errno.ENOENT, "the object is being deleted", path)
        return pin

    # -- records of open uploads -----------------------------------------------------
    def upload_record_path(self, upload_id: str) -> str:
        if not _UPLOAD_ID.fullmatch(upload_id):
            raise ValueError(f"invalid upload id {upload_id!r}")
        return os.path.join(self.upload_root, upload_id + UPLOAD_RECORD_SUFFIX)

    def write_upload_record(self, upload_id: str, record: dict[str, Any]) -> None:
        """Write (or replace) the record of an open upload atomically and durably."""
        path = self.upload_record_path(upload_id)
        self._ensure_dir(self.upload_root)
        body = json.dumps({"format": SIDECAR_FORMAT, **record}, sort_keys=True).encode()
        self._write_atomically(path, body)

    def remove_upload_record(self, upload_id: str) -> None:
        """Remove an upload's record durably (gone already: nothing to do)."""
        try:
            os.unlink(self.upload_record_path(upload_id))
        except FileNotFoundError:
            return
        self._fsync_dir(self.upload_root)

    def read_upload_record(self, upload_id: str) -> dict[str, Any]:
        with open(self.upload_record_path(upload_id), "rb") as handle:
            data: dict[str, Any] = json.load(handle)
        return data

    def upload_record_ids(self) -> list[str]:
        """The upload ids that have a record, sorted."""
        if not os.path.isdir(self.upload_root):
            return []
        found = (name[: -len(UPLOAD_RECORD_SUFFIX)] for name in os.listdir(self.upload_root)
                 if name.endswith(UPLOAD_RECORD_SUFFIX))
        return sorted(upload_id for upload_id in found if _UPLOAD_ID.fullmatch(upload_id))

    # -- reads -----------------------------------------------------------------------
    def open_blob(self, blob_id: str) -> BlobFile:
        """The blob's bytes (FileNotFoundError when it is missing); the caller closes it."""
        return BlobFile(blob_id, self.blob_path(blob_id))

    def reader(self, segments: Sequence[Segment], record: StagedObject | None = None,
               customer_key: CustomerKey | None = None) -> BlobReader:
        """A reader of the concatenation of `segments` (nothing is opened yet), seen
        through the stages of `record` (the blob's own bytes without one; an SSE-C
        record's with the customer's key)."""
        if record is None:
            return BlobReader(segments, self.open_blob)
        return BlobReader(segments, self.stages.opener(record, self.open_blob, customer_key))

    def blob_reader(self, blob_id: str, size: int | None = None) -> BlobReader:
        """A reader of a whole blob: `size` bytes (from its record), else as big as its
        file is."""
        if size is None:
            with self.open_blob(blob_id) as blob:
                size = blob.size()
        return self.reader([Segment(blob_id, 0, size)])

    def copy_segments(
        self, segments: Sequence[Segment], blob_id: str, sidecar: dict[str, Any], *,
        want_md5: bool, source: StagedObject | None = None, writer: BlobWriter | None = None,
        source_key: CustomerKey | None = None,
    ) -> str | None:
        """Write the concatenation of `segments` (logical bytes of `source`) as a new
        durable blob with its sidecar. The kernel copies the bytes (copy_file_range) when
        they are stored as they read (`source`'s plan is the identity), no MD5 is wanted
        and no `writer` (the destination's stages, from the factory) is given; otherwise
        they pass once through a reader (the source's stages) and that writer (stored as
        sent without one). Returns the hex MD5 when asked."""
        staged = source is not None and not plan_of(source).identity
        if want_md5 or staged or writer is not None:
            md5 = self._copy_hashed(segments, blob_id, sidecar, source if staged else None,
                                    writer, source_key)
            return md5 if want_md5 else None
        tmp = os.path.join(self.tmp_dir, self._tmp_name(".copy"))
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            for segment in segments:
                with self.open_blob(segment.blob_id) as blob:
                    _kernel_copy(blob, segment, out)
        except BaseException:
            os.close(out)
            unlink_quietly(tmp)
            raise
        self.commit_file(out, tmp, blob_id, sidecar)
        return None

    def _copy_hashed(self, segments: Sequence[Segment], blob_id: str,
                     sidecar: dict[str, Any], source: StagedObject | None,
                     writer: BlobWriter | None, source_key: CustomerKey | None = None) -> str:
        if writer is None:
            writer = self.stages.writer(self.tmp_dir, memory_limit=0)
        try:
            with self.reader(segments, source, source_key) as reader:
                for chunk in reader.chunks(COPY_CHUNK_BYTES):
                    writer.write(chunk)
            held = writer.detach()
        finally:
            writer.close()
        self.commit(held, blob_id, sidecar)
        return writer.md5_hex

    def read_sidecar(self, blob_id: str) -> dict[str, Any]:
        with open(self.sidecar_path(blob_id), "rb") as handle:
            data: dict[str, Any] = json.load(handle)
        return data

    def torn_blob(self, blob_id: str, sidecar: dict[str, Any]) -> bool:
        """Whether a sidecar written in one sync with its blob (`commit_bytes`: it holds
        `BLOB_CHECK`) stands beside bytes that are not the ones it was written with: a
        crash came before that sync, so the write was never answered and has no row. A
        sidecar without the check was written after its blob was durable (False)."""
        check = sidecar.get(BLOB_CHECK)
        if not isinstance(check, dict):
            return False
        try:
            with open(self.blob_path(blob_id), "rb") as handle:
                data = handle.read(int(check.get("bytes", -1)) + 1)
        except (OSError, ValueError, TypeError):
            return True
        return blob_check(data) != check

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


class PartsPin:
    """A streamed read's hold on the parts of a composite object (`BlobStore.pin_parts`):
    an open descriptor of its first part blob, locked shared."""

    __slots__ = ("_store", "_part_ids", "_fd")

    def __init__(self, store: BlobStore, part_ids: tuple[str, ...], fd: int) -> None:
        self._store = store
        self._part_ids = part_ids
        self._fd: int | None = fd

    def release(self) -> None:
        """Let go (idempotent). When the object was deleted meanwhile and no other reader
        holds its parts any more, remove them: whoever takes the lock exclusively last is
        the one who saw every other holder gone (each drops its own lock first)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if os.fstat(fd).st_nlink == 0:
                fcntl.flock(fd, fcntl.LOCK_UN)
                if _try_flock(fd, fcntl.LOCK_EX):
                    self._store._delete_parts(self._part_ids)
        except OSError:
            pass  # parts left behind are orphans that `objstore check --repair` reclaims
        finally:
            os.close(fd)


def _fdatasync_all(fds: Sequence[int], fresh_dirs: Sequence[str] = ()
                   ) -> Callable[[], None]:
    """The syncs of a write alone on the barrier: the data of its files, and the entries
    of the directories it created (`BlobStore._make_dirs`)."""
    def sync() -> None:
        for fd in fds:
            os.fdatasync(fd)
        _fsync_parents_of(fresh_dirs)()
    return sync


def _raise_outcome(outcomes: list[Exception | None]) -> None:
    """The one outcome of a batch of one, raised when it failed."""
    if outcomes[0] is not None:
        raise outcomes[0]


def _many_syncs(fds: Sequence[int], fresh_dirs: Sequence[str], directories: Sequence[str]
                ) -> Callable[[], None]:
    """The syncs of `commit_bytes_many` without `syncfs` (alone on the barrier, or where
    it is not trusted): every file's data, the entries of the directories it created, then
    each directory's entries."""
    def sync() -> None:
        for fd in fds:
            os.fdatasync(fd)
        _fsync_parents_of(fresh_dirs)()
        for directory in directories:
            fsync_dir(directory)
    return sync


def _manifest_syncs(fd: int, directory: str) -> Callable[[], None]:
    """The syncs of a manifest alone on the barrier: its data, then its entry."""
    def sync() -> None:
        os.fdatasync(fd)
        fsync_dir(directory)
    return sync


def _fsync_dir_of(path: str) -> Callable[[], None]:
    return lambda: fsync_dir(path)


def _fsync_parents_of(fresh_dirs: Sequence[str]) -> Callable[[], None]:
    """Sync the parent of each of `fresh_dirs`, once each, outermost first: their entries
    become durable."""
    parents = list(dict.fromkeys(os.path.dirname(d) for d in fresh_dirs))

    def sync() -> None:
        for parent in parents:
            fsync_dir(parent)
    return sync


def _fsync_dirs_of(paths: Sequence[str]) -> Callable[[], None]:
    """The syncs of a caller alone on the barrier: each directory, in order."""
    def sync() -> None:
        for path in paths:
            fsync_dir(path)
    return sync


def _try_flock(fd: int, operation: int) -> bool:
    """Take an flock without waiting; False when another open file holds a conflicting
    one."""
    try:
        fcntl.flock(fd, operation | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _kernel_copy(source: BlobFile, segment: Segment, out: int) -> None:
    """Append a segment of an open blob to `out` without passing through Python."""
    offset, remaining = segment.offset, segment.length
    while remaining > 0:
        copied = os.copy_file_range(source.fileno(), out, remaining, offset)
        if copied == 0:
            raise OSError(f"blob {segment.blob_id} is shorter than expected")
        offset += copied
        remaining -= copied
