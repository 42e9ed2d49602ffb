"""A retried CompleteMultipartUpload (the client timed out while the first one ran) gets
the first one's answer, in memory: SQLite in a temp dir, inline pools, a real BlobStore,
and a clock the test moves."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import Deferred

from objstore.blobs.store import BlobStore
from objstore.engine.changes import Caller
from objstore.engine.multipart import (
    ChecksumMode,
    CompletionClaims,
    MultipartService,
    RequestedPart,
)
from objstore.engine.multipart_rules import same_parts
from objstore.engine.objects import ObjectAttrs
from objstore.http.spool import BodySpool
from objstore.iam.identity import Principal
from objstore.meta.async_store import MetaStore
from objstore.meta.dialect import create_db_engine
from objstore.meta.pool import SyncDbPool
from objstore.meta.records import BucketRecord, ObjectRecord, PartRef, PutResult
from objstore.meta.store import SyncMetaStore
from objstore.meta.upload_queries import COMPLETED_UPLOAD_KEPT_SECONDS
from objstore.threads import InlinePool
from tests.unit.conftest import fails, run

CALLER = Caller(Principal("u-alice", "alice", False, "AKALICE"))
MIB = 1024 * 1024


class RacingMeta(MetaStore):
    """Runs `before_complete` once, just before the next complete_upload."""

    before_complete: Any = None

    def complete_upload(self, *args: Any, **kwargs: Any) -> Deferred[PutResult]:
        hook, self.before_complete = self.before_complete, None
        if hook is not None:
            hook()
        return super().complete_upload(*args, **kwargs)


@dataclass
class Node:
    service: MultipartService
    meta: RacingMeta
    store: SyncMetaStore
    blobs: BlobStore
    now: list[float]

    def upload(self, key: str = "k") -> tuple[str, list[RequestedPart]]:
        upload = run(self.service.create(CALLER, "b", key, ObjectAttrs(), ChecksumMode()))
        asked = []
        for number, data in enumerate((b"x" * (5 * MIB), b"tail"), start=1):
            spool = BodySpool(self.blobs.tmp_dir, memory_limit=64 * 1024)
            spool.write(data)
            part = run(self.service.upload_part(CALLER, upload, number, spool, {}))
            asked.append(RequestedPart(number, f'"{part.etag}"'))
        return upload.upload_id, asked

    def complete(self, upload_id: str, asked: list[RequestedPart],
                 key: str = "k") -> ObjectRecord:
        return run(self.service.complete_by_id(CALLER, "b", key, upload_id, asked,
                                               CompletionClaims()))


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    now = [1000.0]
    store = SyncMetaStore(create_db_engine("sqlite", str(tmp_path / "meta.db"), None, 2),
                          clock=lambda: now[0])
    store.migrate()
    store.create_bucket(BucketRecord("b", "u-root", "us-east-1", 1.0))
    blobs = BlobStore(str(tmp_path / "data"), fsync=False)
    blobs.prepare()
    meta = RacingMeta(store, SyncDbPool())
    service = MultipartService(meta, blobs, InlinePool(), clock=lambda: now[0])
    yield Node(service, meta, store, blobs, now)
    store.close()


def sidecar_blobs(blobs: BlobStore) -> set[str]:
    return {info.blob_id for info in blobs.iter_blobs() if info.size < 0}


def test_a_retry_gets_the_same_object(node: Node) -> None:
    upload_id, asked = node.upload()
    first = node.complete(upload_id, asked)
    node.now[0] += COMPLETED_UPLOAD_KEPT_SECONDS - 1
    again = node.complete(upload_id, [RequestedPart(p.part_number, p.etag.strip('"'))
                                      for p in asked])
    assert again == first
    assert sidecar_blobs(node.blobs) == {first.blob_id}  # nothing new was stored


@pytest.mark.parametrize("changed", ["fewer parts", "another etag"])
def test_a_retry_with_another_part_list_is_no_such_upload(node: Node, changed: str) -> None:
    upload_id, asked = node.upload()
    node.complete(upload_id, asked)
    other = asked[:1] if changed == "fewer parts" else [asked[0], RequestedPart(2, '"0" * 32')]
    assert fails(node.service.complete_by_id(CALLER, "b", "k", upload_id, other,
                                             CompletionClaims())).code == "NoSuchUpload"


def test_a_completion_is_forgotten_after_a_while(node: Node) -> None:
    upload_id, asked = node.upload()
    node.complete(upload_id, asked)
    node.now[0] += COMPLETED_UPLOAD_KEPT_SECONDS + 1
    assert fails(node.service.complete_by_id(CALLER, "b", "k", upload_id, asked,
                                             CompletionClaims())).code == "NoSuchUpload"
    later_id, later = node.upload("later")  # its completion purges the old note
    node.complete(later_id, later, key="later")
    assert node.store.get_completion(upload_id) is None


def test_a_completion_whose_object_is_gone_is_forgotten(node: Node) -> None:
    upload_id, asked = node.upload()
    node.complete(upload_id, asked)
    node.store.delete_object_version("b", "k", "null")
    assert fails(node.service.complete_by_id(CALLER, "b", "k", upload_id, asked,
                                             CompletionClaims())).code == "NoSuchUpload"


def test_a_completion_answers_only_for_its_own_key(node: Node) -> None:
    upload_id, asked = node.upload()
    node.complete(upload_id, asked)
    assert fails(node.service.complete_by_id(CALLER, "b", "other", upload_id, asked,
                                             CompletionClaims())).code == "NoSuchUpload"


def test_a_retry_racing_the_first_completion_gets_its_object(node: Node) -> None:
    upload_id, asked = node.upload()
    winner: list[ObjectRecord] = []
    # The retry has read the upload and its parts when the first completion commits.
    node.meta.before_complete = lambda: winner.append(node.complete(upload_id, asked))
    retry = node.complete(upload_id, asked)
    assert winner and retry == winner[0]
    assert sidecar_blobs(node.blobs) == {retry.blob_id}  # the retry's own sidecar went


def test_same_parts_compares_numbers_and_etags() -> None:
    record = ObjectRecord("b", "k", "null", "blob", 6, "e-2", 1.0, parts=(
        PartRef(1, "p1", 5, "aa"), PartRef(3, "p3", 1, "bb")))
    assert same_parts([RequestedPart(1, '"AA"'), RequestedPart(3, "bb")], record)
    assert not same_parts([RequestedPart(1, "aa")], record)
    assert not same_parts([RequestedPart(1, "aa"), RequestedPart(2, "bb")], record)
