"""POST /cluster/v1/manifest node to node in memory (the receiving node's real root and
site behind StubTreq, SQLite in a temp dir, a Clock) through `ClusterClient.manifest`, and
the page's JSON (manifest_wire.py): rows and deletions in seq order, pages, the byte
budget, bad requests and answers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from objstore.cluster.client import SendFailure
from objstore.cluster.manifest_wire import (
    PulledPage,
    decode_page,
    decode_request,
    encode_page,
)
from objstore.cluster.wire import ReplicatedDelete, WireError
from objstore.meta.async_store import MetaStore
from objstore.meta.manifest_queries import ManifestDeletion, ManifestEntry, ManifestPage
from objstore.meta.pool import SyncDbPool
from objstore.meta.records import ObjectRecord, PartRef
from tests.unit.conftest import run
from tests.unit.test_cluster_routes import BASE, Receiver, row

V2 = "22222222-2222-4222-8222-222222222222"
BLOB_2 = "bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb"


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Receiver]:
    receiver = Receiver(tmp_path)
    receiver.api.manifest_source = MetaStore(receiver.store, SyncDbPool()).changed_since
    yield receiver
    receiver.store.close()


def pull(node: Receiver, since: int = 0, limit: int = 100) -> PulledPage:
    page = run(node.client.manifest(BASE, since, limit))
    assert isinstance(page, PulledPage), page
    return page


def test_a_peer_pulls_rows_and_deletions_in_seq_order(node: Receiver) -> None:
    first = node.store.put_object(row(b"abc")).record
    node.store.put_object(ObjectRecord("b", "k2", V2, BLOB_2, size=1, etag="e",
                                       last_modified=11.0))
    node.store.delete_object_version("b", "k2", V2)
    page = pull(node)
    assert page.max_seq == 3 and not page.more
    assert [e.seq for e in page.entries] == [1, 3]
    assert page.entries[0].record is not None
    assert page.entries[0].record == ObjectRecord(**{**first.__dict__, "seq": 0,
                                                     "is_latest": False})
    deletion = page.entries[1].deletion
    assert deletion is not None and (deletion.bucket, deletion.key, deletion.version_id) \
        == ("b", "k2", V2)
    assert pull(node, since=3).entries == ()


def test_pages_follow_the_limit(node: Receiver) -> None:
    for index in range(3):
        node.store.put_object(ObjectRecord("b", f"k{index}", V2, BLOB_2, size=1, etag="e",
                                           last_modified=10.0 + index))
    page = pull(node, limit=2)
    assert [e.seq for e in page.entries] == [1, 2] and page.more and page.max_seq == 3


def test_a_bad_request_is_400_and_no_source_is_503(node: Receiver) -> None:
    answer = node.raw("POST", "/cluster/v1/manifest", b'{"since": -1}')
    assert answer.status == 400 and answer.json()["error"] == "BadRequest"
    node.api.manifest_source = None
    refused = run(node.client.manifest(BASE, 0, 10))
    assert isinstance(refused, SendFailure) and refused.status == 503


def test_an_unsigned_request_is_refused(node: Receiver) -> None:
    answers: list[object] = []
    node.treq.request("POST", BASE + "/cluster/v1/manifest", data=b"{}").addCallback(
        answers.append)
    assert [getattr(a, "code", None) for a in answers] == [403]


# -- the JSON ---------------------------------------------------------------------------------


def entry(seq: int, size: int = 10) -> ManifestEntry:
    return ManifestEntry(seq, record=ObjectRecord(
        "b", f"k{seq}", V2, BLOB_2, size=1, etag="e", last_modified=1.0,
        user_metadata={"pad": "x" * size}))


def test_a_page_past_its_byte_budget_is_cut_and_says_more() -> None:
    page = ManifestPage(tuple(entry(seq, 400) for seq in range(1, 11)), 10, more=False)
    cut = decode_page(encode_page(page, budget_bytes=1500))
    assert 1 <= len(cut.entries) < 10 and cut.more
    whole = decode_page(encode_page(page))
    assert [e.seq for e in whole.entries] == list(range(1, 11)) and not whole.more
    one = decode_page(encode_page(page, budget_bytes=1))
    assert len(one.entries) == 1 and one.more  # at least one entry goes


def test_a_row_too_large_for_any_page_travels_as_oversized() -> None:
    huge = replace(entry(2).record, parts=tuple(  # type: ignore[type-var]
        PartRef(n, BLOB_2, 5 * 1024 * 1024, "e" * 32, {"sha256": "x" * 44})
        for n in range(1, 10001)))
    page = ManifestPage((entry(1), ManifestEntry(2, record=huge), entry(3)), 3, more=False)
    body = encode_page(page)
    assert len(body) < 2 * 1024 * 1024
    decoded = decode_page(body)
    assert [(e.seq, e.oversized) for e in decoded.entries] == [(1, False), (2, True),
                                                                (3, False)]
    assert decoded.entries[1].record is None


def test_a_deletion_round_trips() -> None:
    page = ManifestPage((ManifestEntry(4, deletion=ManifestDeletion("b", "a:b", V2, 2.5)),),
                        9, more=False)
    decoded = decode_page(encode_page(page))
    assert decoded.entries[0].deletion == ReplicatedDelete("b", "a:b", V2, 2.5)
    assert decoded.max_seq == 9


def test_requests_default_and_clamp() -> None:
    assert decode_request(b"") == decode_request(b"{}")
    assert decode_request(b'{"since": 5, "limit": 100000, "new": 1}').limit == 1000
    assert decode_request(b'{"since": 5, "limit": 0}').limit == 1
    for bad in (b'{"since": "1"}', b"[]", b"{", b'{"since": true}'):
        with pytest.raises(WireError):
            decode_request(bad)


@pytest.mark.parametrize("body", [
    b"{}", b'{"max_seq": 1, "entries": {}}', b'{"max_seq": 1, "more": 1}',
    b'{"max_seq": 1, "entries": [{"seq": 1}]}',
    b'{"max_seq": 2, "entries": [{"seq": 2, "delete": {"bucket": "b", "key": "k", '
    b'"version_id": "null", "deleted_at": 1}}, {"seq": 1, "delete": {"bucket": "b", '
    b'"key": "k", "version_id": "null", "deleted_at": 1}}]}',
])
def test_a_malformed_page_is_refused(body: bytes) -> None:
    with pytest.raises(WireError):
        decode_page(body)


def test_unknown_fields_of_a_page_are_ignored() -> None:
    body = json.dumps({"max_seq": 3, "more": False, "later": [1], "entries": [
        {"seq": 3, "extra": True, "delete": {"bucket": "b", "key": "k", "version_id": "null",
                                             "deleted_at": 1.0, "new": 2}}]}).encode()
    assert decode_page(body).entries[0].deletion == ReplicatedDelete("b", "k", "null", 1.0)
