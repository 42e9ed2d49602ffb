"""Archives: a gzip-compressed tar stream of named objects of one bucket (POST /admin/archive).

What this module owns:

* `ArchiveService.plan`: every named key resolved to its current object BEFORE a byte is
  streamed, so a missing bucket or key is a clean 404 and never a truncated download;
* `TarGzStream`: the archive as a sequence of compressed chunks, built incrementally (PAX tar
  headers from `tarfile`, object bytes read through a `BlobReader` in bounded chunks,
  gzip framing from `zlib.compressobj`). Memory is bounded by one chunk, whatever the size
  of the archive. Synchronous and free of Twisted: each call runs on a pool thread;
* `ArchiveProducer`: the push producer that moves those chunks into a consumer (the HTTP
  response), one pool call per chunk, honouring pause/resume from the transport and
  stopping when the client goes away. After each chunk it hands the objects whose bytes
  began in it to `sent` (the audit log's per-object entries: what left the server), so
  what it reports is bounded by a chunk, never the whole key list.

Reading and compressing run on the IO pool, never on the reactor: deflating incompressible
data costs about 5.6 ms per 256 KiB on the project's machines (46 MB/s). Measured while a
200 MiB archive streamed, GET /admin/health took 19 ms (median) with compression on the
reactor against 1.9 ms on the pool (idle: 2.0 ms), for 47 against 41 MiB/s of archive
throughput; zlib releases the GIL while it works.

Member names are object keys made safe to unpack: empty and `.` segments are dropped and a
`..` segment becomes `%2E%2E`, so no member can escape the extraction directory. A key ending
in `/` with no bytes (a directory marker) becomes a directory entry.

An object overwritten or deleted after planning: its new version is archived if it still
exists when its turn comes (the member header is written only once its first blob is
open); if it
is gone by then, or a blob vanishes in the middle of an object, the stream is cut (the
connection aborted) so the client sees a failed download rather than a silently wrong one.
"""

from __future__ import annotations

import tarfile
import zlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from twisted.internet import defer
from twisted.internet.interfaces import IPushProducer
from twisted.logger import Logger
from zope.interface import implementer

from objstore.blobs.reader import BlobReader
from objstore.errors import AdminError, S3Error
from objstore.meta.records import ObjectRecord
from objstore.threads import Runner

if TYPE_CHECKING:
    from objstore.engine.objects import ObjectService

log = Logger()

BLOCK_BYTES = tarfile.BLOCKSIZE  # 512
RECORD_BYTES = tarfile.RECORDSIZE  # 10240: tar pads the archive to whole records
CHUNK_BYTES = 1024 * 1024  # uncompressed bytes per pool call
GZIP_LEVEL = 6  # gzip's own default
GZIP_WBITS = 16 + zlib.MAX_WBITS  # gzip header and trailer
MAX_KEYS = 10_000
MAX_REFRESHES = 3  # an object replaced this often while its turn comes is given up


def tar_name(key: str) -> str:
    """The member name of an object key: relative, without `.`/`..` segments."""
    parts = ["%2E%2E" if part == ".." else part
             for part in key.split("/") if part not in ("", ".")]
    if not parts:
        return "".join(f"%{byte:02X}" for byte in key.encode())
    return "/".join(parts)


def is_directory_marker(record: ObjectRecord) -> bool:
    return record.key.endswith("/") and record.size == 0


def tar_header(record: ObjectRecord) -> bytes:
    """The PAX tar header of one object (long and non-ASCII names go in a PAX record)."""
    info = tarfile.TarInfo(tar_name(record.key))
    info.mtime = int(record.last_modified)
    if is_directory_marker(record):
        info.type = tarfile.DIRTYPE
        info.mode = 0o755
    else:
        info.size = record.size
        info.mode = 0o644
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


class MemberVanished(Exception):
    """The blob of the next member is gone before its header was written: look the key up
    again (`ArchiveService.refresh`) and carry on with what is there now."""

    def __init__(self, index: int) -> None:
        super().__init__(f"archive member {index} vanished")
        self.index = index


class TarGzStream:
    """The compressed archive of `records`, chunk by chunk. Not thread-safe: one caller at a
    time (the producer never overlaps calls)."""

    def __init__(
        self,
        records: Sequence[ObjectRecord],
        open_reader: Callable[[ObjectRecord], BlobReader],
        *,
        level: int = GZIP_LEVEL,
        chunk_bytes: int = CHUNK_BYTES,
    ) -> None:
        self._records = list(records)
        self._open_reader = open_reader
        self._chunk_bytes = chunk_bytes
        self._deflate = zlib.compressobj(level, zlib.DEFLATED, GZIP_WBITS)
        self._pending: list[bytes] = []  # compressed, not yet returned
        self._next_member = 0
        self._reader: BlobReader | None = None  # the current member's bytes
        self._member_read = 0
        self._member_left = 0
        self._padding = 0
        self._trailer_written = False
        self._finished = False
        self._started: list[ObjectRecord] = []  # members begun since `take_started`
        self.tar_bytes = 0  # uncompressed bytes produced so far

    def replace(self, index: int, record: ObjectRecord) -> None:
        """Archive `record` as member `index` (the key's current object after a refresh)."""
        self._records[index] = record

    def next_chunk(self) -> bytes | None:
        """The next compressed bytes (possibly empty while zlib buffers); None at the end."""
        if self._finished:
            return None
        produced = 0
        while produced < self._chunk_bytes:
            raw = self._next_raw(self._chunk_bytes - produced)  # may raise MemberVanished:
            if raw is None:  # what is in self._pending then goes out with the next call
                self._pending.append(self._deflate.flush())
                self._finished = True
                break
            produced += len(raw)
            self.tar_bytes += len(raw)
            self._pending.append(self._deflate.compress(raw))
        out, self._pending = b"".join(self._pending), []
        return out

    def take_started(self) -> list[ObjectRecord]:
        """The objects whose members began since the last call (at most one chunk's worth:
        each member takes at least a 512-byte header), as archived (after any refresh)."""
        started, self._started = self._started, []
        return started

    def close(self) -> None:
        self._close_reader()

    # -- the uncompressed tar stream ----------------------------------------------------
    def _next_raw(self, limit: int) -> bytes | None:
        if self._member_left > 0:
            return self._read_data(limit)
        if self._padding:
            padding, self._padding = self._padding, 0
            return bytes(padding)
        self._close_reader()
        if self._next_member < len(self._records):
            return self._start_member()
        if not self._trailer_written:
            self._trailer_written = True
            return self._trailer()
        return None

    def _start_member(self) -> bytes:
        index = self._next_member
        record = self._records[index]
        if not is_directory_marker(record) and record.size > 0:
            reader = self._open_reader(record)
            try:
                reader.open()
            except FileNotFoundError:
                raise MemberVanished(index) from None
            self._reader = reader
        self._started.append(record)
        self._next_member += 1
        self._member_read = 0
        self._member_left = 0 if self._reader is None else self._reader.length
        self._padding = -self._member_left % BLOCK_BYTES
        return tar_header(record)

    def _read_data(self, limit: int) -> bytes:
        """The member's next bytes; a part blob that vanished meanwhile, or a blob shorter
        than its record, fails the stream (OSError)."""
        assert self._reader is not None
        data = self._reader.read(self._member_read, min(limit, self._member_left))
        self._member_read += len(data)
        self._member_left -= len(data)
        return data

    def _trailer(self) -> bytes:
        """Two zero blocks end the archive; tar then pads it to a whole record."""
        end = self.tar_bytes + 2 * BLOCK_BYTES
        return bytes(2 * BLOCK_BYTES + (-end % RECORD_BYTES))

    def _close_reader(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.close()


@implementer(IPushProducer)
class ArchiveProducer:
    """Streams a `TarGzStream` into `consumer` (an IConsumer such as an HTTP request).

    `done` fires (always with None) once the archive was written, the consumer stopped us,
    or the stream failed; a failure is logged and `abort` cuts the connection, since the
    response headers are long gone and a short archive must not look complete."""

    def __init__(
        self,
        stream: TarGzStream,
        runner: Runner,
        consumer: Any,
        *,
        refresh: Callable[[int], Awaitable[ObjectRecord | None]],
        abort: Callable[[], None],
        sent: Callable[[Sequence[ObjectRecord]], Awaitable[None]] | None = None,
    ) -> None:
        self._stream = stream
        self._runner = runner
        self._consumer = consumer
        self._refresh = refresh
        self._abort = abort
        self._sent = sent
        self._paused: defer.Deferred[None] | None = None
        self._stopped = False
        self.bytes_written = 0
        self.done: defer.Deferred[None] = defer.Deferred(lambda _: self.stopProducing())

    def start(self) -> defer.Deferred[None]:
        self._consumer.registerProducer(self, True)
        pumping = defer.ensureDeferred(self._pump())
        pumping.addErrback(lambda failure: log.failure("archive producer failed", failure))
        return self.done

    def pauseProducing(self) -> None:  # noqa: N802 (Twisted's name)
        if self._paused is None:
            self._paused = defer.Deferred()

    def resumeProducing(self) -> None:  # noqa: N802 (Twisted's name)
        waiter, self._paused = self._paused, None
        if waiter is not None:
            waiter.callback(None)

    def stopProducing(self) -> None:  # noqa: N802 (Twisted's name)
        self._stopped = True
        self.resumeProducing()

    async def _pump(self) -> None:
        error: BaseException | None = None
        try:
            while not self._stopped:
                if self._paused is not None:
                    await self._paused
                    continue
                chunk = await self._next_chunk()
                if chunk is None or self._stopped:
                    break
                if chunk:
                    self.bytes_written += len(chunk)
                    self._consumer.write(chunk)
                await self._report_sent()
        except Exception as exc:
            error = exc
        finally:
            self._stream.close()  # no pool call is in flight here
            # A web request whose connection is gone has no channel to unregister from;
            # one that is still connected must be left without a producer before it finishes.
            if getattr(self._consumer, "channel", True) is not None:
                self._consumer.unregisterProducer()
        self._finish(error)

    async def _report_sent(self) -> None:
        """Tell `sent` about the members whose bytes went out with the last chunk (those of
        a chunk that never went out, because the stream failed, are not reported)."""
        started = self._stream.take_started()
        if started and self._sent is not None:
            await self._sent(started)

    async def _next_chunk(self) -> bytes | None:
        refreshes = 0
        while True:
            try:
                chunk: bytes | None = await self._runner.run(self._stream.next_chunk)
                return chunk
            except MemberVanished as gone:
                refreshes += 1
                record = await self._refresh(gone.index) if refreshes <= MAX_REFRESHES else None
                if record is None:
                    raise
                self._stream.replace(gone.index, record)

    def _finish(self, error: BaseException | None) -> None:
        if error is not None and not self._stopped:
            log.error("archive stream failed after {n} bytes: {error}",
                      n=self.bytes_written, error=repr(error))
            self._abort()
        if not self.done.called:
            self.done.callback(None)


@dataclass(frozen=True)
class ArchivePlan:
    bucket: str
    records: tuple[ObjectRecord, ...]

    @property
    def total_bytes(self) -> int:
        return sum(record.size for record in self.records)


def check_keys(keys: Any) -> list[str]:
    """The requested keys, de-duplicated in order; BadRequest unless a non-empty array of
    non-empty strings of at most MAX_KEYS entries."""
    if not isinstance(keys, list) or not keys:
        raise AdminError("BadRequest", "keys must be a non-empty array of object keys.")
    if len(keys) > MAX_KEYS:
        raise AdminError("BadRequest", f"An archive holds at most {MAX_KEYS} keys.")
    if not all(isinstance(key, str) and key for key in keys):
        raise AdminError("BadRequest", "keys must contain only non-empty strings.")
    return list(dict.fromkeys(keys))


class ArchiveService:
    def __init__(self, objects: ObjectService, io: Runner) -> None:
        self._objects = objects
        self._io = io

    async def plan(self, bucket: str, keys: Sequence[str]) -> ArchivePlan:
        """The current object of every key; NotFound for a missing bucket or ANY missing
        key, before anything is streamed."""
        records = [await self._current(bucket, key) for key in keys]
        for record in records:
            # A compressed object reads through its stages like a GET (the reader).
            if record.encryption_algorithm:
                raise AdminError("BadRequest", f"{record.key} is stored encrypted; "
                                               "archives cannot include it yet.")
        return ArchivePlan(bucket, tuple(records))

    async def _current(self, bucket: str, key: str) -> ObjectRecord:
        try:
            return await self._objects.head(bucket, key)
        except S3Error as error:
            if error.code == "NoSuchBucket":
                raise AdminError("NotFound", f"No such bucket: {bucket}.") from None
            if error.code == "NoSuchKey":
                raise AdminError("NotFound", f"No such key in {bucket}: {key}.") from None
            raise

    async def refresh(self, record: ObjectRecord) -> ObjectRecord | None:
        """The key's current object now, or None when it is gone."""
        try:
            return await self._objects.head(record.bucket, record.key)
        except S3Error:
            return None

    def producer(
        self, plan: ArchivePlan, consumer: Any, abort: Callable[[], None],
        sent: Callable[[Sequence[ObjectRecord]], Awaitable[None]] | None = None,
    ) -> ArchiveProducer:
        stream = TarGzStream(plan.records, self._objects.reader)

        async def refresh(index: int) -> ObjectRecord | None:
            return await self.refresh(plan.records[index])

        return ArchiveProducer(stream, self._io, consumer, refresh=refresh, abort=abort,
                               sent=sent)

