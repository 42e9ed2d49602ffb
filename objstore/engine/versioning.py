"""Versioning rules shared by the object, multipart and version-settings use cases.

Owns: which version id a write gets (a UUID on an Enabled bucket, `null` otherwise), the
shape of a valid version id, the object lock state a new version is born with (explicit
lock headers, else the bucket's default retention), the refusal to overwrite a locked null
version, the per-key serialisation of changes to existing versions (`KeyLocks`), and the
delimiter grouping of ListObjectVersions. It never touches HTTP; every refusal is an
S3Error.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from twisted.internet.defer import DeferredLock

from objstore.engine import lock_rules
from objstore.errors import S3Error
from objstore.iam.identity import Principal
from objstore.meta.keyspace import group_of
from objstore.meta.listing_queries import ListingEntry
from objstore.meta.records import NULL_VERSION, BucketRecord, ObjectRecord
from objstore.random_ids import random_uuid_text

if TYPE_CHECKING:
    from objstore.meta.async_store import MetaStore

T = TypeVar("T")

ENABLED = "Enabled"
SUSPENDED = "Suspended"
DISABLED = "Disabled"
LOCK_CONFIG_KEY = "object_lock"
TAGGING_CONFIG_KEY = "tagging"
MISSING_LOCK_CONFIG = "Bucket is missing Object Lock Configuration"
# Sorts after every key that starts with a given prefix (keys compare by code point).
_AFTER_ALL = "\U0010ffff"


def new_version_id(bucket: BucketRecord) -> str:
    """A fresh UUID on a versioning-Enabled bucket; the null version otherwise (Disabled
    buckets and Suspended ones write the null version)."""
    return random_uuid_text() if bucket.versioning == ENABLED else NULL_VERSION


def is_valid_version_id(version_id: str) -> bool:
    if version_id == NULL_VERSION:
        return True
    try:
        return str(uuid.UUID(version_id)) == version_id
    except ValueError:
        return False


def check_version_id(version_id: str, argument: str = "versionId") -> None:
    """Every version id this server hands out is a UUID or `null`; anything else is
    malformed (InvalidArgument, as AWS answers an id it could never have issued)."""
    if not is_valid_version_id(version_id):
        raise S3Error("InvalidArgument", "Invalid version id specified",
                      ArgumentName=argument, ArgumentValue=version_id)


def object_protected_error() -> S3Error:
    return S3Error("AccessDenied", lock_rules.PROTECTED_MESSAGE)


async def find_version(
    meta: MetaStore, bucket: str, key: str, version_id: str | None, *, cached: bool = False
) -> ObjectRecord:
    """The latest version of a key, or the named one, as GET sees it: NoSuchKey /
    NoSuchVersion when missing; a delete marker answers 404 NoSuchKey when it is the
    latest and 405 MethodNotAllowed when named, both with x-amz-delete-marker. `cached`:
    a read that only answers (GET, HEAD) may come from the object cache; a read that
    decides a write comes from the database."""
    if version_id is not None:
        check_version_id(version_id)
    record = await meta.get_object(bucket, key, version_id, cached=cached)
    if record is None:
        if version_id is not None:
            raise S3Error("NoSuchVersion", Key=key, VersionId=version_id)
        raise S3Error("NoSuchKey", Key=key)
    if record.is_delete_marker:
        headers = {"x-amz-delete-marker": "true", "x-amz-version-id": record.version_id}
        if version_id is not None:
            raise S3Error("MethodNotAllowed", headers=headers, ResourceType="DeleteMarker")
        raise S3Error("NoSuchKey", headers=headers, Key=key)
    return record


class ActionAuthority(Protocol):
    """Who may do what (`Authorizer`): asked only for s3:BypassGovernanceRetention."""

    async def allowed(self, principal: Principal, action: str, resource: str) -> bool: ...


BYPASS_ACTION = "s3:BypassGovernanceRetention"


async def bypass_allowed(
    authority: ActionAuthority | None, principal: Principal, record: ObjectRecord,
    now: float, requested: bool,
) -> bool:
    """`may_bypass` of the lock rules: the caller holds s3:BypassGovernanceRetention on the
    version. Asked only when the request carries the bypass header and a GOVERNANCE
    retention is in force. Without an authority only root users may bypass."""
    if not requested or not lock_rules.governance_applies(record, now):
        return False
    if authority is None:
        return principal.is_root
    resource = f"arn:aws:s3:::{record.bucket}/{record.key}"
    return await authority.allowed(principal, BYPASS_ACTION, resource)


async def check_deletable(
    authority: ActionAuthority | None, principal: Principal, record: ObjectRecord,
    now: float, bypass_governance: bool,
) -> None:
    """Raise AccessDenied when the lock rules keep `record` from being deleted."""
    may_bypass = await bypass_allowed(authority, principal, record, now, bypass_governance)
    if lock_rules.may_delete(record, now, bypass_governance, may_bypass) is not None:
        raise object_protected_error()


# -- the lock state of new versions ----------------------------------------------------


async def lock_configuration(
    meta: MetaStore, bucket: BucketRecord
) -> lock_rules.LockConfiguration | None:
    """The bucket's object lock configuration; None when object lock is off."""
    if not bucket.object_lock:
        return None
    text = await meta.get_bucket_config(bucket.name, LOCK_CONFIG_KEY)
    return lock_rules.LockConfiguration() if text is None else \
        lock_rules.LockConfiguration.from_json(text)


def check_lock_request(
    bucket: BucketRecord, requested: lock_rules.LockRequest, now: float
) -> None:
    """Lock headers need a bucket with object lock, and a retain-until date in the
    future."""
    if requested.is_empty:
        return
    if not bucket.object_lock:
        raise S3Error("InvalidRequest", MISSING_LOCK_CONFIG)
    problem = lock_rules.future_date_problem(requested.retain_until_date, now)
    if problem:
        raise S3Error("InvalidArgument", problem)


async def born_locked(
    meta: MetaStore, bucket: BucketRecord, record: ObjectRecord,
    requested: lock_rules.LockRequest, *, integrity: bool, what: str = "Put Object",
) -> ObjectRecord:
    """`record` with the lock state it is created with. A write that carries lock
    parameters (asked for, or the bucket's default retention) must have come with
    Content-MD5 or an x-amz-checksum-* value (`integrity`), as AWS requires."""
    check_lock_request(bucket, requested, record.last_modified)
    config = await lock_configuration(meta, bucket)
    if not integrity and lock_rules.lock_applies(requested, config):
        raise S3Error("InvalidRequest", "Content-MD5 OR x-amz-checksum- HTTP header is "
                      f"required for {what} requests with Object Lock parameters")
    return lock_rules.with_lock(record, requested, config, record.last_modified)


async def refuse_locked_overwrite(
    meta: MetaStore, bucket: BucketRecord, key: str, now: float
) -> None:
    """On a Suspended bucket a write replaces the null version: the lock rules of a delete
    apply to it (no bypass: AWS offers none on writes). Enabled buckets never overwrite
    (every write is a new version), and a Disabled bucket has never been versioned, hence
    never had object lock, so none of its versions can carry lock state: the hot path of
    unversioned writes pays no extra read."""
    if bucket.versioning != SUSPENDED:
        return
    current = await meta.get_object(bucket.name, key, NULL_VERSION)
    if current is not None and lock_rules.may_delete(current, now, False, False):
        raise object_protected_error()


# -- serialisation of changes to existing versions ---------------------------------------


class NodeWideLocks(Protocol):
    """Locks a node's worker processes share, by slot (`prefork/range_locks.py`)."""

    def slot_of(self, bucket: str, key: str) -> int: ...

    def acquire(self, slot: int) -> Awaitable[None]: ...

    def release(self, slot: int) -> None: ...


class KeyLocks:
    """One DeferredLock per (bucket, key) while anyone holds or waits for it. Changes to
    an existing version (retention, legal hold, tags, permanent deletion) run under it,
    so a rule is checked against the state it then changes, and sidecar rewrites land in
    the order of the row updates. Writers of new versions do not take it. With several
    worker processes the holder also takes the key's node-wide lock (`across`)."""

    def __init__(self, across: NodeWideLocks | None = None) -> None:
        self._locks: dict[tuple[str, str], tuple[DeferredLock, int]] = {}
        self._across = across

    async def run(self, bucket: str, key: str, fn: Callable[[], Awaitable[T]]) -> T:
        name = (bucket, key)
        lock, users = self._locks.get(name, (DeferredLock(), 0))
        self._locks[name] = (lock, users + 1)
        try:
            await lock.acquire()
            try:
                if self._across is None:
                    return await fn()
                slot = self._across.slot_of(bucket, key)
                await self._across.acquire(slot)
                try:
                    return await fn()
                finally:
                    self._across.release(slot)
            finally:
                lock.release()
        finally:
            lock, users = self._locks[name]
            if users == 1:
                del self._locks[name]
            else:
                self._locks[name] = (lock, users - 1)

    async def run_many(self, names: Iterable[tuple[str, str]],
                       fn: Callable[[], Awaitable[T]]) -> T:
        """`fn` under the locks of every (bucket, key) in `names` (a batch of replicated
        rows): each key's lock once, in sorted order, then each node-wide slot once, in
        sorted order. A holder of one key (`run`) takes its slot after its key, and a slot
        holder waits on no key lock, so no cycle of waits forms."""
        ordered = sorted(set(names))
        taken: list[tuple[str, str]] = []  # counted as users
        held: set[tuple[str, str]] = set()  # acquired
        slots: list[int] = []
        try:
            for name in ordered:
                entry = self._locks.get(name)
                lock, users = entry if entry is not None else (DeferredLock(), 0)
                self._locks[name] = (lock, users + 1)
                taken.append(name)
                acquired = lock.acquire()
                if not acquired.called:  # a free lock's is (most keys of a batch)
                    await acquired
                held.add(name)
            if self._across is not None:
                for slot in sorted({self._across.slot_of(*name) for name in ordered}):
                    await self._across.acquire(slot)
                    slots.append(slot)
            return await fn()
        finally:
            for slot in reversed(slots):
                assert self._across is not None
                self._across.release(slot)
            for name in reversed(taken):
                if name in held:
                    self._locks[name][0].release()  # a waiter may run (and count) now
                lock, users = self._locks[name]
                if users == 1:
                    del self._locks[name]
                else:
                    self._locks[name] = (lock, users - 1)

    def __len__(self) -> int:
        return len(self._locks)


# -- ListObjectVersions ----------------------------------------------------------------


class ListedVersion(Protocol):
    """A listed version: a ListingEntry (or an ObjectRecord)."""

    @property
    def key(self) -> str: ...

    @property
    def version_id(self) -> str: ...


VersionT = TypeVar("VersionT", bound=ListedVersion)
FetchVersions = Callable[[str, str, str, int], Awaitable[list[VersionT]]]
"""(prefix, key_marker, version_marker, limit) -> versions, key ascending, newest first."""
# Rows asked for after skipping a group: the next row usually starts another group.
AFTER_GROUP_BATCH = 8


@dataclass
class VersionPage(Generic[VersionT]):
    entries: list[VersionT] = field(default_factory=list)  # versions and markers
    common_prefixes: list[str] = field(default_factory=list)
    is_truncated: bool = False
    next_key_marker: str = ""
    next_version_id_marker: str | None = None  # None after a common prefix


async def list_version_page(
    fetch: FetchVersions[VersionT], *, prefix: str, delimiter: str, key_marker: str,
    version_marker: str, max_keys: int,
) -> VersionPage[VersionT]:
    """One page of ListObjectVersions. Delimiter groups count once and are grouped before
    the max-keys cut; a whole group is skipped with one new range query. A batch is used to
    its end (rows of a group already counted are passed over, so a fetch may return only
    the first row of each group); when it held further rows of a group, the next query
    asks for a few rows only (AFTER_GROUP_BATCH, doubling while whole batches are listed).
    `max_keys == 0` returns nothing and is not truncated."""
    page: VersionPage[VersionT] = VersionPage()
    if max_keys <= 0:
        return page
    cursor = (key_marker, version_marker if key_marker else "")
    batch_size = min(max_keys + 1, 1001)
    limit = batch_size
    while True:
        batch = await fetch(prefix, cursor[0], cursor[1], limit)
        state = _add_versions(page, batch, prefix, delimiter, key_marker, max_keys)
        if state is None or page.is_truncated:
            return page
        cursor, passed_over = state
        if len(batch) < limit:
            return page
        limit = min(batch_size, AFTER_GROUP_BATCH if passed_over else limit * 2)


def _add_versions(
    page: VersionPage[VersionT], batch: list[VersionT], prefix: str, delimiter: str,
    key_marker: str, max_keys: int,
) -> tuple[tuple[str, str], bool] | None:
    """Add a batch to the page; returns the next cursor and whether rows of a group were
    passed over, or None when the batch was empty."""
    if not batch:
        return None
    cursor = ("", "")
    open_group: str | None = None  # the group of the rows being passed over
    passed_over = False
    for record in batch:
        if open_group is not None and record.key.startswith(open_group):
            passed_over = True
            continue
        open_group = None
        if len(page.entries) + len(page.common_prefixes) >= max_keys:
            page.is_truncated = True
            return cursor, passed_over
        group = group_of(record.key, prefix, delimiter)
        if group is None:
            page.entries.append(record)
            page.next_key_marker, page.next_version_id_marker = record.key, record.version_id
            cursor = (record.key, record.version_id)
            continue
        if group > key_marker:
            page.common_prefixes.append(group)
            page.next_key_marker, page.next_version_id_marker = group, None
        cursor, open_group = (group + _AFTER_ALL, ""), group
    return cursor, passed_over


def listing_fetch(meta: MetaStore, bucket: str, delimiter: str = ""
                  ) -> FetchVersions[ListingEntry]:
    """Pages of versions from the store; with a delimiter the store returns only the first
    row of each group (its skip scan), which `list_version_page` expects."""
    async def fetch(prefix: str, key_marker: str, version_marker: str,
                    limit: int) -> list[ListingEntry]:
        entries: list[ListingEntry] = await meta.list_version_entries(
            bucket, prefix, key_marker, version_marker, limit, delimiter)
        return entries

    return fetch

