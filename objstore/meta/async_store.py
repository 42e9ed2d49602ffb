"""`MetaStore`: the Deferred-returning metadata store the daemon uses.

This module owns the mapping of each `SyncMetaStore` method onto the DB pools (reads on the
reader pool, mutations on the writer pool) and the retry of transient database errors. The
retry loop runs inside the worker thread, so a retried call keeps its place in the pool and
the reactor never sleeps. It never runs SQL itself and never touches the reactor thread
with blocking work.

Retried: SQLite "database is locked/busy", PostgreSQL serialization failures and deadlocks
(the transaction was rolled back, so re-running it is safe), and psycopg2 connection errors
(dropped or refused connections). A connection lost during COMMIT leaves the outcome
unknown; re-running is still the better choice for our statements: puts of the same version
replace themselves, and a blob the record still references is never reported orphaned.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import ParamSpec, TypeVar, cast

from sqlalchemy import exc as sa_exc
from twisted.internet.defer import Deferred, succeed

from objstore.meta.bucket_cache import BucketCache
from objstore.meta.coherence import TtlCache
from objstore.meta.iam_async import AsyncIamQueries
from objstore.meta.listing_queries import AsyncListingQueries
from objstore.meta.object_cache import ObjectCache
from objstore.meta.observability_async import AsyncObservabilityQueries
from objstore.meta.pool import DbRunner
from objstore.meta.records import (
    BucketRecord,
    CredentialRecord,
    DeleteResult,
    ObjectRecord,
    PartRecord,
    PutResult,
    UploadRecord,
    UserRecord,
    WritePrecondition,
)
from objstore.meta.store import SyncMetaStore, UsageCheck, UsageRule

_P = ParamSpec("_P")
_R = TypeVar("_R")
_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")

_RETRYABLE_PG_CODES = frozenset({"40001", "40P01"})  # serialization_failure, deadlock
_SQLITE_BUSY_MESSAGES = ("database is locked", "database is busy", "database table is locked")


def is_transient(error: BaseException) -> bool:
    """True for database errors after which running the same transaction again may work."""
    if not isinstance(error, sa_exc.DBAPIError):
        return False
    if error.connection_invalidated:
        return True
    original = error.orig
    if getattr(original, "pgcode", None) in _RETRYABLE_PG_CODES:
        return True
    if not isinstance(error, sa_exc.OperationalError):
        return False
    if type(original).__module__.startswith("psycopg2"):
        return True
    message = str(original).lower()
    return any(text in message for text in _SQLITE_BUSY_MESSAGES)


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries with doubling delays: 0.05 s, 0.1 s, 0.2 s by default."""

    attempts: int = 4
    first_delay_seconds: float = 0.05
    max_delay_seconds: float = 1.0

    def delays(self) -> list[float]:
        return [
            min(self.first_delay_seconds * 2**n, self.max_delay_seconds)
            for n in range(max(0, self.attempts - 1))
        ]


def call_with_retries(
    policy: RetryPolicy,
    fn: Callable[[], _R],
    sleep: Callable[[float], None] = time.sleep,
) -> _R:
    """Call `fn`, again after each transient error while the policy allows; runs in a DB
    worker thread, where sleeping is allowed."""
    for delay in policy.delays():
        try:
            return fn()
        except sa_exc.DBAPIError as error:
            if not is_transient(error):
                raise
        sleep(delay)
    return fn()


def through_cache(cache: TtlCache[_K, _V], key: _K, load: Callable[[], Deferred[_V]]
                  ) -> Deferred[_V]:
    """`cache`'s entry for `key`, or what `load` gives, kept unless an invalidation
    happened while it loaded (the `TtlCache` rule)."""
    hit, value = cache.get(key)
    if hit:
        return succeed(cast(_V, value))
    token = cache.token()

    def keep(found: _V) -> _V:
        cache.store(key, found, token)
        return found

    return load().addCallback(keep)


class MetaStore(AsyncIamQueries, AsyncObservabilityQueries, AsyncListingQueries):
    """Every `SyncMetaStore` query as a method returning a Deferred (the IAM ones come from
    `iam_async.py`). Reads run on the reader
    pool, mutations on the writer pool. `iter_objects` is offered page by page as
    `objects_batch` (a generator cannot be shared between threads)."""

    def __init__(
        self,
        store: SyncMetaStore,
        pool: DbRunner,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        bucket_cache: BucketCache | None = None,
        object_cache: ObjectCache | None = None,
    ) -> None:
        self._store = store
        self._pool = pool
        self._retry = retry or RetryPolicy()
        self._sleep = sleep
        self._buckets = bucket_cache
        # Coherent only while every object write bumps the cache's counter: the node sets
        # `store.objects_changed` to do so (service.py) before it serves.
        self._objects = object_cache if object_cache is not None and object_cache.enabled \
            else None

    @property
    def sync_store(self) -> SyncMetaStore:
        return self._store

    def _read(self, fn: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> Deferred[_R]:
        return self._pool.run_read(self._retrying(fn, *args, **kwargs))

    def _write(self, fn: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> Deferred[_R]:
        return self._pool.run_write(self._retrying(fn, *args, **kwargs))

    def _retrying(
        self, fn: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs
    ) -> Callable[[], _R]:
        def attempt() -> _R:
            return call_with_retries(self._retry, lambda: fn(*args, **kwargs), self._sleep)

        return attempt

    # -- lifecycle -------------------------------------------------------------------
    def migrate(self) -> Deferred[None]:
        return self._write(self._store.migrate)

    def close(self) -> Deferred[None]:
        """Close pooled connections (`DbPool.stop` does this too, on shutdown)."""
        return self._write(self._store.close)

    # -- buckets ---------------------------------------------------------------------
    def _bucket_write(self, name: str, d: Deferred[_R]) -> Deferred[_R]:
        """Invalidate the cached bucket now and again once the write is done."""
        if self._buckets is None:
            return d
        cache = self._buckets
        cache.invalidate(name)

        def done(result: _R) -> _R:
            cache.invalidate(name)
            return result

        return d.addBoth(done)

    def create_bucket(self, bucket: BucketRecord) -> Deferred[bool]:
        return self._bucket_write(bucket.name, self._write(self._store.create_bucket, bucket))

    def get_bucket(self, name: str) -> Deferred[BucketRecord | None]:
        if self._buckets is None:
            return self._read(self._store.get_bucket, name)
        return through_cache(self._buckets, name,
                             lambda: self._read(self._store.get_bucket, name))

    def list_buckets(self) -> Deferred[list[BucketRecord]]:
        return self._read(self._store.list_buckets)

    def update_bucket(self, bucket: BucketRecord) -> Deferred[None]:
        return self._bucket_write(bucket.name, self._write(self._store.update_bucket, bucket))

    def delete_bucket(self, name: str) -> Deferred[str]:
        return self._bucket_write(name, self._write(self._store.delete_bucket, name))

    def enable_object_lock(self, name: str, updated_at: float) -> Deferred[str]:
        return self._bucket_write(
            name, self._write(self._store.enable_object_lock, name, updated_at))

    def get_bucket_config(self, bucket: str, key: str) -> Deferred[str | None]:
        return self._read(self._store.get_bucket_config, bucket, key)

    def put_bucket_config(self, bucket: str, key: str, value: str) -> Deferred[None]:
        return self._write(self._store.put_bucket_config, bucket, key, value)

    def delete_bucket_config(self, bucket: str, key: str) -> Deferred[bool]:
        return self._write(self._store.delete_bucket_config, bucket, key)

    def list_bucket_config(self, bucket: str) -> Deferred[dict[str, str]]:
        return self._read(self._store.list_bucket_config, bucket)

    # -- objects ---------------------------------------------------------------------
    def put_object(
        self, record: ObjectRecord, precondition: WritePrecondition | None = None,
        usage_check: UsageCheck | None = None, usage_rule: UsageRule | None = None,
    ) -> Deferred[PutResult]:
        return self._write(self._store.put_object, record, precondition, usage_check,
                           usage_rule)

    def get_object(
        self, bucket: str, key: str, version_id: str | None = None, *, cached: bool = False
    ) -> Deferred[ObjectRecord | None]:
        """The version (the latest without `version_id`). With `cached`, from the object
        cache when it holds it (see meta/object_cache.py): for reads that only answer a
        client (GET, HEAD). Reads that decide a write (lock rules, conditions, lifecycle)
        go to the database, so a row changed by a writer outside the node (`objstore
        recover`, another node on the same database) is never acted upon stale."""
        if self._objects is None or not cached:
            return self._read(self._store.get_object, bucket, key, version_id)
        return through_cache(self._objects, (bucket, key, version_id),
                             lambda: self._read(self._store.get_object, bucket, key, version_id))

    def delete_object_version(
        self, bucket: str, key: str, version_id: str, expected_seq: int | None = None
    ) -> Deferred[DeleteResult]:
        return self._write(self._store.delete_object_version, bucket, key, version_id,
                           expected_seq)

    def update_object(
        self, record: ObjectRecord, expected_seq: int | None = None
    ) -> Deferred[ObjectRecord]:
        return self._write(self._store.update_object, record, expected_seq)

    def list_latest(
        self, bucket: str, prefix: str = "", start_after: str = "", limit: int = 1000
    ) -> Deferred[list[ObjectRecord]]:
        return self._read(self._store.list_latest, bucket, prefix, start_after, limit)

    def list_versions(
        self,
        bucket: str,
        prefix: str = "",
        key_marker: str = "",
        version_marker: str = "",
        limit: int = 1000,
    ) -> Deferred[list[ObjectRecord]]:
        return self._read(
            self._store.list_versions, bucket, prefix, key_marker, version_marker, limit
        )

    def bucket_usage(self, bucket: str) -> Deferred[tuple[int, int]]:
        return self._read(self._store.bucket_usage, bucket)

    def storage_totals(self) -> Deferred[tuple[int, int, int]]:
        return self._read(self._store.storage_totals)

    def objects_batch(
        self, after: tuple[str, str, str] | None, limit: int = 1000
    ) -> Deferred[list[ObjectRecord]]:
        return self._read(self._store.objects_batch, after, limit)

    def insert_recovered(self, records: Sequence[ObjectRecord]) -> Deferred[None]:
        return self._write(self._store.insert_recovered, records)

    def max_seq(self) -> Deferred[int]:
        return self._read(self._store.max_seq)

    # -- multipart -------------------------------------------------------------------
    def create_upload(self, upload: UploadRecord) -> Deferred[None]:
        return self._write(self._store.create_upload, upload)

    def get_upload(self, upload_id: str) -> Deferred[UploadRecord | None]:
        return self._read(self._store.get_upload, upload_id)

    def list_uploads(
        self,
        bucket: str,
        prefix: str = "",
        key_marker: str = "",
        upload_id_marker: str = "",
        limit: int = 1000,
    ) -> Deferred[list[UploadRecord]]:
        return self._read(
            self._store.list_uploads, bucket, prefix, key_marker, upload_id_marker, limit
        )

    def put_part(self, part: PartRecord) -> Deferred[str | None]:
        return self._write(self._store.put_part, part)

    def list_parts(
        self, upload_id: str, after_part: int = 0, limit: int = 10000
    ) -> Deferred[list[PartRecord]]:
        return self._read(self._store.list_parts, upload_id, after_part, limit)

    def delete_upload(self, upload_id: str) -> Deferred[list[PartRecord]]:
        return self._write(self._store.delete_upload, upload_id)

    def complete_upload(
        self, upload_id: str, record: ObjectRecord,
        precondition: WritePrecondition | None = None, usage_check: UsageCheck | None = None,
    ) -> Deferred[PutResult]:
        return self._write(self._store.complete_upload, upload_id, record, precondition,
                           usage_check)

    # -- users and credentials -------------------------------------------------------
    def create_user(self, user: UserRecord) -> Deferred[bool]:
        return self._write(self._store.create_user, user)

    def get_user(self, user_id: str) -> Deferred[UserRecord | None]:
        return self._read(self._store.get_user, user_id)

    def get_user_by_name(self, username: str) -> Deferred[UserRecord | None]:
        return self._read(self._store.get_user_by_name, username)

    def list_users(self) -> Deferred[list[UserRecord]]:
        return self._read(self._store.list_users)

    def create_credential(self, credential: CredentialRecord) -> Deferred[bool]:
        return self._write(self._store.create_credential, credential)

    def get_credential(self, access_key_id: str) -> Deferred[CredentialRecord | None]:
        return self._read(self._store.get_credential, access_key_id)

    def lookup_identity(
        self, access_key_id: str
    ) -> Deferred[tuple[CredentialRecord, UserRecord] | None]:
        return self._read(self._store.lookup_identity, access_key_id)

    def list_credentials(self, user_id: str | None = None) -> Deferred[list[CredentialRecord]]:
        return self._read(self._store.list_credentials, user_id)

    def update_credential(self, credential: CredentialRecord) -> Deferred[None]:
        return self._write(self._store.update_credential, credential)

    def delete_credential(self, access_key_id: str) -> Deferred[bool]:
        return self._write(self._store.delete_credential, access_key_id)

    # -- settings --------------------------------------------------------------------
    def get_setting(self, key: str) -> Deferred[str | None]:
        return self._read(self._store.get_setting, key)

    def put_setting(self, key: str, value: str) -> Deferred[None]:
        return self._write(self._store.put_setting, key, value)

    def delete_setting(self, key: str) -> Deferred[bool]:
        return self._write(self._store.delete_setting, key)

    def list_settings(self) -> Deferred[dict[str, str]]:
        return self._read(self._store.list_settings)

    # -- tombstones ------------------------------------------------------------------
    def get_tombstone(self, family: str, key: str) -> Deferred[tuple[float, int | None] | None]:
        return self._read(self._store.get_tombstone, family, key)
