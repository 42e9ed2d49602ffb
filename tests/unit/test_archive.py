"""The archive stream without a reactor: tar framing and gzip over blob segments (plain and
composite objects, directory markers, unsafe names), the push producer's pause, resume,
stop and failure paths, the objects it reports as sent (chunk by chunk, only what went
out), the audit entries an archive records for them, and the checks made before streaming."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import uuid
from pathlib import Path
from typing import Any

import pytest

from objstore.admin.archive_routes import (
    ARCHIVED_OBJECT,
    AUDIT_BACKLOG,
    ArchiveRoutes,
    archive_file_name,
)
from objstore.blobs.reader import BlobFile, BlobReader
from objstore.blobs.segments import plan_segments
from objstore.engine.archive import (
    RECORD_BYTES,
    ArchiveProducer,
    MemberVanished,
    TarGzStream,
    check_keys,
    tar_name,
)
from objstore.errors import AdminError
from objstore.iam.identity import Principal
from objstore.meta.records import ObjectRecord, PartRef
from objstore.threads import InlinePool


class Blobs:
    """Blob files in a directory; `reader` reads an object's bytes as the blob store's
    readers do."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def add(self, data: bytes) -> str:
        blob_id = str(uuid.uuid4())
        (self.root / blob_id).write_bytes(data)
        return blob_id

    def reader(self, record: ObjectRecord) -> BlobReader:
        return BlobReader(plan_segments(record, 0, record.size),
                          lambda blob_id: BlobFile(blob_id, str(self.root / blob_id)))


def plain(blobs: Blobs, key: str, data: bytes) -> ObjectRecord:
    return ObjectRecord("b", key, "null", blobs.add(data), len(data), "etag", 1_700_000_000.0)


def composite(blobs: Blobs, key: str, pieces: list[bytes]) -> ObjectRecord:
    parts = tuple(PartRef(n, blobs.add(p), len(p), "e") for n, p in enumerate(pieces, 1))
    return ObjectRecord("b", key, "null", None, sum(map(len, pieces)), "etag-2",
                        1_700_000_000.0, parts=parts)


def drain(stream: TarGzStream) -> bytes:
    out = []
    while (chunk := stream.next_chunk()) is not None:
        out.append(chunk)
    stream.close()
    return b"".join(out)


def members(archive: bytes) -> dict[str, bytes | None]:
    found: dict[str, bytes | None] = {}
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        for info in tar:
            handle = tar.extractfile(info)
            found[info.name] = None if handle is None else handle.read()
    return found


@pytest.fixture
def blobs(tmp_path: Path) -> Blobs:
    return Blobs(tmp_path)


def test_plain_composite_and_empty_objects_unpack_to_their_bytes(blobs: Blobs) -> None:
    big = os.urandom(3 * 1024 * 1024 + 17)
    records = [
        plain(blobs, "a.txt", b"hello"),
        composite(blobs, "dir/multi.bin", [big[:2_000_000], big[2_000_000:]]),
        plain(blobs, "empty", b""),
        plain(blobs, "unicode/é 名前.txt", b"x" * 513),
    ]
    archive = drain(TarGzStream(records, blobs.reader, chunk_bytes=256 * 1024))
    assert members(archive) == {
        "a.txt": b"hello", "dir/multi.bin": big, "empty": b"", "unicode/é 名前.txt": b"x" * 513,
    }
    raw = gzip.decompress(archive)
    assert len(raw) % RECORD_BYTES == 0  # padded to whole tar records, as tar does


def test_directory_markers_become_directories_and_names_cannot_escape(blobs: Blobs) -> None:
    records = [plain(blobs, "photos/", b""), plain(blobs, "../../etc/passwd", b"no"),
               plain(blobs, "/abs//./x", b"y")]
    with tarfile.open(fileobj=io.BytesIO(drain(TarGzStream(records, blobs.reader))),
                      mode="r:gz") as tar:
        infos = {info.name: info for info in tar}
    assert infos["photos"].isdir()
    assert set(infos) == {"photos", "%2E%2E/%2E%2E/etc/passwd", "abs/x"}


@pytest.mark.parametrize(("key", "name"), [
    ("a/b", "a/b"), ("a//b/", "a/b"), ("./a", "a"), ("..", "%2E%2E"), ("/", "%2F"),
    (".", "%2E"),
])
def test_tar_names(key: str, name: str) -> None:
    assert tar_name(key) == name


def test_a_long_name_goes_in_a_pax_header(blobs: Blobs) -> None:
    key = "deep/" * 60 + "file"
    assert members(drain(TarGzStream([plain(blobs, key, b"z")], blobs.reader))) == {key: b"z"}


def test_chunks_are_bounded_and_compressed(blobs: Blobs) -> None:
    data = b"abc" * 1_000_000
    stream = TarGzStream([plain(blobs, "k", data)], blobs.reader, chunk_bytes=64 * 1024)
    sizes = []
    while (chunk := stream.next_chunk()) is not None:
        sizes.append(len(chunk))
    assert max(sizes) <= 64 * 1024 + 1024  # never more than a chunk of input, compressed
    assert sum(sizes) < len(data) // 50
    assert stream.tar_bytes > len(data)


@pytest.mark.parametrize("chunk_bytes", [512, 1024 * 1024])
def test_a_vanished_blob_before_its_header_can_be_replaced(blobs: Blobs,
                                                           chunk_bytes: int) -> None:
    data = os.urandom(300_000)  # compressed output exists when member 1 turns out gone
    first, second = plain(blobs, "one", data), plain(blobs, "two", b"old")
    os.unlink(blobs.root / str(second.blob_id))
    stream = TarGzStream([first, second], blobs.reader, chunk_bytes=chunk_bytes)
    out = []
    with pytest.raises(MemberVanished) as caught:
        while (chunk := stream.next_chunk()) is not None:
            out.append(chunk)
    assert caught.value.index == 1
    stream.replace(1, plain(blobs, "two", b"new"))
    out.append(drain(stream))  # resumes where it stopped: nothing of member 1 was written
    assert members(b"".join(out)) == {"one": data, "two": b"new"}


def test_a_short_blob_fails_the_stream(blobs: Blobs) -> None:
    record = plain(blobs, "k", b"12345")
    (blobs.root / str(record.blob_id)).write_bytes(b"12")
    with pytest.raises(OSError, match="shorter"):
        drain(TarGzStream([record], blobs.reader))


# -- the producer --------------------------------------------------------------------------


class Consumer:
    """Like a twisted.web request: after its connection is lost it has no channel, and
    unregistering a producer then fails."""

    def __init__(self, pause_after: int | None = None) -> None:
        self.data = bytearray()
        self.producer: Any = None
        self.unregistered = False
        self.pause_after = pause_after
        self.channel: object | None = object()

    def registerProducer(self, producer: Any, streaming: bool) -> None:  # noqa: N802
        assert streaming
        self.producer = producer

    def unregisterProducer(self) -> None:  # noqa: N802
        assert self.channel is not None, "unregistered from a request without a channel"
        self.unregistered = True

    def write(self, data: bytes) -> None:
        self.data += data
        if self.pause_after is not None and len(self.data) >= self.pause_after:
            self.pause_after = None
            self.producer.pauseProducing()


def producer_for(records: list[ObjectRecord], blobs: Blobs, consumer: Consumer,
                 refresh: Any = None, sent: list[list[ObjectRecord]] | None = None,
                 ) -> tuple[ArchiveProducer, list[bool]]:
    aborted: list[bool] = []

    async def no_refresh(index: int) -> ObjectRecord | None:
        return None

    async def report(records: Any) -> None:
        assert sent is not None
        sent.append(list(records))

    stream = TarGzStream(records, blobs.reader, chunk_bytes=4096)
    producer = ArchiveProducer(stream, InlinePool(), consumer, refresh=refresh or no_refresh,
                               abort=lambda: aborted.append(True),
                               sent=report if sent is not None else None)
    return producer, aborted


def test_producer_writes_everything_and_finishes(blobs: Blobs) -> None:
    data = os.urandom(50_000)
    consumer = Consumer()
    producer, aborted = producer_for([plain(blobs, "k", data)], blobs, consumer)
    done = producer.start()
    assert done.called and consumer.unregistered and not aborted
    assert members(bytes(consumer.data)) == {"k": data}


def test_producer_waits_while_paused(blobs: Blobs) -> None:
    data = os.urandom(50_000)
    consumer = Consumer(pause_after=1)
    producer, _ = producer_for([plain(blobs, "k", data)], blobs, consumer)
    done = producer.start()
    written = len(consumer.data)
    assert not done.called and 0 < written < len(data)
    producer.resumeProducing()
    assert done.called
    assert members(bytes(consumer.data)) == {"k": data}


@pytest.mark.parametrize("connected", [True, False])
def test_stop_ends_the_stream_quietly(blobs: Blobs, connected: bool) -> None:
    consumer = Consumer(pause_after=1)
    producer, aborted = producer_for([plain(blobs, "k", os.urandom(50_000))], blobs, consumer)
    done = producer.start()
    if not connected:
        consumer.channel = None
    producer.stopProducing()
    assert done.called and not aborted
    # Still connected (the transport stops us first): the request must not finish with a
    # producer registered. Gone: there is nothing left to unregister from.
    assert consumer.unregistered is connected


def test_a_failure_mid_stream_aborts_the_connection(blobs: Blobs) -> None:
    record = plain(blobs, "k", b"12345")
    (blobs.root / str(record.blob_id)).write_bytes(b"")
    consumer = Consumer()
    producer, aborted = producer_for([record], blobs, consumer)
    assert producer.start().called and aborted == [True]


def test_a_vanished_member_is_looked_up_again(blobs: Blobs) -> None:
    old = plain(blobs, "k", b"old")
    os.unlink(blobs.root / str(old.blob_id))
    new = plain(blobs, "k", b"new bytes")

    async def refresh(index: int) -> ObjectRecord | None:
        return new

    consumer = Consumer()
    producer, aborted = producer_for([old], blobs, consumer, refresh)
    assert producer.start().called and not aborted
    assert members(bytes(consumer.data)) == {"k": b"new bytes"}


def test_a_member_gone_for_good_aborts(blobs: Blobs) -> None:
    old = plain(blobs, "k", b"old")
    os.unlink(blobs.root / str(old.blob_id))
    consumer = Consumer()
    producer, aborted = producer_for([old], blobs, consumer)
    assert producer.start().called and aborted == [True]


def test_sent_objects_are_reported_chunk_by_chunk(blobs: Blobs) -> None:
    records = [plain(blobs, f"small-{n:03d}", b"x") for n in range(100)]
    sent: list[list[ObjectRecord]] = []
    consumer = Consumer()
    producer, _ = producer_for(records, blobs, consumer, sent=sent)
    assert producer.start().called
    assert [record for batch in sent for record in batch] == records
    # Each report holds what began in one 4 KiB chunk (headers of 512 bytes at least),
    # never the whole list.
    assert len(sent) > 10 and max(map(len, sent)) <= 4096 // 512 + 1


def test_objects_of_a_chunk_that_never_went_out_are_not_reported(blobs: Blobs) -> None:
    whole = plain(blobs, "whole", os.urandom(10_000))  # its own chunks go out
    cut = plain(blobs, "cut", os.urandom(50_000))  # fails in the chunk holding its header
    (blobs.root / str(cut.blob_id)).write_bytes(os.urandom(10))  # shorter than its record
    sent: list[list[ObjectRecord]] = []
    consumer = Consumer()
    producer, aborted = producer_for([whole, cut], blobs, consumer, sent=sent)
    assert producer.start().called and aborted == [True]
    assert [record.key for batch in sent for record in batch] == ["whole"]


def test_a_refreshed_member_is_reported_as_archived(blobs: Blobs) -> None:
    old = plain(blobs, "k", b"old")
    os.unlink(blobs.root / str(old.blob_id))
    new = plain(blobs, "k", b"new bytes")

    async def refresh(index: int) -> ObjectRecord | None:
        return new

    sent: list[list[ObjectRecord]] = []
    producer, _ = producer_for([old], blobs, Consumer(), refresh, sent=sent)
    assert producer.start().called
    assert sent == [[new]]


class FakeAudit:
    def __init__(self, depth: int = 0) -> None:
        self.records: list[dict[str, Any]] = []
        self.depth = depth
        self.flushes = 0

    def record(self, operation: str, **fields: Any) -> None:
        self.records.append({"operation": operation, **fields})

    async def flush(self) -> int:
        self.flushes += 1
        return 0


class _Address:
    host = "192.0.2.9"


class FakeRequest:
    request_id = "REQ1"

    def getClientAddress(self) -> object:  # noqa: N802
        return _Address()


CALLER = Principal("u-1", "alice", False, "AKALICE")


def test_each_sent_object_gets_an_audit_entry_like_a_get_object(blobs: Blobs) -> None:
    audit = FakeAudit()
    routes = ArchiveRoutes(gate=None, archives=None, authorizer=None,  # type: ignore[arg-type]
                           audit=audit)
    sent = routes._sent_objects(FakeRequest(), CALLER)  # type: ignore[arg-type]
    assert sent is not None
    record = plain(blobs, "a/b.txt", b"12345")
    done = ensure(sent([record]))
    assert done.called
    assert audit.records == [{
        "operation": ARCHIVED_OBJECT, "bucket": "b", "key": "a/b.txt", "user": "alice",
        "user_id": "u-1", "access_key": "AKALICE", "source_ip": "192.0.2.9",
        "request_id": "REQ1", "bytes_out": 5, "version_id": "null"}]
    assert audit.flushes == 0


def test_a_long_audit_backlog_is_written_before_the_archive_goes_on(blobs: Blobs) -> None:
    audit = FakeAudit(depth=AUDIT_BACKLOG + 1)
    routes = ArchiveRoutes(gate=None, archives=None, authorizer=None,  # type: ignore[arg-type]
                           audit=audit)
    sent = routes._sent_objects(FakeRequest(), CALLER)  # type: ignore[arg-type]
    assert sent is not None
    assert ensure(sent([plain(blobs, "k", b"x")])).called
    assert audit.flushes == 1


def ensure(coroutine: Any) -> Any:
    from twisted.internet import defer

    return defer.ensureDeferred(coroutine)


# -- request checks ------------------------------------------------------------------------


@pytest.mark.parametrize("keys", [None, [], "k", [""], ["a", 3], [None]])
def test_bad_keys_are_400(keys: Any) -> None:
    with pytest.raises(AdminError) as caught:
        check_keys(keys)
    assert caught.value.status == 400


def test_keys_are_deduplicated_in_order() -> None:
    assert check_keys(["b", "a", "b"]) == ["b", "a"]


@pytest.mark.parametrize(("bucket", "name"), [
    ("photos", "photos.tar.gz"), ("my.bucket-1", "my.bucket-1.tar.gz"),
    ('a"b\r\n', "a_b__.tar.gz"), ("..", "archive.tar.gz"),
])
def test_file_names_are_sanitised(bucket: str, name: str) -> None:
    assert archive_file_name(bucket) == name
