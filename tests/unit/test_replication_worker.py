"""The replication worker's pure parts, without a reactor: which destination answer makes a
put pointless (same ETag, or a newer write of the destination's own), the tags a
destination answers, the journal kind of each change (lock changes too) and the rules it
selects, and the body producer's slices."""

from __future__ import annotations

from typing import Any

from twisted.internet import defer

from objstore.http.slice_producer import SliceProducer
from objstore.meta.records import ObjectRecord
from objstore.replication.client import Answer, object_url
from objstore.replication.client import Target as ReplicationTarget
from objstore.replication.journal import (
    _KINDS,
    DELETE,
    DELETE_MARKER,
    LOCK,
    PUT,
    TAGS,
    selected_rules,
)
from objstore.replication.worker import _destination_wins, _parse_tags
from objstore.s3.replication_xml import parse_replication

RECORD = ObjectRecord("b", "k", "v", "blob", size=3, etag="abc", last_modified=1000.5)


def head(etag: str, modified: str, status: str = "") -> Answer:
    headers = {"etag": f'"{etag}"', "last-modified": modified}
    if status:
        headers["x-amz-replication-status"] = status
    return Answer(200, headers, b"")


def test_the_destination_wins_only_with_the_same_bytes_or_its_own_newer_write() -> None:
    newer = "Thu, 01 Jan 1970 00:16:50 GMT"  # 1010
    older = "Thu, 01 Jan 1970 00:16:30 GMT"  # 990
    assert _destination_wins(head("abc", older), RECORD)  # already there
    assert _destination_wins(head("zzz", newer), RECORD)  # its own newer write
    assert not _destination_wins(head("zzz", older), RECORD)
    assert not _destination_wins(head("zzz", newer, "REPLICA"), RECORD)  # ours: replaced
    assert not _destination_wins(Answer(200, {"etag": '"zzz"'}, b""), RECORD)


def test_tags_of_an_answer() -> None:
    body = (b'<Tagging xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><TagSet><Tag><Key>a'
            b"</Key><Value>1</Value></Tag><Tag><Key>b</Key><Value></Value></Tag></TagSet>"
            b"</Tagging>")
    assert _parse_tags(body) == {"a": "1", "b": ""}
    assert _parse_tags(b"<not xml") == {}


def test_kinds_select_rules_by_their_delete_settings() -> None:
    dest = ("<Destination><Bucket>d</Bucket><Endpoint>http://h</Endpoint>"
            "<CredentialRef>c</CredentialRef></Destination>")
    config = parse_replication(
        b"<ReplicationConfiguration><Rule><ID>a</ID><Status>Enabled</Status><Prefix></Prefix>"
        + dest.encode() + b"</Rule></ReplicationConfiguration>")
    assert [r.rule_id for r in selected_rules(config, PUT, "k", {})] == ["a"]
    assert selected_rules(config, DELETE_MARKER, "k", {}) == []
    assert selected_rules(config, DELETE, "k", {}) == []
    assert [r.rule_id for r in selected_rules(config, LOCK, "k", {})] == ["a"]
    assert _KINDS == {"object_written": PUT, "delete_marker_written": DELETE_MARKER,
                      "tags_changed": TAGS, "lock_changed": LOCK, "version_deleted": DELETE}


def test_the_producer_sends_every_slice_in_order() -> None:
    data = bytes(range(256)) * 10
    asked: list[tuple[int, int]] = []

    async def read(offset: int, size: int) -> bytes:
        asked.append((offset, size))
        return data[offset:offset + size]

    got: list[bytes] = []

    class Consumer:
        def write(self, chunk: bytes) -> None:
            got.append(chunk)

    producer = SliceProducer(read, len(data), slice_bytes=1000)
    done = producer.startProducing(Consumer())  # type: ignore[arg-type]
    assert isinstance(done, defer.Deferred) and done.called
    assert b"".join(got) == data and asked == [(0, 1000), (1000, 1000), (2000, 560)]


def test_object_urls_are_path_style_and_percent_encoded() -> None:
    target: Any = ReplicationTarget("http://h:9", "bkt", "us-east-1", "a", "s")
    assert object_url(target, "a b/c+d", "tagging=") == "http://h:9/bkt/a%20b/c%2Bd?tagging="
