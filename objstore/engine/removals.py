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
run `BlobStore.delete_version` of each version on the IO pool, one job at a time.
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


def versions_of(removed: Sequence[ObjectRecord]) -> list[Version]:
    """The files of versions whose rows a commit removed: those that have any."""
    return [(record.blob_id, [part.blob_id for part in record.parts])
            for record in removed if record.blob_id is not None or record.parts]


class RemovalQueue:
    """Versions whose files are to go, removed by one IO job at a time (module notes)."""

    def __init__(self, blobs: BlobStore, io: Runner) -> None:
        self._blobs = blobs
        self._io = io
        self._waiting: list[Version] = []
        self._busy = False
        self._drained: list[Deferred[None]] = []

    def remove(self, versions: Sequence[Version]) -> None:
        """Queue the removal of `versions`. Never fails: a file that can not be removed is
        logged, and left to `objstore check --repair`."""
        if not versions:
            return
        self._waiting.extend(versions)
        if not self._busy:
            self._next()

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
        return len(self._waiting)

    def _next(self, _: object = None) -> None:
        if not self._waiting:
            self._busy = False
            drained, self._drained = self._drained, []
            for each in drained:
                each.callback(None)
            return
        self._busy = True
        batch, self._waiting = self._waiting, []
        job = self._io.run(self._remove_all, batch)
        job.addErrback(lambda failure: log.failure(
            "could not delete the unreachable blobs of deleted versions", failure))
        job.addCallback(self._next)

    def _remove_all(self, versions: Sequence[Version]) -> None:
        """(IO pool) Each version's files; an error stops only that version."""
        for blob_id, part_ids in versions:
            try:
                self._blobs.delete_version(blob_id, part_ids)
            except OSError:
                log.failure("could not delete the unreachable blobs of {blob_id}",
                            blob_id=blob_id)
