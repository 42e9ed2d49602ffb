"""The replication worker: sends this node's journal (replication/journal.py) to the
destinations, on every node (cluster rule 11: each node works through its own journal).

Each tick takes, oldest first, the first PENDING entry of each lane (one key to one
destination) that is due: a key's changes leave in the order they were made, a lane
backing off holds its later entries, other lanes go on. An entry:
- `put`: the destination is checked first (HEAD): the same ETag there means done (a
  repeat after a crash); a newer Last-Modified that is not a replica of ours means the
  destination's own write wins (last-writer-wins) and nothing is sent. Otherwise the
  version is streamed with its content headers, user metadata, tags, storage class and
  lock state, as REPLICA (x-amz-replication-status), plus the source's version id for an
  objstore destination (`x-objstore-replication-version-id`); a multipart
  source goes as a multipart upload of the same parts, so its ETag arrives unchanged. The
  ETag answered must be the source's.
- `delete_marker`: a DELETE of the key as REPLICA (the destination's marker).
- `tags`: the destination's tags are read first; equal tags send nothing (which also ends
  a two-way tag exchange), else PUT ?tagging.
- `lock`: the version's legal hold (PUT ?legal-hold) and, when it has one, its retention
  (PUT ?retention, bypassing governance so a governance date may move), on the same
  version id at the destination; a destination keeping its own version ids (a foreign
  S3) gets them on its current object when ours is the latest version and that object is
  its copy (same ETag).
- `delete`: DELETE ?versionId of the same version (destinations that keep our version ids).
A failure retries with exponential backoff (`[replication] retry_base_seconds`, capped at
`retry_max_seconds`, one hour by default); after `max_attempts` the entry is FAILED and so
is the object's x-amz-replication-status; a success makes it COMPLETED.
"""

from __future__ import annotations

import email.utils
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode
from xml.sax.saxutils import escape

from lxml import etree
from twisted.application.service import Service
from twisted.internet import defer
from twisted.logger import Logger
from twisted.python.failure import Failure

from objstore.http.slice_producer import SliceProducer
from objstore.meta.records import ObjectRecord
from objstore.meta.replication_queries import JournalEntry
from objstore.replication.client import Answer, S3Client, Target
from objstore.replication.credentials import InvalidCredential
from objstore.replication.journal import DELETE, DELETE_MARKER, LOCK, PUT, TAGS
from objstore.replication.service import COMPLETED, FAILED, REPLICA
from objstore.utc_dates import utc_moment

if TYPE_CHECKING:
    from objstore.meta.async_store import MetaStore
    from objstore.replication.service import ReplicationConfigService

log = Logger()

SKIPPED = "SKIPPED"
STAMPED = (PUT, DELETE_MARKER)  # kinds whose outcome is the version's replication status
HOUSEKEEPING_SECONDS = 10.0  # journal counts (metrics) and the purge of old entries
STATUS_HEADER = "x-amz-replication-status"
VERSION_HEADER = "x-objstore-replication-version-id"  # kept by an objstore destination
_CONTENT_HEADERS = ("cache-control", "content-disposition", "content-encoding",
                    "content-language", "expires")


class WorkerStop(Service):
    """Put after the worker's timer in the same parent: stopped first, it cancels the
    sends in flight, so the timer's wait for its tick is short."""

    def __init__(self, worker: ReplicationWorker) -> None:
        self._worker = worker

    def startService(self) -> None:  # noqa: N802 (Twisted's name)
        self._worker.resume()  # duties taken again (a cluster's leading process moved)
        super().startService()

    def stopService(self) -> None:  # noqa: N802 (Twisted's name)
        self._worker.stop()
        super().stopService()


class ReplicationError(Exception):
    """The destination refused or could not be reached; the message says what."""


@dataclass(frozen=True)
class Backoff:
    base_seconds: float = 1.0
    max_seconds: float = 3600.0
    max_attempts: int = 20

    def delay(self, attempts: int) -> float:
        """Seconds before the next attempt after `attempts` failed ones."""
        return float(min(self.max_seconds, self.base_seconds * 2.0 ** max(0, attempts - 1)))


@dataclass
class WorkerStats:
    completed: int = 0
    failed: int = 0
    retried: int = 0
    skipped: int = 0
    bytes_sent: int = 0


class Reader:
    """What the worker needs of the object service: a slice of a version's bytes."""

    async def read_bytes(self, record: ObjectRecord, start: int, length: int) -> bytes:
        raise NotImplementedError


class ReplicationWorker:
    def __init__(self, meta: MetaStore, config: ReplicationConfigService, reader: Any,
                 client: S3Client, *, clock: Callable[[], float], retry: Backoff,
                 batch: int = 200, concurrency: int = 4,
                 retention_seconds: float = 7 * 86400.0) -> None:
        self._meta = meta
        self._config = config
        self._reader = reader
        self._client = client
        self._clock = clock
        self._retry = retry
        self._batch = batch
        self._concurrency = concurrency
        self._running = False
        self._stopping = False
        self._in_flight: set[defer.Deferred[None]] = set()
        self._retention = retention_seconds
        self._housekeeping_at = 0.0
        self.stats = WorkerStats()
        self.counts: dict[str, int] = {}  # journal entries by status (metrics)

    def stop(self) -> None:
        """Cancel the sends in flight (a destination that hangs must not hold up the
        node's stop); their entries stay PENDING, their attempts uncounted."""
        self._stopping = True
        for running in list(self._in_flight):
            running.cancel()

    def resume(self) -> None:
        self._stopping = False

    async def tick(self) -> None:
        if self._running or self._stopping:
            return
        self._running = True
        try:
            await self._tick()
            if self._clock() >= self._housekeeping_at:
                self._housekeeping_at = self._clock() + HOUSEKEEPING_SECONDS
                await self._meta.journal_purge(self._clock() - self._retention)
                self.counts = await self._meta.journal_counts()
        finally:
            self._running = False

    async def _tick(self) -> None:
        # The first PENDING entry of each lane, when due (the query keeps lanes in order).
        due: list[JournalEntry] = await self._meta.journal_pending(self._batch,
                                                                   self._clock())
        if not due:
            return
        limit = defer.DeferredSemaphore(self._concurrency)
        await defer.gatherResults([limit.run(self._started, entry) for entry in due],
                                  consumeErrors=True)

    def _started(self, entry: JournalEntry) -> defer.Deferred[None]:
        if self._stopping:
            return defer.succeed(None)
        running = defer.ensureDeferred(self._run(entry))
        self._in_flight.add(running)
        running.addBoth(self._done, running)
        return running

    def _done(self, result: object, running: defer.Deferred[None]) -> None:
        self._in_flight.discard(running)
        if isinstance(result, Failure):
            result.trap(defer.CancelledError)

    async def _run(self, entry: JournalEntry) -> None:
        try:
            outcome = await self._send(entry)
        except defer.CancelledError:
            raise  # the node stops: the entry stays as it was
        except Exception as error:  # the destination down or refusing: retried
            if self._stopping:
                return
            await self._failed(entry, error)
            return
        now = self._clock()
        if outcome == SKIPPED:
            self.stats.skipped += 1
        else:
            self.stats.completed += 1
        await self._meta.journal_finish(
            entry, status=outcome, attempts=entry.attempts + 1, next_attempt_at=now,
            last_error=None, now=now, stamp=COMPLETED if outcome == COMPLETED
            and entry.kind in STAMPED else None)

    async def _failed(self, entry: JournalEntry, error: Exception) -> None:
        attempts = entry.attempts + 1
        now = self._clock()
        message = str(error) or error.__class__.__name__
        if attempts >= self._retry.max_attempts:
            self.stats.failed += 1
            log.warn("replication of {bucket}/{key} to {endpoint} failed after {n} "
                     "attempts: {error}", bucket=entry.bucket, key=entry.key,
                     endpoint=entry.endpoint, n=attempts, error=message)
            await self._meta.journal_finish(
                entry, status=FAILED, attempts=attempts, next_attempt_at=now,
                last_error=message, now=now,
                stamp=FAILED if entry.kind in STAMPED else None)
            return
        self.stats.retried += 1
        await self._meta.journal_update(entry.id, status="PENDING", attempts=attempts,
                                        next_attempt_at=now + self._retry.delay(attempts),
                                        last_error=message, now=now)

    async def _target(self, entry: JournalEntry) -> Target:
        try:
            found = await self._config.credential(entry.credential_ref)
        except InvalidCredential as error:
            raise ReplicationError(str(error)) from None
        if found is None:
            raise ReplicationError(f"unknown replication credential {entry.credential_ref!r}")
        return Target(entry.endpoint, entry.dest_bucket, entry.region,
                      found["access_key_id"], found["secret_access_key"])

    async def _send(self, entry: JournalEntry) -> str:
        target = await self._target(entry)
        if entry.kind == DELETE:
            answer = await self._client.request(
                "DELETE", target, entry.key, query=urlencode({"versionId": entry.version_id}),
                headers={STATUS_HEADER: REPLICA})
            _expect(answer, "DeleteObject", 200, 204, 404)
            return COMPLETED
        record = await self._meta.get_object(entry.bucket, entry.key, entry.version_id)
        if record is None:
            return SKIPPED  # the version is gone: a later entry says what became of it
        if entry.kind == TAGS:
            return await self._send_tags(target, record)
        if entry.kind == LOCK:
            return await self._send_lock(target, record)
        head = await self._client.request("HEAD", target, entry.key)
        if head.status == 200 and _destination_wins(head, record):
            return COMPLETED
        if head.status not in (200, 404):
            _expect(head, "HeadObject")
        if entry.kind == DELETE_MARKER:
            answer = await self._client.request("DELETE", target, entry.key,
                                                headers=self._marks(record))
            _expect(answer, "DeleteObject", 200, 204)
            return COMPLETED
        if record.parts:
            await self._send_multipart(target, record, entry.storage_class)
        else:
            await self._send_plain(target, record, entry.storage_class)
        self.stats.bytes_sent += record.size
        return COMPLETED

    def _marks(self, record: ObjectRecord) -> dict[str, str]:
        marks = {STATUS_HEADER: REPLICA}
        if record.version_id and record.version_id != "null":
            marks[VERSION_HEADER] = record.version_id
        return marks

    def _headers(self, record: ObjectRecord, storage_class: str | None) -> dict[str, str]:
        headers = self._marks(record)
        headers["content-type"] = record.content_type
        for name, value in record.system_headers.items():
            if name.lower() in _CONTENT_HEADERS:
                headers[name.lower()] = value
        for name, value in record.user_metadata.items():
            headers[f"x-amz-meta-{name}"] = value
        if record.tags:
            headers["x-amz-tagging"] = urlencode(sorted(record.tags.items()), quote_via=quote)
        klass = storage_class or record.storage_class
        if klass and klass != "STANDARD":
            headers["x-amz-storage-class"] = klass
        if record.retention_mode and record.retain_until_date:
            headers["x-amz-object-lock-mode"] = record.retention_mode
            until = utc_moment(record.retain_until_date)
            headers["x-amz-object-lock-retain-until-date"] = until.strftime(
                "%Y-%m-%dT%H:%M:%S.000Z")
        if record.legal_hold_status:
            headers["x-amz-object-lock-legal-hold"] = record.legal_hold_status
        return headers

    def _producer(self, record: ObjectRecord, start: int, length: int) -> SliceProducer:
        async def read(offset: int, size: int) -> bytes:
            data: bytes = await self._reader.read_bytes(record, start + offset, size)
            return data
        return SliceProducer(read, length)

    async def _send_plain(self, target: Target, record: ObjectRecord,
                          storage_class: str | None) -> None:
        body: Any = self._producer(record, 0, record.size) if record.size else b""
        answer = await self._client.request("PUT", target, record.key,
                                            headers=self._headers(record, storage_class),
                                            body=body)
        _expect(answer, "PutObject")
        _same_etag(answer, record)

    async def _send_multipart(self, target: Target, record: ObjectRecord,
                              storage_class: str | None) -> None:
        created = await self._client.request("POST", target, record.key, query="uploads=",
                                             headers=self._headers(record, storage_class))
        _expect(created, "CreateMultipartUpload")
        upload_id = _xml_text(created.body, "UploadId")
        try:
            etags = []
            offset = 0
            for part in record.parts:
                answer = await self._client.request(
                    "PUT", target, record.key,
                    query=urlencode({"partNumber": part.part_number, "uploadId": upload_id}),
                    body=self._producer(record, offset, part.size))
                _expect(answer, "UploadPart")
                etags.append((part.part_number, answer.headers.get("etag", "")))
                offset += part.size
            document = "<CompleteMultipartUpload>" + "".join(
                f"<Part><PartNumber>{n}</PartNumber><ETag>{escape(tag)}</ETag></Part>"
                for n, tag in etags) + "</CompleteMultipartUpload>"
            done = await self._client.request(
                "POST", target, record.key, query=urlencode({"uploadId": upload_id}),
                headers=self._marks(record), body=document.encode())
            _expect(done, "CompleteMultipartUpload")
            if b"<Error>" in done.body:
                raise ReplicationError(f"CompleteMultipartUpload failed: {done.body[:200]!r}")
            etag = _xml_text(done.body, "ETag").strip('"')
            if etag and etag != record.etag:
                raise ReplicationError(f"the destination's ETag {etag} is not {record.etag}")
        except BaseException:
            await self._client.request("DELETE", target, record.key,
                                       query=urlencode({"uploadId": upload_id}))
            raise

    async def _send_tags(self, target: Target, record: ObjectRecord) -> str:
        current = await self._client.request("GET", target, record.key, query="tagging=")
        if current.status == 200 and _parse_tags(current.body) == record.tags:
            return COMPLETED  # already so (also ends a two-way tag exchange)
        if current.status == 404:
            raise ReplicationError("the object is not on the destination yet")
        document = "<Tagging><TagSet>" + "".join(
            f"<Tag><Key>{escape(k)}</Key><Value>{escape(v)}</Value></Tag>"
            for k, v in sorted(record.tags.items())) + "</TagSet></Tagging>"
        answer = await self._client.request("PUT", target, record.key, query="tagging=",
                                            headers={STATUS_HEADER: REPLICA},
                                            body=document.encode())
        _expect(answer, "PutObjectTagging")
        return COMPLETED


    async def _send_lock(self, target: Target, record: ObjectRecord) -> str:
        hold = record.legal_hold_status or "OFF"
        documents: list[tuple[str, str, dict[str, str], str]] = [
            ("legal-hold", "PutObjectLegalHold", {},
             f"<LegalHold><Status>{escape(hold)}</Status></LegalHold>")]
        if record.retention_mode and record.retain_until_date:
            until = utc_moment(record.retain_until_date).strftime("%Y-%m-%dT%H:%M:%S.000Z")
            documents.append(("retention", "PutObjectRetention",
                              {"x-amz-bypass-governance-retention": "true"},
                              f"<Retention><Mode>{escape(record.retention_mode)}</Mode>"
                              f"<RetainUntilDate>{until}</RetainUntilDate></Retention>"))
        for resource, what, extra, document in documents:
            answer = await self._put_on_version(target, record, resource, document.encode(),
                                                extra)
            _expect(answer, what)
        return COMPLETED

    async def _put_on_version(self, target: Target, record: ObjectRecord, resource: str,
                              body: bytes, extra: dict[str, str]) -> Answer:
        """PUT ?`resource` on the version's copy: by our version id, or, when the version
        is our latest and the destination's current object is its copy under another
        version id (a destination keeping its own ids), on that current object."""
        query = {resource: ""}
        named = bool(record.version_id) and record.version_id != "null"
        if named and record.is_latest:
            head = await self._client.request("HEAD", target, record.key)
            if head.status == 200 and head.headers.get("x-amz-version-id") != record.version_id:
                if head.headers.get("etag", "").strip('"') != record.etag:
                    raise ReplicationError("the destination's current object is not this "
                                           "version")
                named = False
        if named:
            query["versionId"] = record.version_id
        return await self._client.request("PUT", target, record.key,
                                          query=urlencode(query),
                                          headers={STATUS_HEADER: REPLICA, **extra}, body=body)


def _destination_wins(head: Answer, record: ObjectRecord) -> bool:
    """Whether the destination's current object makes sending this version pointless:
    the same bytes (a repeat), or a newer write of the destination's own (not a replica)."""
    if head.headers.get("etag", "").strip('"') == record.etag:
        return True
    if head.headers.get(STATUS_HEADER, "").upper() == REPLICA:
        return False  # ours: replaced in order
    parsed = email.utils.parsedate_to_datetime(head.headers.get("last-modified", "")) \
        if head.headers.get("last-modified") else None
    return parsed is not None and parsed.timestamp() > record.last_modified


def _expect(answer: Answer, what: str, *ok: int) -> None:
    accepted = ok or (200,)
    if answer.status not in accepted:
        code = _xml_text(answer.body, "Code") if answer.body else ""
        raise ReplicationError(f"{what} answered {answer.status} {code}".strip())


def _same_etag(answer: Answer, record: ObjectRecord) -> None:
    etag = answer.headers.get("etag", "").strip('"')
    if etag and record.etag and etag != record.etag:
        raise ReplicationError(f"the destination's ETag {etag} is not {record.etag}")


def _xml_text(body: bytes, name: str) -> str:
    try:
        root = etree.fromstring(body, etree.XMLParser(resolve_entities=False, no_network=True))
    except etree.XMLSyntaxError:
        return ""
    for element in root.iter():
        if isinstance(element.tag, str) and etree.QName(element).localname == name:
            return element.text or ""
    return ""


def _parse_tags(body: bytes) -> dict[str, str]:
    try:
        root = etree.fromstring(body, etree.XMLParser(resolve_entities=False, no_network=True))
    except etree.XMLSyntaxError:
        return {}
    tags = {}
    for element in root.iter():
        if isinstance(element.tag, str) and etree.QName(element).localname == "Tag":
            fields = {etree.QName(c).localname: c.text or "" for c in element
                      if isinstance(c.tag, str)}
            tags[fields.get("Key", "")] = fields.get("Value", "")
    return tags


__all__ = ["SKIPPED", "Backoff", "ReplicationError", "ReplicationWorker", "WorkerStats",
           "WorkerStop"]
