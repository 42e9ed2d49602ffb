"""The notification queue and its delivery, without a reactor: event names and records of
outbox entries, the queue's queries on both backends (enqueue with the cursor in one
transaction, due rows per target, attempts, figures, purge, the admin filter), and the
delivery worker with a fake clock and scripted targets (backoff, FAILED after
max_retries, order per target, a target that never answers holds up no other)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import defer

from objstore.config import Notifications
from objstore.meta import migrations, schema
from objstore.meta.notification_queries import (
    DELIVERED,
    FAILED,
    PENDING,
    NewDelivery,
    NotificationFilter,
)
from objstore.meta.outbox_queries import OutboxEntry
from objstore.meta.store import SyncMetaStore
from objstore.notify.delivery import NotificationDelivery, event_time_of, retry_delay
from objstore.notify.records import (
    EventContext,
    event_document,
    event_name,
    event_record,
    event_time,
)
from objstore.notify.targets.base import DeliveryError, Event, TargetConfigError
from objstore.notify.targets.webhook import KIND as WEBHOOK
from objstore.notify.targets.webhook import with_default_timeout
from objstore.utc_dates import utc_moment
from tests.unit.meta_fixtures import (  # noqa: F401  (fixtures)
    backend,
    db_engine,
    make_engine,
    meta_store,
    postgres_database,
)

NOW = 1_700_000_000.0


def entry(kind: str, operation: str = "PutObject", key: str = "a b/c+d",
          marker: bool = False, seq: int = 7) -> OutboxEntry:
    return OutboxEntry(seq=seq, kind=kind, operation=operation, bucket="b", key=key,
                       version_id="v1", size=5, etag="abc", is_delete_marker=marker,
                       principal="u1", source_address="10.0.0.1", request_id="R1",
                       event_time=NOW)


@pytest.mark.parametrize("kind, operation, marker, name", [
    ("object_written", "PutObject", False, "s3:ObjectCreated:Put"),
    ("object_written", "CopyObject", False, "s3:ObjectCreated:Copy"),
    ("object_written", "CompleteMultipartUpload", False,
     "s3:ObjectCreated:CompleteMultipartUpload"),
    ("delete_marker_written", "DeleteObject", True, "s3:ObjectRemoved:DeleteMarkerCreated"),
    ("delete_marker_written", "Lifecycle::ExpireObject", True,
     "s3:LifecycleExpiration:DeleteMarkerCreated"),
    ("version_deleted", "DeleteObjects", False, "s3:ObjectRemoved:Delete"),
    ("version_deleted", "Lifecycle::DeleteNoncurrentVersion", False,
     "s3:LifecycleExpiration:Delete"),
    ("tags_changed", "PutObjectTagging", False, "s3:ObjectTagging:Put"),
    ("tags_changed", "DeleteObjectTagging", False, "s3:ObjectTagging:Delete"),
    ("acl_changed", "PutObjectAcl", False, "s3:ObjectAcl:Put"),
    ("lock_changed", "PutObjectRetention", False, None),
])
def test_event_names(kind: str, operation: str, marker: bool, name: str | None) -> None:
    assert event_name(entry(kind, operation, marker=marker)) == name


def test_event_document_fields() -> None:
    document = json.loads(event_document(entry("object_written"), "s3:ObjectCreated:Put",
                                         EventContext("eu-1", "node-a", "rule", "owner")))
    (record,) = document["Records"]
    assert record["eventVersion"] == "2.1" and record["eventSource"] == "aws:s3"
    assert record["awsRegion"] == "eu-1" and record["eventName"] == "ObjectCreated:Put"
    assert record["eventTime"] == "2023-11-14T22:13:20.000Z"
    assert record["requestParameters"] == {"sourceIPAddress": "10.0.0.1"}
    assert record["responseElements"] == {"x-amz-request-id": "R1", "x-amz-id-2": "node-a"}
    assert record["s3"]["bucket"] == {"name": "b", "ownerIdentity": {"principalId": "owner"},
                                      "arn": "arn:aws:s3:::b"}
    assert record["s3"]["object"] == {"key": "a+b/c%2Bd", "size": 5, "eTag": "abc",
                                      "versionId": "v1", "sequencer": "0000000000000007"}


@pytest.mark.parametrize("stamp", [
    0.0, -5.0, NOW, NOW + 0.0005, NOW + 0.9995, 1.9999995, 1.9999996, 1.0000015,
    253402300799.999, 1e20, float("nan"), float("inf"), 1_700_000_123.456789])
def test_event_time_is_the_datetime_rendering(stamp: float) -> None:
    moment = utc_moment(stamp)  # what eventTime was: rounded as fromtimestamp rounds
    assert event_time(stamp) == (moment.strftime("%Y-%m-%dT%H:%M:%S.")
                                 + f"{moment.microsecond // 1000:03d}Z")


@pytest.mark.parametrize("name", ["s3:ObjectCreated:Put", "s3:ObjectRemoved:Delete",
                                  "s3:ObjectRemoved:DeleteMarkerCreated",
                                  "s3:LifecycleExpiration:Delete"])
@pytest.mark.parametrize("marker, version, etag, principal, owner", [
    (False, "v1", "abc", "u1", "owner"), (True, "null", "", "", ""),
    (True, "ü\u2028v", '"q"', "ü", "o\tw")])
def test_event_document_is_the_json_of_its_record(name: str, marker: bool, version: str,
                                                  etag: str, principal: str,
                                                  owner: str) -> None:
    written = OutboxEntry(seq=2**62 + 5, kind="object_written", operation="PutObject",
                          bucket="bück", key='ünï/c d+"e\\f\n\x00😀', version_id=version,
                          size=2**40, etag=etag, is_delete_marker=marker,
                          principal=principal, source_address="::1", request_id='R"1',
                          event_time=NOW + 0.9995)
    context = EventContext("ü-1", "node\u2029", 'rule"1', owner)
    assert event_document(written, name, context) == json.dumps(
        {"Records": [event_record(written, name, context)]}, separators=(",", ":")).encode()


def test_event_time_of_a_document() -> None:
    written = event_document(entry("object_written", key='k"eventTime":"1999'),
                             "s3:ObjectCreated:Put", EventContext("eu-1", "n", "r"))
    assert event_time_of(written.decode()) == "2023-11-14T22:13:20.000Z"
    spaced = json.dumps({"Records": [{"eventTime": "2020-01-01T00:00:00.000Z"}]})
    assert event_time_of(spaced) == "2020-01-01T00:00:00.000Z"  # parsed, not searched
    escaped = '{"Records":[{"eventTime":"a\\"b"}]}'
    assert event_time_of(escaped) == 'a"b'
    for other in ('{"Event":"s3:TestEvent"}', '{"Records":[]}', "not json", "[1]"):
        assert event_time_of(other) == ""


def test_webhook_settings_are_checked() -> None:
    settings = WEBHOOK.validate("h", {"kind": "webhook", "url": "https://h.example/x",
                                      "auth_token": "tok", "tls_verify": False})
    assert "tok" not in repr(settings)
    assert with_default_timeout(settings, 3.0).timeout_seconds == 3.0
    for table, named in (({"kind": "webhook"}, "url"),
                         ({"kind": "webhook", "url": "ftp://h/"}, "url"),
                         ({"kind": "webhook", "url": "http://h/", "tls_verify": "no"},
                          "tls_verify"),
                         ({"kind": "webhook", "url": "http://h/", "timeout_seconds": 0},
                          "timeout_seconds"),
                         ({"kind": "webhook", "url": "http://h/", "bogus": 1}, "bogus")):
        with pytest.raises(TargetConfigError, match=named):
            WEBHOOK.validate("h", table)


def delivery(seq: int, target: str = "t1", key: str = "k") -> NewDelivery:
    return NewDelivery(seq, target, "b", key, "s3:ObjectCreated:Put",
                       json.dumps({"Records": [{"eventTime": "x"}]}))


def test_a_version_7_database_gains_the_events_table(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest  # noqa: F811
) -> None:
    engine = make_engine(backend, tmp_path, request)
    try:
        migrations.migrate(engine, [m for m in migrations.MIGRATIONS if m.version <= 7])
        with engine.begin() as conn:  # a new database is built from today's metadata
            schema.notification_events.drop(conn)
        assert 10 in migrations.migrate(engine)
        store = SyncMetaStore(engine)
        store.notification_enqueue("notifications", 1, [delivery(1)], NOW)
        assert store.notification_pending_targets() == ["t1"]
    finally:
        engine.dispose()


def test_queue_queries(meta_store: SyncMetaStore) -> None:  # noqa: F811
    meta_store.notification_enqueue("notifications", 5, [delivery(4), delivery(5, "t2")], NOW)
    meta_store.notification_enqueue("notifications", 5, [delivery(5)], NOW)  # again: no-op
    assert meta_store.outbox_cursor("notifications") == 5
    assert meta_store.notification_pending_targets() == ["t1", "t2"]
    (row,) = meta_store.notification_due("t1", NOW, 10)
    meta_store.notification_attempted(row.id, PENDING, "HTTP 500", NOW + 10, NOW)
    assert meta_store.notification_due("t1", NOW + 1, 10) == []  # waits for its retry
    (again,) = meta_store.notification_due("t1", NOW + 10, 10)
    assert again.attempts == 1 and again.errors[0]["error"] == "HTTP 500"
    meta_store.notification_attempted(row.id, DELIVERED, "", 0.0, NOW + 10)
    figures = meta_store.notification_queue_figures()
    assert figures.depth == {"t2": 1} and figures.oldest == {"t2": NOW}
    assert [e.target for e in meta_store.query_notification_events(
        NotificationFilter(status=DELIVERED))] == ["t1"]
    newest = meta_store.query_notification_events(NotificationFilter(limit=1))
    assert [e.target for e in newest] == ["t2"]
    assert [e.target for e in meta_store.query_notification_events(
        NotificationFilter(before_id=newest[0].id))] == ["t1"]
    assert meta_store.notification_purge(NOW + 5) == 0  # changed at NOW + 10
    assert meta_store.notification_purge(NOW + 11) == 1
    assert [e.target for e in meta_store.query_notification_events(NotificationFilter())] \
        == ["t2"]


def test_rows_delivered_at_once_are_marked_in_one_call(meta_store: SyncMetaStore  # noqa: F811
                                                       ) -> None:
    meta_store.notification_enqueue("notifications", 9, [
        delivery(4), delivery(5, "t2"), delivery(6), delivery(7), delivery(8, "t2")], NOW)
    first, second, third = meta_store.notification_due("t1", NOW, 10)
    assert [first.seq, second.seq, third.seq] == [4, 6, 7]
    assert (first.body, first.bucket, first.event_name, first.errors) == \
        (delivery(4).body, "b", delivery(4).event_name, ())
    meta_store.notification_delivered([first.id, third.id], NOW + 3)
    meta_store.notification_delivered([], NOW + 4)  # nothing to mark: no transaction
    (left,) = meta_store.notification_due("t1", NOW, 10)
    assert left == second and left.attempts == 0
    marked = {e.seq: e for e in meta_store.query_notification_events(
        NotificationFilter(status=DELIVERED))}
    assert sorted(marked) == [4, 7]
    assert all((e.attempts, e.updated_at, e.next_attempt_at, e.target) == (1, NOW + 3, 0.0, "t1")
               for e in marked.values())
    assert [e.seq for e in meta_store.notification_due("t2", NOW, 10)] == [5, 8]
    meta_store.notification_enqueue("notifications", 12, [delivery(11, "t2")], NOW)
    meta_store.notification_enqueue("notifications", 10, [delivery(10, "t2")], NOW)  # behind
    assert meta_store.outbox_cursor("notifications") == 12  # the cursor row moved on
    assert [e.seq for e in meta_store.notification_due("t2", NOW, 10)] == [5, 8, 11]


class Clock:
    """A clock that stands still until the test moves it."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class AsyncMeta:
    """The async MetaStore's queue methods over a SyncMetaStore (already fired)."""

    def __init__(self, store: SyncMetaStore) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._store, name)
        return lambda *args, **kwargs: defer.succeed(method(*args, **kwargs))


class Scripted:
    kind = "test"

    def __init__(self, name: str, outcomes: list[str | None] | None = None,
                 hang: bool = False) -> None:
        self.name = name
        self.outcomes = outcomes or []
        self.hang = hang
        self.got: list[Event] = []

    async def deliver(self, event: Event) -> None:
        if self.hang:
            await defer.Deferred()  # never answers
        self.got.append(event)
        if self.outcomes:
            outcome = self.outcomes.pop(0)
            if outcome is not None:
                raise DeliveryError(outcome)

    async def close(self) -> None:
        pass


@pytest.fixture
def store(meta_store: SyncMetaStore) -> Iterator[SyncMetaStore]:  # noqa: F811
    yield meta_store


def run(d: Any) -> None:
    result = defer.ensureDeferred(d)
    assert result.called  # everything here is synchronous
    result.result  # noqa: B018 - raises a failure


def worker(store: SyncMetaStore, clock: Clock, **targets: Scripted
           ) -> NotificationDelivery:
    return NotificationDelivery(AsyncMeta(store), targets,  # type: ignore[arg-type]
                                settings=Notifications(max_retries=2, retry_base_seconds=1.0),
                                clock=clock, adhoc=lambda url: Scripted(url))


def test_backoff_then_failed_and_order_per_target(store: SyncMetaStore) -> None:
    clock = Clock(NOW)
    t1 = Scripted("t1", ["HTTP 500", "HTTP 500", "HTTP 500", None])
    store.notification_enqueue("notifications", 2, [delivery(1, key="first"),
                                                    delivery(2, key="second")], NOW)
    work = worker(store, clock, t1=t1)
    run(work.tick())
    assert [e.key for e in t1.got] == ["first"]  # the second waits behind the first
    clock.now = NOW + 0.5
    run(work.tick())
    assert len(t1.got) == 1  # backoff: 1 s
    clock.now = NOW + 1.0
    run(work.tick())
    assert len(t1.got) == 2
    clock.now = NOW + 2.9
    run(work.tick())
    assert len(t1.got) == 2  # backoff: 2 s
    clock.now = NOW + 3.0
    run(work.tick())  # third failure: FAILED (max_retries = 2), then the second goes
    assert [e.key for e in t1.got] == ["first", "first", "first", "second"]
    rows = {e.key: e for e in store.query_notification_events(NotificationFilter())}
    assert rows["first"].status == FAILED and rows["first"].attempts == 3
    assert [e["error"] for e in rows["first"].errors] == ["HTTP 500"] * 3
    assert rows["second"].status == DELIVERED and rows["second"].errors == ()
    assert (work.failed["t1"], work.retried["t1"], work.delivered["t1"]) == (1, 2, 1)
    assert retry_delay(30, 1.0) == 3600.0


def test_a_target_that_never_answers_holds_up_no_other(store: SyncMetaStore) -> None:
    clock = Clock(NOW)
    slow, fast = Scripted("slow", hang=True), Scripted("fast")
    store.notification_enqueue("notifications", 3, [delivery(1, "slow"), delivery(2, "fast"),
                                                    delivery(3, "gone")], NOW)
    work = worker(store, clock, slow=slow, fast=fast)
    run(work.tick())
    run(work.tick())  # the slow run is still going: not started twice
    assert len(fast.got) == 1 and slow.got == []
    rows = {e.target: e for e in store.query_notification_events(NotificationFilter())}
    assert rows["fast"].status == DELIVERED and rows["slow"].status == PENDING
    assert rows["gone"].status == FAILED and "no target named" in rows["gone"].errors[0][
        "error"]


def test_target_tables_are_checked_by_their_kind() -> None:
    from objstore.config import ConfigError, parse_config
    from objstore.notify.settings import built_targets, target_settings

    config = parse_config({"notifications": {"targets": {
        "hooks": {"kind": "webhook", "url": "http://h.example/", "auth_token": "t"}}}})
    (checked,) = target_settings(config.notifications)
    assert (checked.name, checked.kind, checked.settings.url) == ("hooks", "webhook",
                                                                  "http://h.example/")
    assert built_targets([checked])["hooks"].kind == "webhook"
    for targets, named in (({"bad name": {"kind": "webhook"}}, "target name"),
                           ({"h": "webhook"}, "must be a table"),
                           ({"h": {"kind": "carrier-pigeon"}}, "kind: must be one of"),
                           ("x", "must be tables")):
        with pytest.raises(ConfigError, match=named):
            parse_config({"notifications": {"targets": targets}})
    no_url = parse_config({"notifications": {"targets": {"h": {"kind": "webhook"}}}})
    with pytest.raises(ConfigError, match=r"\[notifications.targets.h\] url"):
        target_settings(no_url.notifications)


class CountingMeta(AsyncMeta):
    """AsyncMeta that counts the reads of the pending targets."""

    def __init__(self, store: SyncMetaStore) -> None:
        super().__init__(store)
        self.pending_reads = 0

    def notification_pending_targets(self) -> Any:
        self.pending_reads += 1
        return defer.succeed(self._store.notification_pending_targets())


def test_an_idle_queue_is_read_again_only_when_rows_were_queued(
        store: SyncMetaStore) -> None:
    clock = Clock(NOW)
    t1 = Scripted("t1")
    meta = CountingMeta(store)
    queued = [0]  # the consumer's count of queued rows
    work = NotificationDelivery(meta, {"t1": t1},  # type: ignore[arg-type]
                                settings=Notifications(max_retries=2, retry_base_seconds=1.0),
                                clock=clock, adhoc=lambda url: Scripted(url),
                                queued=lambda: queued[0])
    run(work.tick())
    assert meta.pending_reads == 1  # nothing pending: idle from now on
    for step in range(1, 10):
        clock.now = NOW + step * 0.25
        run(work.tick())
    assert meta.pending_reads == 1
    store.notification_enqueue("notifications", 1, [delivery(1, "t1", key="k1")], clock.now)
    queued[0] += 1  # counted after the commit, as the consumer counts
    run(work.tick())
    assert meta.pending_reads == 2 and [e.key for e in t1.got] == ["k1"]
    run(work.tick())  # the run finished: one more read finds the queue empty
    run(work.tick())
    assert meta.pending_reads == 3


def test_a_retry_keeps_the_queue_read_and_the_safety_net_reads_it_anyway(
        store: SyncMetaStore) -> None:
    clock = Clock(NOW)
    t1 = Scripted("t1", ["HTTP 500", None])
    meta = CountingMeta(store)
    store.notification_enqueue("notifications", 1, [delivery(1, "t1", key="k1")], NOW)
    work = NotificationDelivery(meta, {"t1": t1},  # type: ignore[arg-type]
                                settings=Notifications(max_retries=2, retry_base_seconds=1.0),
                                clock=clock, adhoc=lambda url: Scripted(url),
                                queued=lambda: 0)  # rows from before a restart
    run(work.tick())  # the first attempt fails: the row waits 1 s for its retry
    clock.now = NOW + 0.5
    run(work.tick())
    clock.now = NOW + 1.0
    run(work.tick())
    assert [e.key for e in t1.got] == ["k1", "k1"]
    reads = meta.pending_reads
    run(work.tick())  # delivered: this read finds nothing, the next ticks skip it
    clock.now = NOW + 2.0
    run(work.tick())
    assert meta.pending_reads == reads + 1
    clock.now = NOW + 1.0 + 5.0  # FIGURES_SECONDS after the last read
    run(work.tick())
    assert meta.pending_reads == reads + 2
