"""The replication routes of /cluster/v1 in memory (POST object, object/delete, PUT and GET
blob), driven node to node by a real ClusterClient: the receiving node is the real root
resource and site behind StubTreq, with a real SQLite store in a temp dir, a real
BlobStore and inline pools, on a Clock. No socket, no thread."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import Deferred, fail
from twisted.internet.task import Clock
from twisted.web.resource import Resource

from objstore.blobs.store import BlobStore
from objstore.cluster.api import ClusterApi, NodeFigures
from objstore.cluster.client import BlobFetched, ClusterClient, SendFailure
from objstore.cluster.wire import ReplicatedDelete
from objstore.config import ServerLimits
from objstore.convergence.ack import Ack
from objstore.engine.changes import Change, ChangeHook, Origin
from objstore.engine.replication_apply import ReplicationApply
from objstore.http.health import HealthState
from objstore.http.root import RootResource
from objstore.meta.async_store import MetaStore
from objstore.meta.dialect import create_db_engine
from objstore.meta.pool import SyncDbPool
from objstore.meta.records import BucketRecord, ObjectRecord
from objstore.meta.store import SyncMetaStore
from objstore.threads import InlinePool
from tests.unit.conftest import run
from tests.unit.test_cluster_api import CLUSTER, NOW, ClusterNode, served

V1 = "11111111-1111-4111-8111-111111111111"
BLOB = "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa"
BASE = "http://node-b.test"


class Recorder:
    def __init__(self) -> None:
        self.changes: list[Change] = []

    def committed(self, change: Change) -> None:
        self.changes.append(change)


class Receiver:
    """Node B: its cluster API with the apply path, SQLite and blobs in `tmp_path`."""

    def __init__(self, tmp_path: Path, *, with_apply: bool = True) -> None:
        self.clock = Clock()
        self.clock.advance(NOW)
        self.store = SyncMetaStore(create_db_engine("sqlite", str(tmp_path / "meta.db"),
                                                    None, 2), clock=self.clock.seconds)
        self.store.migrate()
        self.store.create_bucket(BucketRecord("b", "u-root", "us-east-1", 1.0))
        self.blobs = BlobStore(str(tmp_path / "data"), fsync=False)
        self.blobs.prepare()
        self.seen = Recorder()
        apply = ReplicationApply(MetaStore(self.store, SyncDbPool()), self.blobs,
                                 InlinePool(), clock=self.clock.seconds,
                                 changes=ChangeHook([self.seen]))
        self.api = ClusterApi(cluster=CLUSTER, node_id="node-b", health=HealthState(),
                              figures=self._figures, clock=self.clock.seconds,
                              apply=apply if with_apply else None, io=InlinePool())
        root = RootResource(s3=Resource(), admin=Resource(), limits=ServerLimits(),
                            domains=(), cluster=self.api.resource())
        self.treq = served(root, self.blobs.tmp_dir)
        # Node A's client, whose requests reach node B.
        self.client = ClusterClient(cluster=CLUSTER, node_id="node-a", http=self.treq,
                                    clock=self.clock)

    async def _figures(self) -> NodeFigures:
        return NodeFigures(1, 1, self.store.max_seq())

    def raw(self, method: str, path: str, body: bytes = b"") -> Any:
        """A signed request from node A, answered as (status, JSON or bytes)."""
        node = ClusterNode.__new__(ClusterNode)
        node.clock, node.treq = self.clock, self.treq
        return ClusterNode.send(node, method, path, sender="node-a", body=body)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Receiver]:
    receiver = Receiver(tmp_path)
    yield receiver
    receiver.store.close()


def row(data: bytes = b"abc", *, at: float = 10.0, blob: str | None = BLOB,
        **fields: Any) -> ObjectRecord:
    values: dict[str, Any] = {"size": len(data), "etag": hashlib.md5(data).hexdigest(),
                              "user_metadata": {"colour": "blue"}, "tags": {"t": "1"},
                              **fields}
    return ObjectRecord("b", "k", V1, blob, last_modified=at, **values)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- node to node ----------------------------------------------------------------------------


def test_a_row_and_its_blob_reach_the_peer_byte_for_byte(node: Receiver) -> None:
    data = os.urandom(3 * 1024 * 1024 + 17)  # spills to a file on the receiving side
    record = row(data)
    assert run(node.client.put_blob(BASE, BLOB, data, sha(data))) == Ack(True, True)
    assert run(node.client.send_object(BASE, record)) == Ack(applied=True, has_blob=True)
    stored = node.store.get_object("b", "k", V1)
    assert stored is not None and stored.seq > 0
    assert stored == record.__class__(**{**record.__dict__, "seq": stored.seq})
    assert node.blobs.blob_reader(BLOB).read_all() == data
    assert node.blobs.read_sidecar(BLOB)["kind"] == "object"  # the row's, not provisional
    change = node.seen.changes[-1]
    assert change.caller.origin is Origin.PEER
    assert change.caller.principal.username == "node-a"
    # and back out, as stored (repair)
    chunks: list[bytes] = []
    fetched = run(node.client.get_blob(BASE, BLOB, chunks.append))
    assert fetched == BlobFetched(len(data), sha(data))
    assert b"".join(chunks) == data


def test_a_row_without_its_blob_says_so_until_the_blob_comes(node: Receiver) -> None:
    record = row()
    assert run(node.client.send_object(BASE, record)) == Ack(applied=True, has_blob=False)
    assert run(node.client.put_blob(BASE, BLOB, b"abc", sha(b"abc"))) == Ack(True, True)
    seq = node.store.max_seq()
    assert run(node.client.send_object(BASE, record)) == Ack(applied=True, has_blob=True)
    assert node.store.max_seq() == seq  # identical: no new seq
    # the provisional sidecar the blob came with became the row's (recover finds it)
    assert node.blobs.read_sidecar(BLOB)["kind"] == "object"


def test_a_blob_already_here_is_kept(node: Receiver) -> None:
    run(node.client.put_blob(BASE, BLOB, b"abc", sha(b"abc")))
    run(node.client.send_object(BASE, row()))
    assert run(node.client.put_blob(BASE, BLOB, b"xyz", sha(b"xyz"))) == Ack(True, True)
    assert node.blobs.blob_reader(BLOB).read_all() == b"abc"
    assert node.blobs.read_sidecar(BLOB)["kind"] == "object"


def test_an_empty_blob_travels(node: Receiver) -> None:
    assert run(node.client.put_blob(BASE, BLOB, b"", sha(b""))) == Ack(True, True)
    assert run(node.client.send_object(BASE, row(b""))) == Ack(True, True)
    assert node.blobs.blob_reader(BLOB).read_all() == b""


def test_a_deletion_reaches_the_peer(node: Receiver) -> None:
    run(node.client.put_blob(BASE, BLOB, b"abc", sha(b"abc")))
    run(node.client.send_object(BASE, row()))
    ack = run(node.client.send_delete(BASE, ReplicatedDelete("b", "k", V1, 11.0)))
    assert ack == Ack(applied=True, has_blob=True)
    assert node.store.get_object("b", "k", V1) is None
    assert node.blobs.blob_size(BLOB) is None


def test_a_blob_whose_bytes_are_not_the_signed_ones_is_refused(node: Receiver) -> None:
    failure = run(node.client.put_blob(BASE, BLOB, b"abc", sha(b"abd")))
    assert isinstance(failure, SendFailure) and failure.status == 400
    assert node.blobs.blob_size(BLOB) is None


def test_a_missing_blob_is_404(node: Receiver) -> None:
    failure = run(node.client.get_blob(BASE, BLOB, lambda data: None))
    assert isinstance(failure, SendFailure) and failure.status == 404


def test_refusals_of_the_engine_are_json_errors(node: Receiver) -> None:
    failure = run(node.client.send_object(BASE, replace(row(), bucket="nope")))
    assert isinstance(failure, SendFailure) and failure.status == 404
    assert "NoSuchBucket" in failure.reason
    failure = run(node.client.send_object(BASE, row(blob="not-a-uuid")))
    assert isinstance(failure, SendFailure) and failure.status == 400


class Unreachable:
    def request(self, method: str, url: str, **kwargs: Any) -> Deferred[Any]:
        return fail(ConnectionRefusedError("refused"))


def test_no_answer_is_a_failure_not_an_exception(node: Receiver) -> None:
    client = ClusterClient(cluster=CLUSTER, node_id="node-a", http=Unreachable(),
                           clock=node.clock)
    for sent in (client.send_delete(BASE, ReplicatedDelete("b", "k", V1, 1.0)),
                 client.send_object(BASE, row()), client.put_blob(BASE, BLOB, b"a", sha(b"a")),
                 client.get_blob(BASE, BLOB, lambda data: None)):
        result = run(sent)
        assert isinstance(result, SendFailure) and result.status is None


# -- hostile or broken requests ------------------------------------------------------------


@pytest.mark.parametrize("blob_id", ["AAAAAAAA-AAAA-4AAA-8AAA-AAAAAAAAAAAA",
                                     "aaaaaaaaaaaa4aaa8aaaaaaaaaaaaaaa", "..", "x"])
def test_a_blob_id_that_is_not_a_canonical_uuid_is_400(node: Receiver, blob_id: str) -> None:
    for method in ("PUT", "GET"):
        answer = node.raw(method, f"/cluster/v1/blob/{blob_id}",
                          b"abc" if method == "PUT" else b"")
        assert (answer.status, answer.json()["error"]) == (400, "BadRequest")
    assert not any(os.scandir(node.blobs.blob_root))


@pytest.mark.parametrize("body", [b"not json", b"[]", b'{"bucket": "b"}',
                                  b'{"bucket": "b", "key": "k", "version_id": "null", '
                                  b'"blob_id": null, "size": "1", "etag": "", '
                                  b'"last_modified": 1}'])
def test_a_body_that_is_no_row_is_400(node: Receiver, body: bytes) -> None:
    answer = node.raw("POST", "/cluster/v1/object", body)
    assert (answer.status, answer.json()["error"]) == (400, "BadRequest")
    assert node.store.max_seq() == 0


def test_a_json_body_over_2_mib_is_413(node: Receiver) -> None:
    answer = node.raw("POST", "/cluster/v1/object", b" " * (2 * 1024 * 1024 + 1))
    assert answer.status == 413


def test_an_unsigned_blob_is_refused_before_it_is_stored(node: Receiver) -> None:
    response = node.treq.request("PUT", f"{BASE}/cluster/v1/blob/{BLOB}", data=b"abc")
    response = response.result
    assert response.code == 403
    assert node.blobs.blob_size(BLOB) is None


def test_without_the_apply_path_the_routes_answer_503(tmp_path: Path) -> None:
    receiver = Receiver(tmp_path, with_apply=False)
    failure = run(receiver.client.send_object(BASE, row()))
    assert isinstance(failure, SendFailure) and failure.status == 503
    receiver.store.close()


def test_the_ack_is_json(node: Receiver) -> None:
    from objstore.cluster.wire import encode_row
    answer = node.raw("POST", "/cluster/v1/object", encode_row(row()))
    assert answer.status == 200 and answer.headers["content-type"] == "application/json"
    assert json.loads(answer.body) == {"applied": True, "has_blob": False}
