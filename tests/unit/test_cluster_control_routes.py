"""POST /cluster/v1/op and /cluster/v1/control-snapshot between two nodes in memory (each
the real root resource with its cluster API on SQLite, behind StubTreq), and the
reconciler's scheduling of pulls (coalesced, one in flight per peer, eligible peers only)
with a fake fetcher. No socket, no sleep."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.web.resource import Resource

from objstore.cluster.api import ClusterApi, NodeFigures
from objstore.cluster.client import ClusterClient, SendFailure, SnapshotRefused
from objstore.cluster.control_reconcile import ControlListeners, ControlReconciler
from objstore.cluster.control_routes import ControlRoutes
from objstore.cluster.control_wire import decode_snapshot
from objstore.cluster.fanout import ClusterOp
from objstore.cluster.membership import PeerState
from objstore.config import ServerLimits
from objstore.engine.changes import ChangeHook, ChangeKind, Origin
from objstore.engine.replication_apply import ReplicationApply
from objstore.http.health import HealthState
from objstore.http.root import RootResource
from objstore.meta.async_store import MetaStore
from objstore.meta.dialect import create_db_engine
from objstore.meta.pool import SyncDbPool
from objstore.meta.records import BucketRecord, CredentialRecord, ObjectRecord, UserRecord
from objstore.meta.store import SyncMetaStore
from objstore.threads import InlinePool
from tests.unit.conftest import run
from tests.unit.test_cluster_api import CLUSTER, NOW, ClusterNode, served
from tests.unit.test_cluster_routes import Recorder

V1 = "11111111-1111-4111-8111-111111111111"
BLOB = "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa"


def travels(key: str) -> bool:
    return key != "node_id"


class Node:
    """One node in memory: store, cluster API with control routes, reconciler."""

    def __init__(self, tmp_path: Path, node_id: str, clock: Clock) -> None:
        tmp_path.mkdir(parents=True, exist_ok=True)
        self.node_id = node_id
        self.clock = clock
        self.store = SyncMetaStore(create_db_engine("sqlite", str(tmp_path / "meta.db"),
                                                    None, 2), clock=clock.seconds)
        self.store.migrate()
        self.meta = MetaStore(self.store, SyncDbPool())
        from objstore.blobs.store import BlobStore

        self.blobs = BlobStore(str(tmp_path / "data"), fsync=False)
        self.blobs.prepare()
        self.seen = Recorder()
        self.told: list[str] = []
        self.peers: list[PeerState] = []
        self.reconciler = ControlReconciler(
            node_id=node_id, meta=self.meta, io=InlinePool(), replicated_setting=travels,
            peers=lambda: self.peers, changes=ChangeHook([self.seen]), uploads=self.blobs,
            listeners=ControlListeners(iam=lambda: self.told.append("iam"),
                                       buckets=lambda: self.told.append("buckets"),
                                       setting=lambda key: self.told.append(f"setting:{key}")))
        apply = ReplicationApply(self.meta, self.blobs, InlinePool(), clock=clock.seconds,
                                 changes=ChangeHook([self.seen]))
        routes = ControlRoutes(reconciler=self.reconciler, apply=apply)
        api = ClusterApi(cluster=CLUSTER, node_id=node_id, health=HealthState(),
                         figures=self._figures, clock=clock.seconds, apply=apply,
                         io=InlinePool(), control=routes)
        root = RootResource(s3=Resource(), admin=Resource(), limits=ServerLimits(),
                            domains=(), cluster=api.resource())
        self.treq = served(root, self.blobs.tmp_dir)
        self.base = f"http://{node_id}.test"

    async def _figures(self) -> NodeFigures:
        return NodeFigures(1, 1, 0)

    def client_to(self, other: Node) -> ClusterClient:
        """This node's client, reaching `other`."""
        return ClusterClient(cluster=CLUSTER, node_id=self.node_id, http=other.treq,
                             clock=self.clock)

    def knows(self, other: Node) -> None:
        """`other` is an eligible peer of this node, reached through its client."""
        self.peers.append(PeerState(address=other.base, first_seen=0.0,
                                    node_id=other.node_id, alive=True, authenticated=True,
                                    config_ok=True))
        self.reconciler.client = self.client_to(other)


@pytest.fixture
def clock() -> Clock:
    clock = Clock()
    clock.advance(NOW)
    return clock


@pytest.fixture
def a(tmp_path: Path, clock: Clock) -> Any:
    node = Node(tmp_path / "a", "node-a", clock)
    yield node
    node.store.close()


@pytest.fixture
def b(tmp_path: Path, clock: Clock) -> Any:
    node = Node(tmp_path / "b", "node-b", clock)
    yield node
    node.store.close()


def test_the_snapshot_route_answers_every_family_but_node_local_settings(
        a: Node, b: Node) -> None:
    b.store.create_bucket(BucketRecord("bk", "u", "us-east-1", 5.0))
    b.store.create_user(UserRecord("u1", "alice", 5.0))
    b.store.create_credential(CredentialRecord("AK", "the-secret", "u1", 5.0))
    b.store.put_setting("node_id", "node-b")
    body = run(a.client_to(b).control_snapshot(b.base))
    decoded = decode_snapshot(body)
    assert decoded.node_id == "node-b"
    assert set(decoded.families["bucket"].rows) == {"bk"}
    assert decoded.families["credential"].rows["AK"]["secret_access_key"] == "the-secret"
    assert "node_id" not in decoded.families["setting"].rows


def test_an_unsigned_snapshot_request_is_refused(b: Node) -> None:
    node = ClusterNode.__new__(ClusterNode)
    node.clock, node.treq = b.clock, b.treq
    answer = ClusterNode.send(node, "POST", "/cluster/v1/control-snapshot", sender=None,
                              body=b"{}", headers={"content-type": "application/json"})
    assert answer.status == 403 and b"secret" not in answer.body


def test_a_notice_makes_the_receiver_pull_and_merge_the_senders_snapshot(
        a: Node, b: Node) -> None:
    a.store.create_bucket(BucketRecord("from-a", "u", "us-east-1", 5.0))
    a.store.create_user(UserRecord("u1", "alice", 5.0))
    a.store.put_setting("region", "eu-west-3")
    b.knows(a)
    op = ClusterOp(kind=ChangeKind.BUCKET_CREATED.value, bucket="from-a", at=NOW)
    assert run(a.client_to(b).send_op(b.base, op)) is True
    assert b.store.get_bucket("from-a") is not None
    assert b.store.get_user("u1") is not None
    assert b.store.get_setting("region") == "eu-west-3"
    assert b.told == ["iam", "buckets", "setting:region"]
    assert {c.kind for c in b.seen.changes} == {ChangeKind.IAM_CHANGED,
                                                ChangeKind.BUCKET_CONFIGURED,
                                                ChangeKind.SETTING_CHANGED}
    assert all(c.caller.origin is Origin.PEER for c in b.seen.changes)


def test_an_upload_removed_by_a_merge_loses_its_upload_record(a: Node, b: Node) -> None:
    from objstore.meta.records import UploadRecord

    for node in (a, b):
        node.store.create_bucket(BucketRecord("bk", "u", "us-east-1", 5.0))
    b.store.create_upload(UploadRecord("up-1", "bk", "key", 6.0))
    b.blobs.write_upload_record("up-1", {"upload_id": "up-1"})
    a.store.create_upload(UploadRecord("up-1", "bk", "key", 6.0))
    a.store.delete_upload("up-1")  # aborted (or completed) on a: its tombstone
    b.knows(a)
    op = ClusterOp(kind=ChangeKind.BUCKET_CONFIGURED.value, bucket="bk")
    assert run(a.client_to(b).send_op(b.base, op)) is True
    assert b.store.get_upload("up-1") is None
    assert "up-1" not in b.blobs.upload_record_ids()


def test_a_notice_from_a_peer_that_is_not_eligible_pulls_nothing(a: Node, b: Node) -> None:
    a.store.create_bucket(BucketRecord("from-a", "u", "us-east-1", 5.0))
    b.reconciler.client = b.client_to(a)  # reachable, but not in b's eligible peers
    op = ClusterOp(kind=ChangeKind.IAM_CHANGED.value, subject="user/u1")
    assert run(a.client_to(b).send_op(b.base, op)) is True
    assert b.store.get_bucket("from-a") is None and b.reconciler.stats.pulls == 0


def test_a_tag_op_applies_the_row_and_the_newest_tags(a: Node, b: Node) -> None:
    b.store.create_bucket(BucketRecord("bk", "u", "us-east-1", 1.0))
    held = ObjectRecord("bk", "k", V1, BLOB, 0, "e", 10.0, tags={"old": "1"},
                        tags_updated_at=20.0)
    b.store.put_object(held)
    sent = ObjectRecord("bk", "k", V1, BLOB, 0, "e", 10.0, tags={"new": "2"},
                        tags_updated_at=21.0)
    op = ClusterOp(kind=ChangeKind.TAGS_CHANGED.value, bucket="bk", key="k",
                   version_id=V1, record=sent)
    assert run(a.client_to(b).send_op(b.base, op)) is True
    stored = b.store.get_object("bk", "k", V1)
    assert stored is not None and (stored.tags, stored.tags_updated_at) == ({"new": "2"}, 21.0)
    # older tags sent late (a retried op) change nothing
    late = ObjectRecord("bk", "k", V1, BLOB, 0, "e", 10.0, tags={"old": "1"},
                        tags_updated_at=20.5)
    assert run(a.client_to(b).send_op(b.base, ClusterOp(
        kind=ChangeKind.TAGS_CHANGED.value, bucket="bk", key="k", version_id=V1,
        record=late))) is True
    assert b.store.get_object("bk", "k", V1).tags == {"new": "2"}  # type: ignore[union-attr]
    # an op of a version this node lacks stores the row
    other = ObjectRecord("bk", "k2", V1, BLOB, 0, "e", 11.0, tags={"x": "y"})
    assert run(a.client_to(b).send_op(b.base, ClusterOp(
        kind=ChangeKind.LOCK_CHANGED.value, bucket="bk", key="k2", version_id=V1,
        record=other))) is True
    assert b.store.get_object("bk", "k2", V1) is not None


def test_an_acl_op_applies_the_newer_acl(a: Node, b: Node) -> None:
    b.store.create_bucket(BucketRecord("bk", "u", "us-east-1", 1.0))
    b.store.put_object(ObjectRecord("bk", "k", V1, BLOB, 0, "e", 10.0))
    acl = '{"owner":"u","grants":[["u","FULL_CONTROL",""],["u2","READ",""]]}'
    sent = ObjectRecord("bk", "k", V1, BLOB, 0, "e", 10.0, acl=acl, tags_updated_at=12.0)
    assert run(a.client_to(b).send_op(b.base, ClusterOp(
        kind=ChangeKind.ACL_CHANGED.value, bucket="bk", key="k", version_id=V1,
        record=sent))) is True
    assert b.store.get_object("bk", "k", V1).acl == acl  # type: ignore[union-attr]
    answer = run(a.client_to(b).send_op(b.base, ClusterOp(
        kind=ChangeKind.ACL_CHANGED.value, bucket="bk", key="k", version_id=V1,
        record=replace(sent, acl='{"owner":"u","grants":[["u","SIDEWAYS",""]]}',
                       tags_updated_at=13.0))))
    assert isinstance(answer, SendFailure) and answer.status == 400  # not a stored ACL
    assert b.store.get_object("bk", "k", V1).acl == acl  # type: ignore[union-attr]


def test_a_tag_op_for_an_unknown_bucket_is_refused(a: Node, b: Node) -> None:
    sent = ObjectRecord("nope", "k", V1, BLOB, 0, "e", 10.0)
    answer = run(a.client_to(b).send_op(b.base, ClusterOp(
        kind=ChangeKind.TAGS_CHANGED.value, bucket="nope", key="k", record=sent)))
    assert isinstance(answer, SendFailure) and answer.status == 404


def test_a_malformed_op_is_a_bad_request(a: Node, b: Node) -> None:
    answer = run(a.client_to(b).request("POST", b.base, "/cluster/v1/op",
                                        body=json.dumps({"kind": 3}).encode()))
    assert answer.status == 400
    answer = run(a.client_to(b).request("POST", b.base, "/cluster/v1/op", body=json.dumps(
        {"kind": "tags_changed"}).encode()))
    assert answer.status == 400  # a row kind needs its record


def test_without_control_routes_the_routes_answer_503(tmp_path: Path, clock: Clock) -> None:
    from tests.unit.test_cluster_routes import Receiver

    receiver = Receiver(tmp_path)
    answer = receiver.raw("POST", "/cluster/v1/control-snapshot", b"{}")
    assert answer.status == 503
    with pytest.raises(SnapshotRefused):
        run(receiver.client.control_snapshot("http://node-b.test"))
    receiver.store.close()




# -- scheduling of pulls (a fake fetcher) ----------------------------------------------------


class Fetcher:
    def __init__(self) -> None:
        self.waiting: list[Deferred[bytes]] = []

    async def control_snapshot(self, base_url: str) -> bytes:
        answer: Deferred[bytes] = Deferred()
        self.waiting.append(answer)
        return await answer


class EmptyStore:
    def __init__(self) -> None:
        self.merged = 0

    def control_state(self, replicated_setting: Any) -> Deferred[dict[str, Any]]:
        return Deferred.fromCoroutine(self._state())

    async def _state(self) -> dict[str, Any]:
        return {}

    def merge_control_snapshot(self, incoming: Any, replicated_setting: Any) -> Deferred[Any]:
        self.merged += 1
        from objstore.meta.control_snapshot_queries import MergeOutcome

        return Deferred.fromCoroutine(self._outcome(MergeOutcome()))

    async def _outcome(self, outcome: Any) -> Any:
        return outcome


SNAPSHOT = json.dumps({"protocol": 1, "node_id": "node-a", "families": {}}).encode()


def scheduler() -> tuple[ControlReconciler, Fetcher, EmptyStore]:
    fetcher, store = Fetcher(), EmptyStore()
    peer = PeerState(address="http://a", first_seen=0.0, node_id="node-a", alive=True,
                     authenticated=True, config_ok=True)
    reconciler = ControlReconciler(node_id="node-b", meta=store, io=InlinePool(),
                                   replicated_setting=travels, peers=lambda: [peer],
                                   client=fetcher)
    return reconciler, fetcher, store


def test_notices_during_a_pull_are_coalesced_into_one_more_pull() -> None:
    reconciler, fetcher, store = scheduler()
    reconciler.notice("node-a")
    assert len(fetcher.waiting) == 1
    for _ in range(5):
        reconciler.notice("node-a")
    assert len(fetcher.waiting) == 1  # one in flight
    fetcher.waiting[0].callback(SNAPSHOT)
    assert len(fetcher.waiting) == 2 and store.merged == 1  # exactly one more
    fetcher.waiting[1].callback(SNAPSHOT)
    assert store.merged == 2 and len(fetcher.waiting) == 2
    reconciler.notice("node-a")
    assert len(fetcher.waiting) == 3  # idle again: a new notice pulls


def test_a_failed_pull_is_counted_and_the_next_notice_pulls_again() -> None:
    reconciler, fetcher, store = scheduler()
    reconciler.notice("node-a")
    fetcher.waiting[0].errback(ConnectionError("gone"))
    assert reconciler.stats.failures == 1 and store.merged == 0
    reconciler.notice("node-a")
    assert len(fetcher.waiting) == 2


def test_reconcile_control_raises_and_refuses_a_snapshot_of_another_node() -> None:
    reconciler, fetcher, _store = scheduler()
    pulled = Deferred.fromCoroutine(reconciler.reconcile_control("node-x", "http://a"))
    fetcher.waiting[0].callback(SNAPSHOT)  # names node-a
    failures: list[Any] = []
    pulled.addErrback(failures.append)
    assert failures and "node-a" in str(failures[0].value)


def test_the_collector_exports_the_reconcilers_counts() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from objstore.cluster.control_metrics import ControlCollector

    reconciler, fetcher, _store = scheduler()
    reconciler.notice("node-a")
    fetcher.waiting[0].callback(SNAPSHOT)
    reconciler.notice("node-a")
    fetcher.waiting[1].errback(ConnectionError("gone"))
    registry = CollectorRegistry()
    registry.register(ControlCollector(reconciler.stats))
    text = generate_latest(registry).decode()
    assert "objstore_cluster_control_pulls_total 2.0" in text
    assert "objstore_cluster_control_pull_failures_total 1.0" in text


def test_a_row_for_a_bucket_not_here_yet_pulls_the_senders_control_plane(
        a: Node, b: Node) -> None:
    a.store.create_bucket(BucketRecord("fresh", "u", "us-east-1", 5.0))
    row = ObjectRecord("fresh", "k", V1, None, 0, "e", 10.0, is_delete_marker=True)
    refused = run(a.client_to(b).send_object(b.base, row))
    assert isinstance(refused, SendFailure) and refused.status == 404  # a not eligible
    b.knows(a)
    assert run(a.client_to(b).send_object(b.base, row)).applied
    assert b.store.get_bucket("fresh") is not None
    assert b.store.get_object("fresh", "k", V1) is not None


def test_a_snapshot_over_the_usual_answer_cap_is_read_whole(a: Node, b: Node) -> None:
    from objstore.cluster.client import MAX_ANSWER_BYTES

    b.store.create_bucket(BucketRecord("big", "u", "us-east-1", 5.0))
    b.store.put_bucket_config("big", "document", "x" * (MAX_ANSWER_BYTES + 1024))
    body = run(a.client_to(b).control_snapshot(b.base))
    assert len(body) > MAX_ANSWER_BYTES
    assert decode_snapshot(body).families["bucket_config"].rows["big:document"]["value"] \
        .startswith("xxx")
