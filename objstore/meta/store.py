"""The metadata store's query surface.

`SyncMetaStore` holds every query as a plain synchronous method over a SQLAlchemy Engine; it
is used directly by the offline tools (recover, check) and, through `MetaStore`, by the
daemon, which runs each call on the DB thread pool and returns a Deferred. Nothing here
imports Twisted web or Klein, and no method returns a live Result or Row: only records.

Object rows are cluster-ready: every mutation of an object row takes a fresh `seq` from the
commit-ordered counter inside the same transaction.

`SqlMetaStore` is the implementation for both backends. Each public method is one short
transaction (writes through `write_transaction`, reads through `read_transaction`; the two
hot paths, `get_object` and `put_object`, run statements compiled once on the driver, in
`object_queries.py` and `object_write_queries.py`). Every
transaction that touches object rows takes its seq FIRST: the counter row's lock is then the
single lock all object writers queue on, which makes seq commit-ordered on PostgreSQL,
serialises concurrent writers of the same key, and rules out lock-order deadlocks.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Concatenate, ParamSpec, Protocol, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from objstore.meta import migrations, object_queries, object_write_queries, schema
from objstore.meta.audit_queries import AuditQueries, SqlAuditQueries
from objstore.meta.engine import (
    connection_count,
    create_db_engine,
    insert_ignore,
    read_transaction,
    upsert,
    write_transaction,
)
from objstore.meta.iam_queries import IamQueries
from objstore.meta.iam_sql import SqlIamQueries
from objstore.meta.listing_queries import ListingQueries, SqlListingQueries
from objstore.meta.metrics_queries import MetricsQueries, SqlMetricsQueries
from objstore.meta.object_write_queries import Usage, UsageCheck, UsageRule
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


class SyncMetaStore(IamQueries, AuditQueries, MetricsQueries, ListingQueries):
    """Synchronous queries (the IAM ones are declared in `iam_queries.py`). Implementations
    must be safe to call from several threads, each call using its own
    connection/transaction (SQLite: writes serialised on one writer)."""

    # Called (on the DB thread) after every transaction that may have changed object rows,
    # before its caller hears of it: what keeps the object caches coherent.
    objects_changed: Callable[[], None]

    # -- lifecycle -------------------------------------------------------------------
    def migrate(self) -> None:
        """Create or upgrade the schema to the current version (idempotent)."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    # -- buckets ---------------------------------------------------------------------
    def create_bucket(self, bucket: BucketRecord) -> bool:
        """Insert; False (and no change) when a bucket of that name exists."""
        raise NotImplementedError

    def get_bucket(self, name: str) -> BucketRecord | None:
        raise NotImplementedError

    def list_buckets(self) -> list[BucketRecord]:
        """All buckets ordered by name."""
        raise NotImplementedError

    def update_bucket(self, bucket: BucketRecord) -> None:
        """Replace versioning/object_lock/updated_at of an existing bucket."""
        raise NotImplementedError

    def delete_bucket(self, name: str) -> str:
        """Atomically delete an empty bucket and its config keys. Returns "deleted",
        "missing", or "not_empty" (any object version, delete marker or multipart upload
        remains; nothing is changed then)."""
        raise NotImplementedError

    def enable_object_lock(self, name: str, updated_at: float) -> str:
        """Atomically turn object lock on (and versioning to Enabled) for a bucket that holds
        no object version or delete marker. Returns "enabled", "missing" or "not_empty"
        (nothing is changed then)."""
        raise NotImplementedError

    def get_bucket_config(self, bucket: str, key: str) -> str | None:
        raise NotImplementedError

    def put_bucket_config(self, bucket: str, key: str, value: str) -> None:
        raise NotImplementedError

    def delete_bucket_config(self, bucket: str, key: str) -> bool:
        raise NotImplementedError

    def list_bucket_config(self, bucket: str) -> dict[str, str]:
        raise NotImplementedError

    # -- objects ---------------------------------------------------------------------
    def put_object(
        self, record: ObjectRecord, precondition: WritePrecondition | None = None,
        usage_check: UsageCheck | None = None, usage_rule: UsageRule | None = None,
    ) -> PutResult:
        """Store a version as the latest of its key, in one transaction: take a new seq,
        remove an existing row with the same (bucket, key, version_id) (its blob_id and the
        blob_ids of its parts become orphaned), mark the previous latest not-latest, insert
        the record with is_latest=True. A precondition that does not hold raises
        PreconditionNotMet and changes nothing; so does any exception `usage_check` raises
        (it is given the bucket's usage before and after the write), and so does the check
        `usage_rule` makes of the bucket's configuration document, read in the same
        transaction."""
        raise NotImplementedError

    def get_object(
        self, bucket: str, key: str, version_id: str | None = None
    ) -> ObjectRecord | None:
        """The latest version (which may be a delete marker) or the named version."""
        raise NotImplementedError

    def delete_object_version(
        self, bucket: str, key: str, version_id: str, expected_seq: int | None = None
    ) -> DeleteResult:
        """Remove one version row (taking a new seq for any promoted row). When it was the
        latest, the newest remaining version (last_modified, then seq) becomes latest.
        With `expected_seq`, a row whose seq differs raises RowChanged (nothing changes)."""
        raise NotImplementedError

    def update_object(self, record: ObjectRecord, expected_seq: int | None = None) -> ObjectRecord:
        """Rewrite mutable fields (tags, lock state, replication status, metadata) of an
        existing version in place with a fresh seq; returns the stored record. With
        `expected_seq`, a row whose seq differs raises RowChanged (nothing changes)."""
        raise NotImplementedError

    def list_latest(
        self, bucket: str, prefix: str = "", start_after: str = "", limit: int = 1000
    ) -> list[ObjectRecord]:
        """Latest, non-delete-marker versions whose key starts with prefix and sorts after
        start_after, ordered by key (binary/codepoint order), at most limit rows. One indexed
        range query."""
        raise NotImplementedError

    def list_versions(
        self,
        bucket: str,
        prefix: str = "",
        key_marker: str = "",
        version_marker: str = "",
        limit: int = 1000,
    ) -> list[ObjectRecord]:
        """All versions and delete markers, key ascending then newest first, starting after
        (key_marker, version_marker) as S3 ListObjectVersions defines the markers."""
        raise NotImplementedError

    def bucket_usage(self, bucket: str) -> tuple[int, int]:
        """(object version count, total bytes) over all versions of the bucket."""
        raise NotImplementedError

    def iter_objects(self, batch_size: int = 1000) -> Iterator[ObjectRecord]:
        """Every object row of every bucket, in (bucket, key, version_id) order, fetched in
        batches (for check and export); memory stays flat."""
        raise NotImplementedError

    def insert_recovered(self, records: Sequence[ObjectRecord]) -> None:
        """Bulk insert rows rebuilt from sidecars exactly as given (is_latest included),
        each taking a fresh seq. Used by `objstore recover` on an empty database."""
        raise NotImplementedError

    def max_seq(self) -> int:
        """Current value of the object sequence counter."""
        raise NotImplementedError

    def objects_batch(
        self, after: tuple[str, str, str] | None, limit: int = 1000
    ) -> list[ObjectRecord]:
        """One page of `iter_objects`: rows strictly after `after` (bucket, key,
        version_id) in that order, in a read transaction of its own."""
        raise NotImplementedError

    def storage_totals(self) -> tuple[int, int, int]:
        """(bucket count, object version count, total bytes) for the whole store; delete
        markers are not counted."""
        raise NotImplementedError

    # -- multipart -------------------------------------------------------------------
    def create_upload(self, upload: UploadRecord) -> None:
        raise NotImplementedError

    def get_upload(self, upload_id: str) -> UploadRecord | None:
        raise NotImplementedError

    def list_uploads(
        self,
        bucket: str,
        prefix: str = "",
        key_marker: str = "",
        upload_id_marker: str = "",
        limit: int = 1000,
    ) -> list[UploadRecord]:
        raise NotImplementedError

    def put_part(self, part: PartRecord) -> str | None:
        """Insert or replace a part; returns the blob_id of a replaced part (to delete)."""
        raise NotImplementedError

    def list_parts(
        self, upload_id: str, after_part: int = 0, limit: int = 10000
    ) -> list[PartRecord]:
        raise NotImplementedError

    def delete_upload(self, upload_id: str) -> list[PartRecord]:
        """Remove the upload and its part rows; returns the removed parts."""
        raise NotImplementedError

    def complete_upload(
        self, upload_id: str, record: ObjectRecord,
        precondition: WritePrecondition | None = None, usage_check: UsageCheck | None = None,
    ) -> PutResult:
        """Close an upload into the object `record` (whose parts reference its part blobs)
        in ONE transaction: store the record as put_object does, and remove the upload, its
        part rows (leaving an upload tombstone). Raises RecordNotFound when the upload is
        gone or belongs to another key, PartsChanged when a part that `record` references
        was replaced meanwhile, PreconditionNotMet as put_object; nothing changes then.
        Orphaned: blobs of parts the record does not use, and of a replaced version."""
        raise NotImplementedError

    # -- users and credentials -------------------------------------------------------
    def create_user(self, user: UserRecord) -> bool:
        """False when the username is taken."""
        raise NotImplementedError

    def get_user(self, user_id: str) -> UserRecord | None:
        raise NotImplementedError

    def get_user_by_name(self, username: str) -> UserRecord | None:
        raise NotImplementedError

    def list_users(self) -> list[UserRecord]:
        raise NotImplementedError

    def create_credential(self, credential: CredentialRecord) -> bool:
        """False when the access key exists."""
        raise NotImplementedError

    def get_credential(self, access_key_id: str) -> CredentialRecord | None:
        raise NotImplementedError

    def lookup_identity(self, access_key_id: str) -> tuple[CredentialRecord, UserRecord] | None:
        """The credential and its user in one query; None when either is missing."""
        raise NotImplementedError

    def list_credentials(self, user_id: str | None = None) -> list[CredentialRecord]:
        raise NotImplementedError

    def update_credential(self, credential: CredentialRecord) -> None:
        raise NotImplementedError

    def delete_credential(self, access_key_id: str) -> bool:
        """Remove a credential, leaving a tombstone; False when it did not exist."""
        raise NotImplementedError

    # -- settings --------------------------------------------------------------------
    def get_setting(self, key: str) -> str | None:
        raise NotImplementedError

    def put_setting(self, key: str, value: str) -> None:
        raise NotImplementedError

    def delete_setting(self, key: str) -> bool:
        raise NotImplementedError

    def list_settings(self) -> dict[str, str]:
        """Every setting, by key."""
        raise NotImplementedError

    # -- tombstones ------------------------------------------------------------------
    def get_tombstone(self, family: str, key: str) -> tuple[float, int | None] | None:
        """(deleted_at, seq) of the tombstone of a deleted entity, or None."""
        raise NotImplementedError


# -- errors ---------------------------------------------------------------------------


class MetaStoreError(Exception):
    """Base of the errors the store raises on purpose (driver errors pass through)."""


class RecordNotFound(MetaStoreError, LookupError):
    """A mutation named a row (or its parent bucket/upload) that does not exist."""


class PartsChanged(MetaStoreError):
    """A completion named part blobs that are no longer the upload's parts (a part was
    replaced after the caller read them); read the parts again and retry."""


class RowChanged(MetaStoreError):
    """A guarded mutation (expected_seq) found the row rewritten since the caller read it;
    read it again and decide again."""


class PreconditionNotMet(MetaStoreError):
    """A conditional write found the key in the wrong state. `reason` is "exists" (an
    If-None-Match: * write found an object), "mismatch" (If-Match saw another ETag) or
    "missing" (If-Match found no object)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# -- tombstones -----------------------------------------------------------------------

TOMBSTONE_OBJECT = "object"
TOMBSTONE_BUCKET = "bucket"
TOMBSTONE_BUCKET_CONFIG = "bucket_config"
TOMBSTONE_UPLOAD = "upload"
TOMBSTONE_SETTING = "setting"
TOMBSTONE_CREDENTIAL = "credential"


def object_tombstone_key(bucket: str, key: str, version_id: str) -> str:
    """`bucket:version_id:key`; unambiguous because bucket names and version ids hold no
    colon, so `split(":", 2)` recovers the parts even when the key has colons."""
    return f"{bucket}:{version_id}:{key}"


def bucket_config_tombstone_key(bucket: str, key: str) -> str:
    return f"{bucket}:{key}"


# -- key ranges -----------------------------------------------------------------------

_MAX_CODE_POINT = 0x10FFFF
_SURROGATES_FIRST, _SURROGATES_LAST = 0xD800, 0xDFFF


def prefix_upper_bound(prefix: str) -> str | None:
    """The smallest string greater than every string that starts with `prefix`, in code
    point order; None when there is none ("" or a prefix of only U+10FFFF).

    Surrogate code points never occur in keys (they cannot be UTF-8 encoded), so the
    successor of U+D7FF is U+E000."""
    chars = list(prefix)
    while chars:
        code = ord(chars[-1])
        if code >= _MAX_CODE_POINT:
            chars.pop()
            continue
        code += 1
        if _SURROGATES_FIRST <= code <= _SURROGATES_LAST:
            code = _SURROGATES_LAST + 1
        chars[-1] = chr(code)
        return "".join(chars)
    return None


def _key_range(column: sa.ColumnElement[str], prefix: str) -> list[sa.ColumnElement[bool]]:
    if not prefix:
        return []
    clauses = [column >= prefix]
    upper = prefix_upper_bound(prefix)
    if upper is not None:
        clauses.append(column < upper)
    return clauses


def _next_seq(conn: Connection, count: int = 1) -> int:
    """Advance the object counter by `count` and return its new value. The UPDATE holds the
    counter row's lock until commit, which is what makes seq commit-ordered."""
    counter = schema.seq_counter
    return int(
        conn.execute(
            sa.update(counter)
            .where(counter.c.name == schema.OBJECTS_SEQ_NAME)
            .values(value=counter.c.value + count)
            .returning(counter.c.value)
        ).scalar_one()
    )


def _check_precondition(
    conn: Connection, record: ObjectRecord, precondition: WritePrecondition
) -> None:
    """`object_write_queries.check_precondition` on a Core connection, raising the
    store's PreconditionNotMet."""
    try:
        object_write_queries.check_precondition(
            object_write_queries.CoreRows(conn), record, precondition)
    except object_write_queries.PreconditionFailed as failed:
        raise PreconditionNotMet(str(failed)) from None


def _insert_latest(
    conn: Connection, record: ObjectRecord, seq: int
) -> tuple[ObjectRecord, list[str | None]]:
    """Store `record` as the latest version of its key under `seq`, replacing a row of the
    same version. Returns the stored record and the blob ids the replaced row used."""
    o = schema.objects
    replaced = conn.execute(
        sa.delete(o)
        .where(_object_pk(record.bucket, record.key, record.version_id))
        .returning(o.c.blob_id, o.c.parts)
    ).first()
    conn.execute(
        sa.update(o)
        .where(o.c.bucket == record.bucket, o.c.key == record.key, schema.LATEST_PREDICATE)
        .values(is_latest=False)
    )
    stored = replace(record, is_latest=True, seq=seq)
    conn.execute(sa.insert(o).values(**schema.object_values(stored)))
    if replaced is None:
        return stored, []
    return stored, [replaced.blob_id, *(p.blob_id for p in schema.part_refs(replaced.parts))]


def _object_pk(bucket: str, key: str, version_id: str) -> sa.ColumnElement[bool]:
    o = schema.objects
    return sa.and_(o.c.bucket == bucket, o.c.key == key, o.c.version_id == version_id)


def _row_exists(conn: Connection, where: sa.ColumnElement[bool]) -> bool:
    o = schema.objects
    return conn.execute(sa.select(o.c.seq).where(where)).first() is not None


# Fields `update_object` may rewrite; the rest describe the stored bytes or the row's
# identity and stay as they are.
MUTABLE_OBJECT_FIELDS = (
    "content_type",
    "user_metadata",
    "system_headers",
    "storage_class",
    "tags",
    "retention_mode",
    "retain_until_date",
    "legal_hold_status",
    "lock_updated_at",
    "replication_status",
)

# Versions listing order: key ascending, then newest first.
_VERSION_ORDER = (
    schema.objects.c.key,
    schema.objects.c.last_modified.desc(),
    schema.objects.c.seq.desc(),
)


class StorageSettings(Protocol):
    """What `open_sync_store` reads from the `[storage]` configuration section."""

    @property
    def data_dir(self) -> str | os.PathLike[str]: ...

    @property
    def metadata_backend(self) -> str: ...

    @property
    def postgres_url(self) -> str | None: ...

    @property
    def sqlite_path(self) -> str | os.PathLike[str] | None: ...

    @property
    def db_pool_size(self) -> int: ...


def sqlite_path_for(storage: StorageSettings) -> str:
    if storage.sqlite_path:
        return os.fspath(storage.sqlite_path)
    return os.path.join(os.fspath(storage.data_dir), "meta", "objstore.db")


def open_sync_store(
    storage: StorageSettings, clock: Callable[[], float] = time.time
) -> SqlMetaStore:
    """A store over a new engine sized for the DB thread pools; does not migrate."""
    backend = storage.metadata_backend
    engine = create_db_engine(
        backend,
        sqlite_path_for(storage) if backend == "sqlite" else None,
        storage.postgres_url,
        connection_count(backend, storage.db_pool_size),
    )
    return SqlMetaStore(engine, clock=clock)


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _changes_objects(method: Callable[Concatenate[SqlMetaStore, _P], _R]
                     ) -> Callable[Concatenate[SqlMetaStore, _P], _R]:
    """Marks a method that may change object rows (every method that takes a seq): once it
    has returned or raised, its transaction is over and `objects_changed` is called (on the
    calling DB thread), before the caller hears of it. `test_object_cache.py` checks that
    every method taking a seq carries it."""

    @functools.wraps(method)
    def changing(self: SqlMetaStore, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(self, *args, **kwargs)
        finally:
            self.objects_changed()

    return changing


def _no_change_listener() -> None:
    return None


class SqlMetaStore(SqlIamQueries, SqlAuditQueries, SqlMetricsQueries, SqlListingQueries,
                   SyncMetaStore):
    """`SyncMetaStore` over SQLAlchemy Core, for SQLite and PostgreSQL alike (the IAM
    queries live in `iam_sql.py`)."""

    def __init__(self, engine: Engine, clock: Callable[[], float] = time.time) -> None:
        self._engine = engine
        self._clock = clock
        # The node bumps its OBJECTS coherence counter here (meta/object_cache.py).
        self.objects_changed = _no_change_listener

    @property
    def engine(self) -> Engine:
        return self._engine

    @property
    def backend(self) -> str:
        return "postgres" if self._engine.dialect.name == "postgresql" else "sqlite"

    # -- lifecycle -------------------------------------------------------------------
    def migrate(self) -> None:
        migrations.migrate(self._engine, clock=self._clock)

    def is_initialised(self) -> bool:
        """True when the schema exists (read-only tools refuse a blank database)."""
        return bool(migrations.applied_versions(self._engine))

    def close(self) -> None:
        self._engine.dispose()

    # -- helpers ---------------------------------------------------------------------
    def _tombstone(self, conn: Connection, family: str, key: str, seq: int | None = None) -> None:
        upsert(
            conn,
            schema.tombstones,
            {"family": family, "key": key, "deleted_at": self._clock(), "seq": seq},
            ("family", "key"),
        )

    @staticmethod
    def _bucket_exists(conn: Connection, name: str, *, lock: str) -> bool:
        """Look the bucket up under a row lock on PostgreSQL: "share" (FOR KEY SHARE, the
        lock a foreign key check takes anyway) for writers of child rows, "update" for
        delete_bucket. SQLite needs none: its writers are serialised by BEGIN IMMEDIATE."""
        b = schema.buckets
        query = sa.select(b.c.name).where(b.c.name == name)
        if lock == "update":
            query = query.with_for_update()
        else:
            query = query.with_for_update(read=True, key_share=True)
        return conn.execute(query).first() is not None

    # -- buckets ---------------------------------------------------------------------
    def create_bucket(self, bucket: BucketRecord) -> bool:
        """Insert; False (and no change) when a bucket of that name exists. An updated_at of
        0 is stored as created_at (likewise for users, credentials and uploads)."""
        values = {
            "name": bucket.name,
            "owner_id": bucket.owner_id,
            "region": bucket.region,
            "created_at": bucket.created_at,
            "versioning": bucket.versioning,
            "object_lock": bucket.object_lock,
            "updated_at": bucket.updated_at or bucket.created_at,
        }
        with write_transaction(self._engine) as conn:
            return insert_ignore(conn, schema.buckets, values)

    def get_bucket(self, name: str) -> BucketRecord | None:
        b = schema.buckets
        with read_transaction(self._engine) as conn:
            row = conn.execute(sa.select(b).where(b.c.name == name)).mappings().first()
        return None if row is None else schema.bucket_record(row)

    def list_buckets(self) -> list[BucketRecord]:
        b = schema.buckets
        with read_transaction(self._engine) as conn:
            rows = conn.execute(sa.select(b).order_by(b.c.name)).mappings().all()
        return [schema.bucket_record(r) for r in rows]

    def update_bucket(self, bucket: BucketRecord) -> None:
        b = schema.buckets
        with write_transaction(self._engine) as conn:
            result = conn.execute(
                sa.update(b)
                .where(b.c.name == bucket.name)
                .values(
                    versioning=bucket.versioning,
                    object_lock=bucket.object_lock,
                    updated_at=bucket.updated_at,
                )
            )
            if result.rowcount != 1:
                raise RecordNotFound(f"bucket {bucket.name!r}")

    def delete_bucket(self, name: str) -> str:
        o, u = schema.objects, schema.multipart_uploads
        with write_transaction(self._engine) as conn:
            # The row lock makes concurrent puts wait, then fail to find the bucket.
            if not self._bucket_exists(conn, name, lock="update"):
                return "missing"
            has_object = conn.execute(sa.select(o.c.key).where(o.c.bucket == name).limit(1))
            if has_object.first() is not None:
                return "not_empty"
            has_upload = conn.execute(sa.select(u.c.upload_id).where(u.c.bucket == name).limit(1))
            if has_upload.first() is not None:
                return "not_empty"
            config = schema.bucket_config
            conn.execute(sa.delete(config).where(config.c.bucket == name))
            conn.execute(sa.delete(schema.buckets).where(schema.buckets.c.name == name))
            self._tombstone(conn, TOMBSTONE_BUCKET, name)
            return "deleted"

    def enable_object_lock(self, name: str, updated_at: float) -> str:
        """Object writers take the bucket row lock in share mode, so the row lock taken here
        orders every concurrent put before or after the emptiness check."""
        o, b = schema.objects, schema.buckets
        with write_transaction(self._engine) as conn:
            if not self._bucket_exists(conn, name, lock="update"):
                return "missing"
            has_object = conn.execute(sa.select(o.c.key).where(o.c.bucket == name).limit(1))
            if has_object.first() is not None:
                return "not_empty"
            conn.execute(
                sa.update(b).where(b.c.name == name)
                .values(object_lock=True, versioning="Enabled", updated_at=updated_at)
            )
            return "enabled"

    def get_bucket_config(self, bucket: str, key: str) -> str | None:
        c = schema.bucket_config
        with read_transaction(self._engine) as conn:
            value = conn.execute(
                sa.select(c.c.value).where(c.c.bucket == bucket, c.c.key == key)
            ).scalar()
        return None if value is None else str(value)

    def put_bucket_config(self, bucket: str, key: str, value: str) -> None:
        with write_transaction(self._engine) as conn:
            if not self._bucket_exists(conn, bucket, lock="share"):
                raise RecordNotFound(f"bucket {bucket!r}")
            upsert(
                conn,
                schema.bucket_config,
                {"bucket": bucket, "key": key, "value": value, "updated_at": self._clock()},
                ("bucket", "key"),
            )

    def delete_bucket_config(self, bucket: str, key: str) -> bool:
        c = schema.bucket_config
        with write_transaction(self._engine) as conn:
            result = conn.execute(sa.delete(c).where(c.c.bucket == bucket, c.c.key == key))
            if result.rowcount == 0:
                return False
            self._tombstone(conn, TOMBSTONE_BUCKET_CONFIG, bucket_config_tombstone_key(bucket, key))
            return True

    def list_bucket_config(self, bucket: str) -> dict[str, str]:
        c = schema.bucket_config
        with read_transaction(self._engine) as conn:
            rows = conn.execute(
                sa.select(c.c.key, c.c.value).where(c.c.bucket == bucket).order_by(c.c.key)
            ).all()
        return {str(k): str(v) for k, v in rows}

    # -- objects ---------------------------------------------------------------------
    @_changes_objects
    def put_object(
        self, record: ObjectRecord, precondition: WritePrecondition | None = None,
        usage_check: UsageCheck | None = None, usage_rule: UsageRule | None = None,
    ) -> PutResult:
        """Store a version as the latest of its key, in one transaction: take a new seq,
        remove an existing row with the same (bucket, key, version_id) (its blob_id and the
        blob_ids of its parts become orphaned), mark the previous latest not-latest, insert
        the record with is_latest=True. The precondition, the usage rule's document and the
        usage are read after the seq row lock is held, so concurrent writers of the key are
        serialised around the checks. The transaction runs on the driver with statements
        compiled once (`object_write_queries`): it is the hot path of every PUT.

        Blob ids that the new record itself references are never reported as orphaned (a
        retried identical put must not delete its own blob). Raises RecordNotFound when the
        bucket does not exist."""
        try:
            return object_write_queries.put_object(
                self._engine, record, precondition, usage_check, usage_rule)
        except object_write_queries.BucketMissing:
            raise RecordNotFound(f"bucket {record.bucket!r}") from None
        except object_write_queries.PreconditionFailed as failed:
            raise PreconditionNotMet(str(failed)) from None

    def get_object(
        self, bucket: str, key: str, version_id: str | None = None
    ) -> ObjectRecord | None:
        return object_queries.get_object(self._engine, bucket, key, version_id)

    @_changes_objects
    def delete_object_version(
        self, bucket: str, key: str, version_id: str, expected_seq: int | None = None
    ) -> DeleteResult:
        """Remove one version row (taking a new seq for any promoted row). When it was the
        latest, the newest remaining version (last_modified, then seq) becomes latest.

        The delete leaves an object tombstone carrying its own fresh seq, so the change
        cursor sees deletes too. Nothing changes (no seq is used) when no row matched, or
        when `expected_seq` is given and the row's seq differs (RowChanged)."""
        o = schema.objects
        where = _object_pk(bucket, key, version_id)
        with write_transaction(self._engine) as conn:
            tombstone_seq = _next_seq(conn)
            guarded = where if expected_seq is None else sa.and_(where, o.c.seq == expected_seq)
            removed_row = (
                conn.execute(sa.delete(o).where(guarded).returning(o))
                .mappings()
                .first()
            )
            if removed_row is None:
                if expected_seq is not None and _row_exists(conn, where):
                    raise RowChanged(f"{bucket}/{key} version {version_id}")  # rolls back
                conn.get_transaction().rollback()  # type: ignore[union-attr]
                return DeleteResult(removed=None)
            removed = schema.object_record(removed_row)
            new_latest = None
            if removed.is_latest:
                new_latest = self._promote_newest(conn, bucket, key)
            self._tombstone(
                conn,
                TOMBSTONE_OBJECT,
                object_tombstone_key(bucket, key, version_id),
                tombstone_seq,
            )
        return DeleteResult(removed=removed, new_latest=new_latest)

    @staticmethod
    def _promote_newest(conn: Connection, bucket: str, key: str) -> ObjectRecord | None:
        o = schema.objects
        newest = conn.execute(
            sa.select(o.c.version_id)
            .where(o.c.bucket == bucket, o.c.key == key)
            .order_by(o.c.last_modified.desc(), o.c.seq.desc())
            .limit(1)
        ).scalar()
        if newest is None:
            return None
        seq = _next_seq(conn)
        row = (
            conn.execute(
                sa.update(o)
                .where(_object_pk(bucket, key, newest))
                .values(is_latest=True, seq=seq)
                .returning(o)
            )
            .mappings()
            .one()
        )
        return schema.object_record(row)

    @_changes_objects
    def update_object(self, record: ObjectRecord, expected_seq: int | None = None) -> ObjectRecord:
        """Rewrite mutable fields (tags, lock state, replication status, metadata) of an
        existing version in place with a fresh seq; returns the stored record.

        The fields rewritten are `MUTABLE_OBJECT_FIELDS`; identity, is_latest and the
        fields describing the stored bytes (blob_id, parts, size, etag, checksums,
        encryption, compression, last_modified, owner) keep their stored values. Raises
        RecordNotFound when the version does not exist, RowChanged when `expected_seq` is
        given and the row's seq differs (a concurrent writer replaced or changed it)."""
        o = schema.objects
        given = schema.object_values(record)
        where = _object_pk(record.bucket, record.key, record.version_id)
        guarded = where if expected_seq is None else sa.and_(where, o.c.seq == expected_seq)
        with write_transaction(self._engine) as conn:
            seq = _next_seq(conn)
            row = (
                conn.execute(
                    sa.update(o)
                    .where(guarded)
                    .values(seq=seq, **{name: given[name] for name in MUTABLE_OBJECT_FIELDS})
                    .returning(o)
                )
                .mappings()
                .first()
            )
            if row is None:
                name = f"object {record.bucket!r}/{record.key!r} version {record.version_id!r}"
                if expected_seq is not None and _row_exists(conn, where):
                    raise RowChanged(name)
                raise RecordNotFound(name)
            return schema.object_record(row)

    def list_latest(
        self, bucket: str, prefix: str = "", start_after: str = "", limit: int = 1000
    ) -> list[ObjectRecord]:
        if limit <= 0:
            return []
        o = schema.objects
        where = [o.c.bucket == bucket, schema.LATEST_PREDICATE, o.c.is_delete_marker == sa.false()]
        where += _key_range(o.c.key, prefix)
        if start_after:
            where.append(o.c.key > start_after)
        query = sa.select(o).where(*where).order_by(o.c.key).limit(limit)
        with read_transaction(self._engine) as conn:
            rows = conn.execute(query).mappings().all()
        return [schema.object_record(r) for r in rows]

    def list_versions(
        self,
        bucket: str,
        prefix: str = "",
        key_marker: str = "",
        version_marker: str = "",
        limit: int = 1000,
    ) -> list[ObjectRecord]:
        """All versions and delete markers, key ascending then newest first, starting after
        (key_marker, version_marker) as S3 ListObjectVersions defines the markers.

        key_marker alone starts after every version of that key; with version_marker, the
        listing resumes after that version of key_marker. A version_marker naming no
        existing version of key_marker is treated like key_marker alone; version_marker
        without key_marker is ignored (as S3 does)."""
        if limit <= 0:
            return []
        o = schema.objects
        in_bucket = [o.c.bucket == bucket, *_key_range(o.c.key, prefix)]
        records: list[ObjectRecord] = []
        with read_transaction(self._engine) as conn:
            if key_marker and version_marker and key_marker.startswith(prefix):
                records += self._versions_after_marker(
                    conn, bucket, key_marker, version_marker, limit
                )
            remaining = limit - len(records)
            if remaining > 0:
                where = list(in_bucket)
                if key_marker:
                    where.append(o.c.key > key_marker)
                rows = (
                    conn.execute(
                        sa.select(o).where(*where).order_by(*_VERSION_ORDER).limit(remaining)
                    )
                    .mappings()
                    .all()
                )
                records += [schema.object_record(r) for r in rows]
        return records

    @staticmethod
    def _versions_after_marker(
        conn: Connection, bucket: str, key: str, version_marker: str, limit: int
    ) -> list[ObjectRecord]:
        o = schema.objects
        marker = conn.execute(
            sa.select(o.c.last_modified, o.c.seq).where(_object_pk(bucket, key, version_marker))
        ).first()
        if marker is None:
            return []
        older = sa.or_(
            o.c.last_modified < marker.last_modified,
            sa.and_(o.c.last_modified == marker.last_modified, o.c.seq < marker.seq),
        )
        rows = (
            conn.execute(
                sa.select(o)
                .where(o.c.bucket == bucket, o.c.key == key, older)
                .order_by(*_VERSION_ORDER)
                .limit(limit)
            )
            .mappings()
            .all()
        )
        return [schema.object_record(r) for r in rows]

    def bucket_usage(self, bucket: str) -> tuple[int, int]:
        """(object version count, total bytes) over all versions of the bucket. Delete
        markers hold no bytes and are not counted."""
        o = schema.objects
        query = sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(o.c.size), 0)).where(
            o.c.bucket == bucket, o.c.is_delete_marker == sa.false()
        )
        with read_transaction(self._engine) as conn:
            count, total = conn.execute(query).one()
        return int(count), int(total)

    def storage_totals(self) -> tuple[int, int, int]:
        """(bucket count, object version count, total bytes) for the whole store; delete
        markers are not counted."""
        o = schema.objects
        with read_transaction(self._engine) as conn:
            buckets = conn.execute(sa.select(sa.func.count()).select_from(schema.buckets))
            bucket_count = int(buckets.scalar_one())
            count, total = conn.execute(
                sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(o.c.size), 0)).where(
                    o.c.is_delete_marker == sa.false()
                )
            ).one()
        return bucket_count, int(count), int(total)

    def iter_objects(self, batch_size: int = 1000) -> Iterator[ObjectRecord]:
        after: tuple[str, str, str] | None = None
        while True:
            batch = self.objects_batch(after, batch_size)
            yield from batch
            if len(batch) < batch_size:
                return
            last = batch[-1]
            after = (last.bucket, last.key, last.version_id)

    def objects_batch(
        self, after: tuple[str, str, str] | None, limit: int = 1000
    ) -> list[ObjectRecord]:
        """One page of `iter_objects`: rows strictly after `after` (bucket, key,
        version_id) in that order, in a read transaction of its own."""
        o = schema.objects
        query = sa.select(o).order_by(o.c.bucket, o.c.key, o.c.version_id).limit(max(1, limit))
        if after is not None:
            query = query.where(sa.tuple_(o.c.bucket, o.c.key, o.c.version_id) > sa.tuple_(*after))
        with read_transaction(self._engine) as conn:
            rows = conn.execute(query).mappings().all()
        return [schema.object_record(r) for r in rows]

    @_changes_objects
    def insert_recovered(self, records: Sequence[ObjectRecord]) -> None:
        if not records:
            return
        with write_transaction(self._engine) as conn:
            last = _next_seq(conn, len(records))
            first = last - len(records) + 1
            conn.execute(
                sa.insert(schema.objects),
                [schema.object_values(replace(r, seq=first + i)) for i, r in enumerate(records)],
            )

    def max_seq(self) -> int:
        counter = schema.seq_counter
        with read_transaction(self._engine) as conn:
            value = conn.execute(
                sa.select(counter.c.value).where(counter.c.name == schema.OBJECTS_SEQ_NAME)
            ).scalar_one()
        return int(value)

    # -- multipart -------------------------------------------------------------------
    def create_upload(self, upload: UploadRecord) -> None:
        """Raises RecordNotFound when the bucket does not exist."""
        values = schema.upload_values(upload)
        if not values["updated_at"]:
            values["updated_at"] = upload.initiated_at
        with write_transaction(self._engine) as conn:
            if not self._bucket_exists(conn, upload.bucket, lock="share"):
                raise RecordNotFound(f"bucket {upload.bucket!r}")
            conn.execute(sa.insert(schema.multipart_uploads).values(**values))

    def get_upload(self, upload_id: str) -> UploadRecord | None:
        u = schema.multipart_uploads
        with read_transaction(self._engine) as conn:
            row = conn.execute(sa.select(u).where(u.c.upload_id == upload_id)).mappings().first()
        return None if row is None else schema.upload_record(row)

    def list_uploads(
        self,
        bucket: str,
        prefix: str = "",
        key_marker: str = "",
        upload_id_marker: str = "",
        limit: int = 1000,
    ) -> list[UploadRecord]:
        """Open uploads ordered by key, then upload_id. After key_marker alone, uploads of
        later keys; with upload_id_marker too, also uploads of key_marker whose upload_id
        sorts after it (S3 ListMultipartUploads)."""
        if limit <= 0:
            return []
        u = schema.multipart_uploads
        where = [u.c.bucket == bucket, *_key_range(u.c.key, prefix)]
        if key_marker and upload_id_marker:
            where.append(
                sa.tuple_(u.c.key, u.c.upload_id) > sa.tuple_(key_marker, upload_id_marker)
            )
        elif key_marker:
            where.append(u.c.key > key_marker)
        query = sa.select(u).where(*where).order_by(u.c.key, u.c.upload_id).limit(limit)
        with read_transaction(self._engine) as conn:
            rows = conn.execute(query).mappings().all()
        return [schema.upload_record(r) for r in rows]

    def put_part(self, part: PartRecord) -> str | None:
        """Insert or replace a part; returns the blob_id of a replaced part (to delete).

        None also when the replaced part had the same blob_id (a retried request). Raises
        RecordNotFound when the upload does not exist (completed or aborted meanwhile)."""
        u, p = schema.multipart_uploads, schema.multipart_parts
        values = {
            "upload_id": part.upload_id,
            "part_number": part.part_number,
            "blob_id": part.blob_id,
            "size": part.size,
            "etag": part.etag,
            "last_modified": part.last_modified,
            "checksums": schema.dumps_json(part.checksums),
        }
        where_part = sa.and_(p.c.upload_id == part.upload_id, p.c.part_number == part.part_number)
        with write_transaction(self._engine) as conn:
            upload = conn.execute(
                sa.select(u.c.upload_id)
                .where(u.c.upload_id == part.upload_id)
                .with_for_update(read=True, key_share=True)
            ).first()
            if upload is None:
                raise RecordNotFound(f"upload {part.upload_id!r}")
            if insert_ignore(conn, p, values):
                return None
            # A concurrent insert of the same part has committed: lock it, then replace.
            old_blob = conn.execute(
                sa.select(p.c.blob_id).where(where_part).with_for_update()
            ).scalar_one()
            conn.execute(sa.update(p).where(where_part).values(**values))
        return None if old_blob == part.blob_id else str(old_blob)

    def list_parts(
        self, upload_id: str, after_part: int = 0, limit: int = 10000
    ) -> list[PartRecord]:
        if limit <= 0:
            return []
        p = schema.multipart_parts
        query = (
            sa.select(p)
            .where(p.c.upload_id == upload_id, p.c.part_number > after_part)
            .order_by(p.c.part_number)
            .limit(limit)
        )
        with read_transaction(self._engine) as conn:
            rows = conn.execute(query).mappings().all()
        return [schema.part_record(r) for r in rows]

    def delete_upload(self, upload_id: str) -> list[PartRecord]:
        """The upload row is locked first, in the order complete_upload and put_part
        take their locks, so an abort racing them waits instead of deadlocking."""
        u, p = schema.multipart_uploads, schema.multipart_parts
        with write_transaction(self._engine) as conn:
            conn.execute(sa.select(u.c.upload_id).where(u.c.upload_id == upload_id)
                         .with_for_update())
            rows = conn.execute(sa.delete(p).where(p.c.upload_id == upload_id).returning(p))
            parts = sorted((schema.part_record(r) for r in rows.mappings()), key=_part_number)
            deleted = conn.execute(sa.delete(u).where(u.c.upload_id == upload_id))
            if deleted.rowcount:
                self._tombstone(conn, TOMBSTONE_UPLOAD, upload_id)
        return parts

    @_changes_objects
    def complete_upload(
        self, upload_id: str, record: ObjectRecord,
        precondition: WritePrecondition | None = None, usage_check: UsageCheck | None = None,
    ) -> PutResult:
        """See SyncMetaStore.complete_upload. Locks: seq counter, bucket (share), upload row
        (update): a concurrent put_part of this upload waits, then finds it gone."""
        u, p = schema.multipart_uploads, schema.multipart_parts
        with write_transaction(self._engine) as conn:
            seq = _next_seq(conn)
            if not self._bucket_exists(conn, record.bucket, lock="share"):
                raise RecordNotFound(f"bucket {record.bucket!r}")
            upload = conn.execute(
                sa.select(u.c.bucket, u.c.key).where(u.c.upload_id == upload_id)
                .with_for_update()
            ).first()
            if upload is None or (upload.bucket, upload.key) != (record.bucket, record.key):
                raise RecordNotFound(f"upload {upload_id!r}")
            current = dict(conn.execute(
                sa.select(p.c.part_number, p.c.blob_id).where(p.c.upload_id == upload_id)
            ).all())
            if any(current.get(ref.part_number) != ref.blob_id for ref in record.parts):
                raise PartsChanged(upload_id)
            if precondition is not None:
                _check_precondition(conn, record, precondition)
            if usage_check is not None:
                object_write_queries.check_usage(
                    object_write_queries.CoreRows(conn), record, usage_check)
            conn.execute(sa.delete(p).where(p.c.upload_id == upload_id))
            conn.execute(sa.delete(u).where(u.c.upload_id == upload_id))
            self._tombstone(conn, TOMBSTONE_UPLOAD, upload_id)
            stored, old = _insert_latest(conn, record, seq)
        old += [str(blob_id) for blob_id in current.values()]
        orphaned = object_write_queries.unreferenced(old, stored)
        return PutResult(record=stored, orphaned_blob_ids=orphaned)

    # -- users and credentials -------------------------------------------------------
    def create_user(self, user: UserRecord) -> bool:
        """False when the username (or the user_id) is taken."""
        values = {
            "user_id": user.user_id,
            "username": user.username,
            "description": user.description,
            "is_root": user.is_root,
            "created_at": user.created_at,
            "updated_at": user.updated_at or user.created_at,
        }
        with write_transaction(self._engine) as conn:
            return insert_ignore(conn, schema.users, values)

    def get_user(self, user_id: str) -> UserRecord | None:
        return self._one_user(schema.users.c.user_id == user_id)

    def get_user_by_name(self, username: str) -> UserRecord | None:
        return self._one_user(schema.users.c.username == username)

    def _one_user(self, where: sa.ColumnElement[bool]) -> UserRecord | None:
        with read_transaction(self._engine) as conn:
            row = conn.execute(sa.select(schema.users).where(where)).mappings().first()
        return None if row is None else schema.user_record(row)

    def list_users(self) -> list[UserRecord]:
        """All users ordered by username."""
        users = schema.users
        with read_transaction(self._engine) as conn:
            rows = conn.execute(sa.select(users).order_by(users.c.username)).mappings().all()
        return [schema.user_record(r) for r in rows]

    def create_credential(self, credential: CredentialRecord) -> bool:
        """False when the access key exists. Raises RecordNotFound when the user does not."""
        values = {
            "access_key_id": credential.access_key_id,
            "secret_access_key": credential.secret_access_key,
            "user_id": credential.user_id,
            "description": credential.description,
            "active": credential.active,
            "created_at": credential.created_at,
            "updated_at": credential.updated_at or credential.created_at,
        }
        users = schema.users
        with write_transaction(self._engine) as conn:
            owner = conn.execute(
                sa.select(users.c.user_id)
                .where(users.c.user_id == credential.user_id)
                .with_for_update(read=True, key_share=True)
            ).first()
            if owner is None:
                raise RecordNotFound(f"user {credential.user_id!r}")
            return insert_ignore(conn, schema.credentials, values)

    def get_credential(self, access_key_id: str) -> CredentialRecord | None:
        c = schema.credentials
        with read_transaction(self._engine) as conn:
            row = (
                conn.execute(sa.select(c).where(c.c.access_key_id == access_key_id))
                .mappings()
                .first()
            )
        return None if row is None else schema.credential_record(row)

    def lookup_identity(self, access_key_id: str) -> tuple[CredentialRecord, UserRecord] | None:
        """The credential and its user in one query; None when either is missing. An
        inactive credential is returned as it is: the caller decides."""
        c, users = schema.credentials, schema.users
        user_columns = [col.label(f"u_{col.name}") for col in users.c]
        query = (
            sa.select(c, *user_columns)
            .join(users, users.c.user_id == c.c.user_id)
            .where(c.c.access_key_id == access_key_id)
        )
        with read_transaction(self._engine) as conn:
            row = conn.execute(query).mappings().first()
        if row is None:
            return None
        return schema.credential_record(row), schema.user_record(row, prefix="u_")

    def list_credentials(self, user_id: str | None = None) -> list[CredentialRecord]:
        """Credentials (of one user, or all) ordered by access key id."""
        c = schema.credentials
        query = sa.select(c).order_by(c.c.access_key_id)
        if user_id is not None:
            query = query.where(c.c.user_id == user_id)
        with read_transaction(self._engine) as conn:
            rows = conn.execute(query).mappings().all()
        return [schema.credential_record(r) for r in rows]

    def update_credential(self, credential: CredentialRecord) -> None:
        """Rewrite secret, description, active and updated_at of an existing credential
        (its user and creation time stay). Raises RecordNotFound when it does not exist."""
        c = schema.credentials
        with write_transaction(self._engine) as conn:
            result = conn.execute(
                sa.update(c)
                .where(c.c.access_key_id == credential.access_key_id)
                .values(
                    secret_access_key=credential.secret_access_key,
                    description=credential.description,
                    active=credential.active,
                    updated_at=credential.updated_at or self._clock(),
                )
            )
            if result.rowcount != 1:
                raise RecordNotFound(f"credential {credential.access_key_id!r}")

    def delete_credential(self, access_key_id: str) -> bool:
        """Remove a credential, leaving a tombstone; False when it did not exist."""
        c = schema.credentials
        with write_transaction(self._engine) as conn:
            result = conn.execute(sa.delete(c).where(c.c.access_key_id == access_key_id))
            if result.rowcount == 0:
                return False
            self._tombstone(conn, TOMBSTONE_CREDENTIAL, access_key_id)
            return True

    # -- settings --------------------------------------------------------------------
    def get_setting(self, key: str) -> str | None:
        s = schema.settings
        with read_transaction(self._engine) as conn:
            value = conn.execute(sa.select(s.c.value).where(s.c.key == key)).scalar()
        return None if value is None else str(value)

    def put_setting(self, key: str, value: str) -> None:
        with write_transaction(self._engine) as conn:
            upsert(
                conn,
                schema.settings,
                {"key": key, "value": value, "updated_at": self._clock()},
                ("key",),
            )

    def delete_setting(self, key: str) -> bool:
        s = schema.settings
        with write_transaction(self._engine) as conn:
            result = conn.execute(sa.delete(s).where(s.c.key == key))
            if result.rowcount == 0:
                return False
            self._tombstone(conn, TOMBSTONE_SETTING, key)
            return True

    def list_settings(self) -> dict[str, str]:
        s = schema.settings
        with read_transaction(self._engine) as conn:
            rows = conn.execute(sa.select(s.c.key, s.c.value).order_by(s.c.key)).all()
        return {str(k): str(v) for k, v in rows}

    # -- tombstones ------------------------------------------------------------------
    def get_tombstone(self, family: str, key: str) -> tuple[float, int | None] | None:
        """(deleted_at, seq) of a tombstone, or None."""
        t = schema.tombstones
        with read_transaction(self._engine) as conn:
            row = conn.execute(
                sa.select(t.c.deleted_at, t.c.seq).where(t.c.family == family, t.c.key == key)
            ).first()
        if row is None:
            return None
        return float(row.deleted_at), None if row.seq is None else int(row.seq)


def _part_number(part: PartRecord) -> int:
    return part.part_number


__all__ = [
    "MUTABLE_OBJECT_FIELDS",
    "MetaStoreError",
    "PartsChanged",
    "RecordNotFound",
    "RowChanged",
    "SqlMetaStore",
    "StorageSettings",
    "SyncMetaStore",
    "Usage",
    "UsageCheck",
    "UsageRule",
    "open_sync_store",
    "prefix_upper_bound",
]
