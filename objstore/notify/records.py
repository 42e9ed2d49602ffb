"""What an outbox entry is as an S3 event: its event name (`event_name`, None for changes
no notification names) and the S3 event document (`event_document`: `{"Records": [...]}`,
eventVersion 2.1, as AWS sends it).

Pure: plain data in, plain data out; no Twisted, no I/O.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote_plus

from objstore.meta.outbox_queries import OutboxEntry
from objstore.utc_dates import clamped, utc_moment

LIFECYCLE_PREFIX = "Lifecycle::"


def event_name(entry: OutboxEntry) -> str | None:
    """The S3 event name of an outbox entry (by its change kind and operation)."""
    lifecycle = entry.operation.startswith(LIFECYCLE_PREFIX)
    if entry.kind == "object_written":
        if entry.operation in ("CopyObject",):
            return "s3:ObjectCreated:Copy"
        if entry.operation == "CompleteMultipartUpload":
            return "s3:ObjectCreated:CompleteMultipartUpload"
        if entry.operation == "PostObject":
            return "s3:ObjectCreated:Post"
        return "s3:ObjectCreated:Put"
    if entry.kind == "delete_marker_written":
        return ("s3:LifecycleExpiration:DeleteMarkerCreated" if lifecycle
                else "s3:ObjectRemoved:DeleteMarkerCreated")
    if entry.kind == "version_deleted":
        return "s3:LifecycleExpiration:Delete" if lifecycle else "s3:ObjectRemoved:Delete"
    if entry.kind == "tags_changed":
        return ("s3:ObjectTagging:Delete" if entry.operation == "DeleteObjectTagging"
                else "s3:ObjectTagging:Put")
    if entry.kind == "acl_changed":
        return "s3:ObjectAcl:Put"
    return None


def event_time(timestamp: float) -> str:
    """2026-11-28T03:39:38.123Z, as AWS writes eventTime: the stamp rounded to the
    microsecond as `datetime.fromtimestamp` rounds it (half to even), the date and time
    of its second formatted once per second (a burst of events shares a few)."""
    fraction, whole = math.modf(clamped(timestamp))
    micros = round(fraction * 1e6)
    if micros >= 1_000_000:
        whole, micros = whole + 1, micros - 1_000_000
    return f"{_second_text(int(whole))}{micros // 1000:03d}Z"


@functools.lru_cache(maxsize=64)
def _second_text(second: int) -> str:
    return utc_moment(second).strftime("%Y-%m-%dT%H:%M:%S.")


@dataclass(frozen=True, slots=True)
class EventContext:
    """What an event names beside its entry: the node's region and id, the rule matched."""

    region: str
    node_id: str
    configuration_id: str
    owner: str = ""  # the bucket owner's user id


def event_record(entry: OutboxEntry, name: str, context: EventContext) -> dict[str, object]:
    """One record of Records[]."""
    removed = name.startswith(("s3:ObjectRemoved:", "s3:LifecycleExpiration:"))
    obj: dict[str, object] = {
        "key": quote_plus(entry.key, safe="/"),
        "sequencer": f"{entry.seq:016X}",
    }
    if not removed or not entry.is_delete_marker:
        obj["size"] = entry.size
        if entry.etag:
            obj["eTag"] = entry.etag
    if entry.version_id and entry.version_id != "null":
        obj["versionId"] = entry.version_id
    principal = entry.principal or "anonymous"
    return {
        "eventVersion": "2.1",
        "eventSource": "aws:s3",
        "awsRegion": context.region,
        "eventTime": event_time(entry.event_time),
        "eventName": name.removeprefix("s3:"),
        "userIdentity": {"principalId": principal},
        "requestParameters": {"sourceIPAddress": entry.source_address},
        "responseElements": {"x-amz-request-id": entry.request_id,
                             "x-amz-id-2": context.node_id},
        "s3": {
            "s3SchemaVersion": "1.0",
            "configurationId": context.configuration_id,
            "bucket": {"name": entry.bucket,
                       "ownerIdentity": {"principalId": context.owner or principal},
                       "arn": f"arn:aws:s3:::{entry.bucket}"},
            "object": obj,
        },
    }


def event_document(entry: OutboxEntry, name: str, context: EventContext) -> bytes:
    """`{"Records": [event_record(...)]}` as compact JSON: the same text `json.dumps` makes
    of it (tested), written from its parts (the consumer writes one per event; the
    encoder walking the nested dicts was most of the document's cost)."""
    removed = name.startswith(("s3:ObjectRemoved:", "s3:LifecycleExpiration:"))
    obj = f'{{"key":{_q(quote_plus(entry.key, safe="/"))},"sequencer":"{entry.seq:016X}"'
    if not removed or not entry.is_delete_marker:
        obj += f',"size":{int(entry.size)}'
        if entry.etag:
            obj += f',"eTag":{_q(entry.etag)}'
    if entry.version_id and entry.version_id != "null":
        obj += f',"versionId":{_q(entry.version_id)}'
    principal = entry.principal or "anonymous"
    return (
        '{"Records":[{"eventVersion":"2.1","eventSource":"aws:s3",'
        f'"awsRegion":{_q(context.region)},"eventTime":"{event_time(entry.event_time)}",'
        f'"eventName":{_q(name.removeprefix("s3:"))},'
        f'"userIdentity":{{"principalId":{_q(principal)}}},'
        f'"requestParameters":{{"sourceIPAddress":{_q(entry.source_address)}}},'
        f'"responseElements":{{"x-amz-request-id":{_q(entry.request_id)},'
        f'"x-amz-id-2":{_q(context.node_id)}}},'
        '"s3":{"s3SchemaVersion":"1.0",'
        f'"configurationId":{_q(context.configuration_id)},'
        f'"bucket":{{"name":{_q(entry.bucket)},'
        f'"ownerIdentity":{{"principalId":{_q(context.owner or principal)}}},'
        f'"arn":{_q("arn:aws:s3:::" + entry.bucket)}}},'
        f'"object":{obj}}}}}}}]}}'
    ).encode()


def _q(text: str) -> str:
    """A JSON string, as json.dumps writes one (ASCII, escaped: the encoder's own
    function, which json.dumps calls for a str)."""
    return _encode_string(str(text))


_encode_string: Callable[[str], str] = json.encoder.encode_basestring_ascii


__all__ = ["EventContext", "event_document", "event_name", "event_record", "event_time"]
