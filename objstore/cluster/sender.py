"""`ClientSender`: the fan-out's `PeerSender` on top of `ClusterClient`.

The fan-out speaks in acks or None (no ack) and hands blobs as `BlobPayload` (a stored
file, its size and SHA-256); the client speaks in `Ack | SendFailure` and takes bytes or a
body producer. This module owns only that translation:

- a row may carry its blob's bytes (`blob`, read by the fan-out: fanout.py);
- a blob is read whole on the IO pool when it is small (`INLINE_BLOB_BYTES`) and
  streamed otherwise by a `SliceProducer` whose slices are `os.pread` on the IO pool (the
  reactor never reads the file; the file stays open until the request is over);
- a `SendFailure` is logged at info and becomes None (False for a blob);
- `send_op` posts the op (POST /cluster/v1/op); a `SendFailure` is False;
- the fan-out's `deadline` (one per write and peer) is handed to every request of it.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

from twisted.logger import Logger

from objstore.cluster.client import SendFailure
from objstore.cluster.fanout import BlobPayload, ClusterOp
from objstore.cluster.wire import ReplicatedDelete
from objstore.convergence.ack import Ack
from objstore.http.slice_producer import SliceProducer
from objstore.meta.records import ObjectRecord
from objstore.threads import Runner

log = Logger()

# Blobs up to this size are read whole on the IO pool (no file read on the reactor).
INLINE_BLOB_BYTES = 8 * 1024 * 1024


class Client(Protocol):
    """What this adapter needs of `ClusterClient`."""

    async def send_object(self, base_url: str, record: ObjectRecord, *,
                          deadline: float | None = None, blob: bytes | None = None
                          ) -> Ack | SendFailure: ...

    async def send_delete(self, base_url: str, delete: ReplicatedDelete, *,
                          deadline: float | None = None) -> Ack | SendFailure: ...

    async def put_blob(self, base_url: str, blob_id: str, body: Any, sha256: str, *,
                       deadline: float | None = None) -> Ack | SendFailure: ...

    async def send_op(self, base_url: str, op: ClusterOp) -> bool | SendFailure: ...


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


class ClientSender:
    """The `PeerSender` the fan-out is given (see the module docstring)."""

    def __init__(self, client: Client, io: Runner) -> None:
        self._client = client
        self._io = io

    async def send_object(self, base_url: str, record: ObjectRecord, *,
                          deadline: float | None = None, blob: bytes | None = None
                          ) -> Ack | None:
        return _ack(await self._client.send_object(base_url, record, deadline=deadline,
                                                   blob=blob), base_url)

    async def send_delete(self, base_url: str, bucket: str, key: str, version_id: str,
                          deleted_at: float, *, deadline: float | None = None) -> Ack | None:
        delete = ReplicatedDelete(bucket=bucket, key=key, version_id=version_id,
                                  deleted_at=deleted_at)
        return _ack(await self._client.send_delete(base_url, delete, deadline=deadline),
                    base_url)

    async def put_blob(self, base_url: str, blob_id: str, blob: BlobPayload, *,
                       deadline: float | None = None) -> bool:
        if blob.size <= INLINE_BLOB_BYTES:
            body: Any = await self._io.run(_read, blob.path)
            return await self._put(base_url, blob_id, body, blob.sha256, deadline)
        fd = await self._io.run(os.open, blob.path, os.O_RDONLY | os.O_CLOEXEC)

        def read(offset: int, size: int) -> Any:
            return self._io.run(os.pread, fd, size, offset)

        producer = SliceProducer(read, blob.size)
        try:
            return await self._put(base_url, blob_id, producer, blob.sha256, deadline)
        finally:
            producer.stopProducing()
            await producer.idle()  # the close never races a read still in flight
            await self._io.run(os.close, fd)

    async def _put(self, base_url: str, blob_id: str, body: Any, sha256: str,
                   deadline: float | None) -> bool:
        answer = await self._client.put_blob(base_url, blob_id, body, sha256,
                                             deadline=deadline)
        return _ack(answer, base_url) is not None

    async def send_op(self, base_url: str, op: ClusterOp) -> bool:
        answer = await self._client.send_op(base_url, op)
        if isinstance(answer, SendFailure):
            log.info("peer {peer}: op {kind}: {why}", peer=base_url, kind=op.kind, why=answer)
            return False
        return answer


def _ack(answer: Ack | SendFailure, base_url: str) -> Ack | None:
    if isinstance(answer, SendFailure):
        log.info("peer {peer}: {why}", peer=base_url, why=answer)
        return None
    return answer
