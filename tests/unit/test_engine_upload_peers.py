"""The multipart engine's UploadPeers seam (engine/upload_peers.py): two engines (SQLite in
temp dirs, inline pools) stand for two nodes; the fake peers' `refresh` copies the other
node's upload and part rows here (what a control-plane merge does) and `fetch_parts`
copies the bytes of missing part blobs. A node asked about an upload it does not know
refreshes before answering NoSuchUpload; ListParts refreshes; a completion naming a part
not held here as named refreshes, and every part blob missing here is fetched before the
commit (ServiceUnavailable, upload left open, when one cannot be); a part not found after
a refresh that could not reach every node is ServiceUnavailable, InvalidPart only when
every node answered; a single node
(NO_UPLOAD_PEERS) answers as before."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from objstore.blobs.store import BlobStore
from objstore.engine.buckets import BucketService
from objstore.engine.changes import ChangeHook
from objstore.engine.multipart import (
    MAX_PART_NUMBER,
    ChecksumMode,
    CompletionClaims,
    MultipartService,
    RequestedPart,
)
from objstore.engine.objects import ObjectAttrs, ObjectService
from objstore.engine.upload_peers import NO_UPLOAD_PEERS, UploadPeers
from objstore.errors import S3Error
from objstore.http.spool import BodySpool
from objstore.meta.records import PartRecord, UploadRecord
from objstore.meta.store import SyncMetaStore
from tests.unit.conftest import local_stores, run
from tests.unit.test_changes import CALLER

MIB = 1024 * 1024


@dataclass
class Node:
    sql: SyncMetaStore
    blobs: BlobStore
    objects: ObjectService
    multipart: MultipartService

    def body(self, data: bytes) -> BodySpool:
        spool = BodySpool(self.blobs.tmp_dir, memory_limit=1024)
        spool.write(data)
        return spool

    def read(self, key: str) -> bytes:
        record = run(self.objects.head("bkt", key))
        return run(self.objects.read_bytes(record, 0, record.size))


@dataclass
class FakePeers:
    """The other node seen through the seam: `refresh` merges its upload and part rows
    here, `fetch_parts` copies its blobs (unless `bytes_lost`)."""

    here: SyncMetaStore | None = None
    here_blobs: BlobStore | None = None
    peer: Node | None = None
    enabled: bool = True
    bytes_lost: bool = False
    unreachable: bool = False  # the other node is down: a refresh reaches nobody
    refreshed: int = 0
    fetched: list[int] = field(default_factory=list)
    asked: list[list[int]] = field(default_factory=list)

    async def refresh(self) -> bool:
        self.refreshed += 1
        assert self.here is not None and self.peer is not None
        if self.unreachable:
            return False
        for upload in self.peer.sql.list_uploads("bkt", "", "", "", 1000):
            if self.here.get_upload(upload.upload_id) is None:
                self.here.create_upload(upload)
            for part in self.peer.sql.list_parts(upload.upload_id, 0, MAX_PART_NUMBER):
                self.here.put_part(part)
        return True

    async def fetch_parts(self, upload: UploadRecord, parts: Sequence[PartRecord]) -> bool:
        assert self.here_blobs is not None and self.peer is not None
        self.asked.append([part.part_number for part in parts])
        for part in parts:
            if self.here_blobs.blob_size(part.blob_id) is not None:
                continue
            if self.bytes_lost:
                return False
            with open(self.peer.blobs.blob_path(part.blob_id), "rb") as handle:
                self.here_blobs.commit_bytes(handle.read(), part.blob_id, {"kind": "part"})
            self.fetched.append(part.part_number)
        return True


def build(tmp_path: Path, peers: UploadPeers) -> Node:
    stores = local_stores(tmp_path)
    sql, meta, blobs, control = stores.sql, stores.meta, stores.blobs, stores.control
    io, clock = stores.io, lambda: 2000.0
    hook = ChangeHook()
    buckets = BucketService(meta, control, io, region="us-east-1", clock=clock, changes=hook)
    run(buckets.create(CALLER, "bkt", location=None, object_lock=False))
    return Node(sql, blobs, ObjectService(meta, blobs, io, clock=clock, changes=hook),
                MultipartService(meta, blobs, io, clock=clock, changes=hook, peers=peers))


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Node, Node, FakePeers]]:
    """(a, b, a's peers): b is the other node, seen from a through the fake."""
    fake = FakePeers()
    a = build(tmp_path / "a", fake)
    b = build(tmp_path / "b", NO_UPLOAD_PEERS)
    fake.here, fake.here_blobs, fake.peer = a.sql, a.blobs, b
    yield a, b, fake
    a.sql.close()
    b.sql.close()


def code_of(error: pytest.ExceptionInfo[S3Error]) -> str:
    return error.value.code


def test_an_upload_made_on_the_peer_is_found_after_a_refresh(
        pair: tuple[Node, Node, FakePeers]) -> None:
    a, b, fake = pair
    made = run(b.multipart.create(CALLER, "bkt", "k", ObjectAttrs(), ChecksumMode()))
    found = run(a.multipart.upload("bkt", "k", made.upload_id))
    assert (found.upload_id, fake.refreshed) == (made.upload_id, 1)
    run(a.multipart.upload("bkt", "k", made.upload_id))  # known now: no refresh
    assert fake.refreshed == 1


def test_an_upload_no_peer_knows_is_no_such_upload_after_one_refresh(
        pair: tuple[Node, Node, FakePeers]) -> None:
    a, _, fake = pair
    with pytest.raises(S3Error) as refused:
        run(a.multipart.upload("bkt", "k", "unknown"))
    assert (code_of(refused), fake.refreshed) == ("NoSuchUpload", 1)


def test_a_disabled_seam_is_not_asked(pair: tuple[Node, Node, FakePeers]) -> None:
    a, b, fake = pair
    fake.enabled = False
    made = run(b.multipart.create(CALLER, "bkt", "k", ObjectAttrs(), ChecksumMode()))
    with pytest.raises(S3Error) as refused:
        run(a.multipart.upload("bkt", "k", made.upload_id))
    assert (code_of(refused), fake.refreshed) == ("NoSuchUpload", 0)


def test_list_parts_refreshes(pair: tuple[Node, Node, FakePeers]) -> None:
    a, b, fake = pair
    upload = run(a.multipart.create(CALLER, "bkt", "k", ObjectAttrs(), ChecksumMode()))
    b.sql.create_upload(upload)
    run(b.multipart.upload_part(CALLER, upload, 1, b.body(b"on b"), {}))
    before = fake.refreshed
    parts, truncated = run(a.multipart.list_parts(upload, 0, 10))
    assert ([p.part_number for p in parts], truncated) == ([1], False)
    assert fake.refreshed == before + 1


def test_a_completion_with_parts_made_elsewhere_merges_and_fetches_them(
        pair: tuple[Node, Node, FakePeers]) -> None:
    a, b, fake = pair
    upload = run(a.multipart.create(CALLER, "bkt", "big", ObjectAttrs(), ChecksumMode()))
    b.sql.create_upload(upload)
    first, second = b"1" * (5 * MIB), b"the last part"
    one = run(b.multipart.upload_part(CALLER, upload, 1, b.body(first), {}))
    two = run(a.multipart.upload_part(CALLER, upload, 2, a.body(second), {}))
    record = run(a.multipart.complete(
        CALLER, upload, [RequestedPart(1, one.etag), RequestedPart(2, two.etag)],
        CompletionClaims()))
    assert (fake.refreshed, fake.asked, fake.fetched) == (1, [[1, 2]], [1])
    assert record.size == len(first) + len(second)
    assert a.read("big") == first + second
    assert a.sql.get_upload(upload.upload_id) is None


def test_a_completion_whose_parts_are_all_here_does_not_refresh(
        pair: tuple[Node, Node, FakePeers]) -> None:
    a, _, fake = pair
    upload = run(a.multipart.create(CALLER, "bkt", "k", ObjectAttrs(), ChecksumMode()))
    part = run(a.multipart.upload_part(CALLER, upload, 1, a.body(b"here"), {}))
    run(a.multipart.complete(CALLER, upload, [RequestedPart(1, f'"{part.etag}"')],
                             CompletionClaims()))
    assert (fake.refreshed, fake.asked, fake.fetched) == (0, [[1]], [])
    assert a.read("k") == b"here"


def test_a_part_whose_bytes_no_peer_gives_leaves_the_upload_open(
        pair: tuple[Node, Node, FakePeers]) -> None:
    a, b, fake = pair
    fake.bytes_lost = True
    upload = run(a.multipart.create(CALLER, "bkt", "k", ObjectAttrs(), ChecksumMode()))
    b.sql.create_upload(upload)
    part = run(b.multipart.upload_part(CALLER, upload, 1, b.body(b"elsewhere"), {}))
    with pytest.raises(S3Error) as refused:
        run(a.multipart.complete(CALLER, upload, [RequestedPart(1, part.etag)],
                                 CompletionClaims()))
    assert code_of(refused) == "ServiceUnavailable"
    assert a.sql.get_upload(upload.upload_id) is not None
    assert a.sql.get_object("bkt", "k") is None


def test_a_completion_naming_a_part_nobody_has_is_invalid_part(
        pair: tuple[Node, Node, FakePeers]) -> None:
    a, _, fake = pair
    upload = run(a.multipart.create(CALLER, "bkt", "k", ObjectAttrs(), ChecksumMode()))
    with pytest.raises(S3Error) as refused:
        run(a.multipart.complete(CALLER, upload, [RequestedPart(1, "0" * 32)],
                                 CompletionClaims()))
    assert (code_of(refused), fake.refreshed) == ("InvalidPart", 1)


def test_a_single_node_is_unchanged(tmp_path: Path) -> None:
    node = build(tmp_path, NO_UPLOAD_PEERS)
    try:
        with pytest.raises(S3Error) as refused:
            run(node.multipart.upload("bkt", "k", "unknown"))
        assert code_of(refused) == "NoSuchUpload"
        upload = run(node.multipart.create(CALLER, "bkt", "k", ObjectAttrs(),
                                           ChecksumMode()))
        part = run(node.multipart.upload_part(CALLER, upload, 1, node.body(b"x"), {}))
        assert [p.part_number for p in run(node.multipart.list_parts(upload, 0, 5))[0]] == [1]
        run(node.multipart.complete(CALLER, upload, [RequestedPart(1, part.etag)],
                                    CompletionClaims()))
        assert node.read("k") == b"x"
        assert repr(NO_UPLOAD_PEERS) == "NO_UPLOAD_PEERS"
        assert run(NO_UPLOAD_PEERS.fetch_parts(upload, [part])) is True
    finally:
        node.sql.close()


def test_a_retried_completion_of_one_made_on_the_peer_answers_its_object(
        pair: tuple[Node, Node, FakePeers]) -> None:
    a, b, fake = pair
    upload = run(b.multipart.create(CALLER, "bkt", "k", ObjectAttrs(), ChecksumMode()))
    part = run(b.multipart.upload_part(CALLER, upload, 1, b.body(b"made on b"), {}))
    requested = [RequestedPart(1, part.etag)]
    made = run(b.multipart.complete(CALLER, upload, requested, CompletionClaims()))
    a.sql.put_object(made)  # the completed object reached a; the upload never did
    again = run(a.multipart.complete_by_id(CALLER, "bkt", "k", upload.upload_id, requested,
                                           CompletionClaims()))
    assert (again.version_id, again.etag, fake.refreshed) == (made.version_id, made.etag, 1)
    with pytest.raises(S3Error) as refused:  # another part list is not that completion
        run(a.multipart.complete_by_id(CALLER, "bkt", "k", upload.upload_id,
                                       [RequestedPart(1, "0" * 32)], CompletionClaims()))
    assert code_of(refused) == "NoSuchUpload"


def test_a_single_node_answers_no_such_upload_for_a_completion_it_did_not_make(
        tmp_path: Path) -> None:
    node = build(tmp_path / "one", NO_UPLOAD_PEERS)
    other = build(tmp_path / "two", NO_UPLOAD_PEERS)
    try:
        upload = run(other.multipart.create(CALLER, "bkt", "k", ObjectAttrs(),
                                            ChecksumMode()))
        part = run(other.multipart.upload_part(CALLER, upload, 1, other.body(b"x"), {}))
        made = run(other.multipart.complete(CALLER, upload, [RequestedPart(1, part.etag)],
                                            CompletionClaims()))
        node.sql.put_object(made)
        with pytest.raises(S3Error) as refused:
            run(node.multipart.complete_by_id(CALLER, "bkt", "k", upload.upload_id,
                                              [RequestedPart(1, part.etag)],
                                              CompletionClaims()))
        assert code_of(refused) == "NoSuchUpload"
    finally:
        node.sql.close()
        other.sql.close()


def test_a_part_on_a_node_that_is_down_is_503_then_completes_once_it_is_back(
        pair: tuple[Node, Node, FakePeers]) -> None:
    a, b, fake = pair
    upload = run(a.multipart.create(CALLER, "bkt", "k", ObjectAttrs(), ChecksumMode()))
    b.sql.create_upload(upload)
    part = run(b.multipart.upload_part(CALLER, upload, 1, b.body(b"on b only"), {}))
    fake.unreachable = True
    requested = [RequestedPart(1, part.etag)]
    with pytest.raises(S3Error) as refused:
        run(a.multipart.complete(CALLER, upload, requested, CompletionClaims()))
    assert code_of(refused) == "ServiceUnavailable"
    assert a.sql.get_upload(upload.upload_id) is not None  # left open for the retry
    fake.unreachable = False  # b is back: the same call succeeds
    done = run(a.multipart.complete(CALLER, upload, requested, CompletionClaims()))
    assert a.read("k") == b"on b only" and done.etag.endswith("-1")


def test_a_part_nobody_has_while_a_node_is_down_is_503_not_invalid_part(
        pair: tuple[Node, Node, FakePeers]) -> None:
    a, _, fake = pair
    fake.unreachable = True
    upload = run(a.multipart.create(CALLER, "bkt", "k", ObjectAttrs(), ChecksumMode()))
    with pytest.raises(S3Error) as refused:
        run(a.multipart.complete(CALLER, upload, [RequestedPart(1, "0" * 32)],
                                 CompletionClaims()))
    assert code_of(refused) == "ServiceUnavailable"
