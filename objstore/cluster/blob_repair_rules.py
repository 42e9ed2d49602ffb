"""The rules of blob repair (spec Cluster rules 10), without Twisted or I/O.

- **What a row expects** (`expected_blobs`): the blobs holding its bytes, each with the
  size and, where the row knows it, the MD5 the bytes must have, and the sidecar that
  goes beside it once repaired. A plain object: its blob, `size` bytes, MD5 = its ETag
  when that is a plain MD5 (32 hex digits: a single-part upload, a copy); a composite: each
  part, the part's size and ETag (a part's ETag is the MD5 of its bytes); a delete marker:
  nothing (its blob id holds only a sidecar). Bytes stored through a stage (compression,
  encryption: `compression` / `encryption_algorithm` set) are copied as stored and never
  decoded, so neither their size nor their MD5 is known here: anything a peer sends is
  taken (the stored bytes of an SSE-C object are the peer's too).
- **Verification** (`accepts`): fetched bytes are kept only when they match what is
  expected; else the next peer is asked.
- **A local blob's state** (`local_state`): MISSING (no file), CORRUPT (a size or MD5
  that contradicts the row), INTACT.
- **A tick of the proactive pass** (`TickBudget`, `next_cursor`): rows are walked in
  blob-id order from a resume cursor; at most `blob_repair_budget` peer fetches per tick,
  the budget checked only between blob ids (one row's blobs, a composite's parts
  included, are repaired together: a tick may end a little over the budget); besides,
  at most `SCAN_ROWS_PER_TICK` rows and `SCAN_BYTES_PER_TICK` bytes read to check them,
  so a pass over a large store is spread over many ticks. The cursor is the last blob id
  whose row was done; after the last row the walk wraps around to the start.
- **A blob no peer gives** (`Unavailable`, `after_failure`, `retry_due`): a fetch that no
  eligible peer answered with good bytes is remembered per blob id; the proactive pass
  asks again only after a delay that doubles with each failure, from the pass's interval
  up to `RETRY_CAP_SECONDS`, and the failure is logged once (the first), not at every
  try. A read that finds the blob missing still asks (a client waits), quietly. A
  success forgets the blob; at most `UNAVAILABLE_REMEMBERED` blob ids are remembered (the
  oldest forgotten first).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Any

from objstore.blobs.sidecar import record_to_sidecar
from objstore.meta.records import ObjectRecord, PartRef

SCAN_ROWS_PER_TICK = 1000
SCAN_BYTES_PER_TICK = 256 * 1024 * 1024
PAGE_ROWS = 200  # rows read from the database at a time

RETRY_CAP_SECONDS = 3600.0  # the longest wait between two tries of a blob no peer gave
UNAVAILABLE_REMEMBERED = 10_000  # blob ids remembered as unavailable, at most

_MD5 = re.compile(r"[0-9a-f]{32}")


class BlobState(enum.Enum):
    INTACT = "intact"
    MISSING = "missing"
    CORRUPT = "corrupt"


@dataclass(frozen=True)
class ExpectedBlob:
    """One blob a row needs: its id, the size and MD5 its bytes must have (None: not
    known, stored through a stage) and the sidecar written beside it when repaired."""

    blob_id: str
    size: int | None
    md5: str | None
    sidecar: dict[str, Any]


def content_md5(etag: str) -> str | None:
    """The MD5 an ETag states (lower-case hex), None when it is not a plain MD5 (a
    multipart ETag "<md5>-<n>", an imported one)."""
    value = etag.strip('"').lower()
    return value if _MD5.fullmatch(value) else None


def _staged(record: ObjectRecord) -> bool:
    return bool(record.compression or record.encryption_algorithm)


def part_sidecar(record: ObjectRecord, part: PartRef) -> dict[str, Any]:
    """The sidecar of a repaired part of a completed composite: kind "part" like an
    uploaded part's, without an upload id (its upload is complete: `recover` only
    reopens the parts of open uploads, and the composite's row references the blob)."""
    found = {
        "kind": "part",
        "bucket": record.bucket,
        "key": record.key,
        "part_number": part.part_number,
        "etag": part.etag,
        "size": part.size,
        "checksums": dict(part.checksums),
        "last_modified": record.last_modified,
    }
    if part.encryption_params:
        found["encryption_params"] = dict(part.encryption_params)
    return found


def expected_blobs(record: ObjectRecord) -> list[ExpectedBlob]:
    """The blobs holding `record`'s bytes, in order (none for a delete marker)."""
    if record.is_delete_marker or record.blob_id is None:
        return []
    staged = _staged(record)
    if record.parts:
        return [ExpectedBlob(part.blob_id, None if staged else part.size,
                             None if staged else content_md5(part.etag),
                             part_sidecar(record, part))
                for part in record.parts]
    return [ExpectedBlob(record.blob_id, None if staged else record.size,
                         None if staged else content_md5(record.etag),
                         record_to_sidecar(record))]


def accepts(expected: ExpectedBlob, length: int, md5_hex: str) -> bool:
    """Whether fetched bytes (`length` of them, MD5 `md5_hex`) may become the blob."""
    if expected.size is not None and length != expected.size:
        return False
    return expected.md5 is None or md5_hex.lower() == expected.md5


def local_state(expected: ExpectedBlob, size: int | None, md5_hex: str | None) -> BlobState:
    """A local blob's state from its file's size (None: no file) and the MD5 of its bytes
    (None: not read, because not known from the row)."""
    if size is None:
        return BlobState.MISSING
    if expected.size is not None and size != expected.size:
        return BlobState.CORRUPT
    if expected.md5 is not None and md5_hex is not None and md5_hex.lower() != expected.md5:
        return BlobState.CORRUPT
    return BlobState.INTACT


def needs_hash(expected: ExpectedBlob, size: int | None) -> bool:
    """Whether checking a present blob means reading it (its MD5 is known and its size
    did not already condemn it)."""
    return (size is not None and expected.md5 is not None
            and (expected.size is None or size == expected.size))


@dataclass
class TickBudget:
    """What one tick of the proactive pass may still do. `fetches` counts peer fetches
    (one per blob asked of a peer, whatever the answer); the limits are checked only
    before a row's blobs are started (`may_start`), never in the middle of them."""

    fetch_budget: int
    rows_limit: int = SCAN_ROWS_PER_TICK
    bytes_limit: int = SCAN_BYTES_PER_TICK
    fetches: int = 0
    rows: int = 0
    bytes_read: int = 0

    def may_start(self) -> bool:
        return (self.fetches < self.fetch_budget and self.rows < self.rows_limit
                and self.bytes_read < self.bytes_limit)


def next_cursor(done: str | None, page_rows: int, page_limit: int,
                finished_page: bool) -> tuple[str | None, bool]:
    """(the cursor after a page, whether the walk wrapped around): `done` is the blob id
    of the last row done; a page read in full that was shorter than asked was the end of
    the rows, so the walk starts again from the beginning (None)."""
    if finished_page and page_rows < page_limit:
        return None, True
    return done, False


@dataclass(frozen=True)
class Unavailable:
    """A blob no eligible peer gave: how many fetches failed in a row, and from when the
    proactive pass may ask again."""

    failures: int
    retry_at: float


def after_failure(previous: Unavailable | None, now: float, base_seconds: float,
                  cap_seconds: float = RETRY_CAP_SECONDS) -> Unavailable:
    """The state after one more failed fetch: the wait doubles with each failure, from
    `base_seconds` (at least 1 s) up to `cap_seconds`."""
    failures = 1 if previous is None else previous.failures + 1
    delay = min(cap_seconds, max(base_seconds, 1.0) * 2.0 ** min(failures - 1, 32))
    return Unavailable(failures, now + delay)


def retry_due(state: Unavailable | None, now: float) -> bool:
    """Whether the proactive pass may ask the peers for this blob now."""
    return state is None or now >= state.retry_at


__all__ = [
    "PAGE_ROWS",
    "SCAN_BYTES_PER_TICK",
    "SCAN_ROWS_PER_TICK",
    "BlobState",
    "ExpectedBlob",
    "RETRY_CAP_SECONDS",
    "UNAVAILABLE_REMEMBERED",
    "TickBudget",
    "Unavailable",
    "accepts",
    "after_failure",
    "content_md5",
    "expected_blobs",
    "local_state",
    "needs_hash",
    "next_cursor",
    "part_sidecar",
    "retry_due",
]
