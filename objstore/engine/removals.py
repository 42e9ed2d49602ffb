"""The removal of a deleted version's files after the answer, coalesced.

A permanent delete (DeleteObject of an unversioned key or of a version, DeleteObjects)
withdraws the version's sidecar durably before its row goes (blobs/store.py), so once the
row's COMMIT is done the delete is durable: the files left (the blob, its parts, the
withdrawn sidecar) are unreachable, and what a crash leaves of them is resolved at the
next start (`BlobStore.settle_withdrawn`). Their removal therefore runs after the answer,
on the IO pool, and the removals asked for while one job runs are taken together by the
next job: concurrent single deletes (`aws s3 rm --recursive` sends one DeleteObject per
key, ten at a time) cost one IO pool hand-off per batch, not one each.

`RemovalQueue` keeps its state on the reactor thread (where `remove` is called); its jobs
run `BlobStore.delete_version` of each version on the IO pool, one job at a time. The
versions of a batch delete withdrawn by a manifest (blobs/manifests.py) have their
sidecars in place (removed with the blob, no withdrawn one to look for), and the manifest
goes after them, in the same job, unless one of them could not be removed (the next start
then settles it).

The queue is bounded: `remove` returns a Deferred that fires at once while fewer than
`MAX_WAITING` versions wait, and otherwise once the next job has taken them. A caller
that waits for it before answering (DeleteObjects) is slowed to the pace of the removals
when deletes outrun them for long (one IO thread removes about 1,400 versions a second;
DeleteObjects deletes rows several times faster), instead of the queue growing without
end; at most about twice `MAX_WAITING` versions are held (the job's and the waiting).
"""

from __future__ import annotations

from collections.abc import Sequence

from twisted.internet.defer import Deferred, succeed
from twisted.logger import Logger

from objstore.blobs.store import BlobStore
from objstore.meta.records import ObjectRecord
from objstore.threads import Runner

log = Logger()

# (the version's own blob id, its parts' blob ids)
Version = tuple[str | None, Sequence[str]]
# Versions asked for together: whether their sidecars are in place (withdrawn by a
# manifest, not moved), and the manifest to remove after them (None: none, or kept).
Removal = tuple[Sequence[Version], bool, str | None]

MAX_WAITING = 50_000  # versions waiting for a job before `remove` makes its caller wait


def versions_of(removed: Sequence[ObjectRecord]) -> list[Version]:
    """The files of versions whose rows a commit removed: those that have any."""
    return [(record.blob_id, [part.blob_id for part in record.parts])
            for record in removed if record.blob_id is not None or record.parts]


class RemovalQueue:
    """Versions whose files are to go, removed by one IO job at a time (module notes)."""

    def __init__(self, blobs: BlobStore, io: Runner, *,
                 max_waiting: int = MAX_WAITING) -> None:
        self._blobs = blobs
        self._io = io
        self._max_waiting = max_waiting
        self._waiting: list[Removal] = []
        self._waiting_versions = 0
        self._busy = False
        self._drained: list[Deferred[None]] = []
        self._room: list[Deferred[None]] = []

    def remove(self, versions: Sequence[Version], *, in_place: bool = False,
               then_drop: str | None = None) -> Deferred[None]:
        """Queue the removal of `versions` (`in_place`: a batch's, whose sidecars a
        manifest withdrew; `then_drop`: that manifest, to go after them); the Deferred
        fires once the queue has room (module notes). Never fails: a file that can not be
        removed is logged, and left to `objstore check --repair` (a manifest, to the next
        start)."""
        if versions or then_drop is not None:
            self._waiting.append((versions, in_place, then_drop))
            self._waiting_versions += len(versions)
            if not self._busy:
                self._next()
        if self._waiting_versions < self._max_waiting:
            return succeed(None)
        room: Deferred[None] = Deferred()
        self._room.append(room)
        return room

    def drained(self) -> Deferred[None]:
        """Fires once nothing waits or is being removed (tests, an orderly stop)."""
        if not self._busy:
            return succeed(None)
        done: Deferred[None] = Deferred()
        self._drained.append(done)
        return done

    @property
    def pending(self) -> int:
        """Versions waiting for the next job (diagnostics and tests)."""
        return self._waiting_versions

    def _next(self, _: object = None) -> None:
        if not self._waiting:
            self._busy = False
            drained, self._drained = self._drained, []
            for each in drained:
                each.callback(None)
            return
        self._busy = True
        batch, self._waiting, self._waiting_versions = self._waiting, [], 0
        room, self._room = self._room, []
        for each in room:
            each.callback(None)
        job = self._io.run(self._remove_all, batch)
        job.addErrback(lambda failure: log.failure(
            "could not delete the unreachable blobs of deleted versions", failure))
        job.addCallback(self._next)

    def _remove_all(self, removals: Sequence[Removal]) -> None:
        """(IO pool) Each version's files, then its manifest; an error stops only that
        version (and keeps its manifest)."""
        for versions, in_place, manifest in removals:
            removed = True
            for blob_id, part_ids in versions:
                try:
                    self._blobs.delete_version(blob_id, part_ids,
                                               sidecar_withdrawn=not in_place)
                except OSError:
                    removed = False
                    log.failure("could not delete the unreachable blobs of {blob_id}",
                                blob_id=blob_id)
            if manifest is None:
                continue
            try:
                if removed:
                    self._blobs.drop_manifest(manifest)
            except OSError:
                log.failure("could not remove the withdrawal manifest {manifest}",
                            manifest=manifest)
