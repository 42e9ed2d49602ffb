"""The JSON of POST /cluster/v1/manifest: the request (`since`, `limit`) and the answer, a
page of the changed-since manifest (meta/manifest_queries.py).

    request  {"since": <cursor seq, default 0>, "limit": <entries, default PAGE_ENTRIES>}
    answer   {"protocol": 1, "max_seq": <the seq counter>, "more": <bool>,
              "entries": [{"seq": n, "row": <wire.encode_row>} |
                          {"seq": n, "delete": <wire.encode_delete>}, ...]}

Entries are in seq order. The answer stays under the 2 MiB the client reads of an answer:
entries are added while the page stays under PAGE_BYTES (at least one), a page cut short
says `more`, and a row whose JSON alone passes MAX_ENTRY_BYTES travels as
`{"seq": n, "oversized": true}` (a failing entry for the puller). Unknown
fields are ignored, absent optional ones defaulted (rule 14). Pure: no I/O, no Twisted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from objstore.cluster.wire import (
    PROTOCOL_FIELD,
    PROTOCOL_VERSION,
    ReplicatedDelete,
    WireError,
    decode_delete,
    encode_delete,
    encode_row,
    row_from_document,
)
from objstore.json_input import parse_json
from objstore.meta.manifest_queries import MAX_MANIFEST_PAGE, ManifestEntry, ManifestPage
from objstore.meta.records import ObjectRecord

PAGE_ENTRIES = 500  # what a puller asks for
PAGE_BYTES = 1024 * 1024  # entries are added while the answer stays under this
# A row whose JSON passes this (a composite of thousands of parts with checksums) is sent
# as {"seq", "oversized": true}: the puller counts it as a failing entry (skipped after 5
# passes, rule 9) instead of never getting a page under the 2 MiB it reads.
MAX_ENTRY_BYTES = 1536 * 1024


@dataclass(frozen=True, slots=True)
class ManifestRequest:
    since: int
    limit: int


@dataclass(frozen=True, slots=True)
class PulledEntry:
    """A manifest entry as received: a row or a deletion."""

    seq: int
    record: ObjectRecord | None = None
    deletion: ReplicatedDelete | None = None
    oversized: bool = False  # the peer could not send the row within a page


@dataclass(frozen=True, slots=True)
class PulledPage:
    entries: tuple[PulledEntry, ...]
    max_seq: int
    more: bool


def _count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise WireError(f"{name} must be a non-negative integer")
    return value


def _document(body: bytes) -> dict[str, Any]:
    try:
        document = parse_json(body)
    except (ValueError, UnicodeDecodeError) as error:
        raise WireError(f"the body is not JSON: {error}") from None
    if not isinstance(document, dict):
        raise WireError("a manifest document must be a JSON object")
    return document


# -- the request ------------------------------------------------------------------------------


def encode_request(since: int, limit: int = PAGE_ENTRIES) -> bytes:
    return json.dumps({"since": since, "limit": limit,
                       PROTOCOL_FIELD: PROTOCOL_VERSION}).encode()


def decode_request(body: bytes) -> ManifestRequest:
    document = _document(body) if body else {}
    since = _count("since", document.get("since", 0))
    limit = _count("limit", document.get("limit", PAGE_ENTRIES))
    return ManifestRequest(since, max(1, min(limit, MAX_MANIFEST_PAGE)))


# -- the answer -------------------------------------------------------------------------------


def _entry_bytes(entry: ManifestEntry) -> bytes:
    if entry.record is not None:
        return b'{"seq":%d,"row":%s}' % (entry.seq, encode_row(entry.record))
    deletion = entry.deletion
    assert deletion is not None, "a manifest entry is a row or a deletion"
    return b'{"seq":%d,"delete":%s}' % (entry.seq, encode_delete(ReplicatedDelete(
        deletion.bucket, deletion.key, deletion.version_id, deletion.deleted_at)))


def encode_page(page: ManifestPage, budget_bytes: int = PAGE_BYTES) -> bytes:
    """The answer of one page; entries past `budget_bytes` are left for the next page
    (`more`), but the first is always sent."""
    encoded: list[bytes] = []
    size = 0
    for entry in page.entries:
        data = _entry_bytes(entry)
        if len(data) > MAX_ENTRY_BYTES:
            data = b'{"seq":%d,"oversized":true}' % entry.seq
        if encoded and size + len(data) > budget_bytes:
            break
        encoded.append(data)
        size += len(data) + 1
    more = page.more or len(encoded) < len(page.entries)
    head = b'{"%s":%d,"max_seq":%d,"more":%s,"entries":[' % (
        PROTOCOL_FIELD.encode(), PROTOCOL_VERSION, page.max_seq,
        b"true" if more else b"false")
    return head + b",".join(encoded) + b"]}"


def decode_page(body: bytes) -> PulledPage:
    """A page as received; WireError when it is not one."""
    document = _document(body)
    max_seq = _count("max_seq", document.get("max_seq"))
    more = document.get("more", False)
    if not isinstance(more, bool):
        raise WireError("more must be true or false")
    items = document.get("entries", [])
    if not isinstance(items, list):
        raise WireError("entries must be a list")
    entries = tuple(_pulled(index, item) for index, item in enumerate(items))
    if any(a.seq >= b.seq for a, b in zip(entries, entries[1:], strict=False)):
        raise WireError("entries must be in ascending seq order")
    return PulledPage(entries, max_seq, more)


def _pulled(index: int, item: object) -> PulledEntry:
    if not isinstance(item, dict):
        raise WireError(f"entries[{index}] must be a JSON object")
    seq = _count(f"entries[{index}].seq", item.get("seq"))
    if "row" in item:
        return PulledEntry(seq, record=row_from_document(item["row"]))
    if "delete" in item:
        return PulledEntry(seq, deletion=decode_delete(json.dumps(item["delete"]).encode()))
    if item.get("oversized") is True:
        return PulledEntry(seq, oversized=True)
    raise WireError(f"entries[{index}] is neither a row nor a deletion")
