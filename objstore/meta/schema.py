"""The metadata schema: one SQLAlchemy Core `MetaData` for SQLite and PostgreSQL.

This module owns every table, column and index of the metadata database, and the mapping
between rows and the records of `records.py` (no queries). Conventions:

* Timestamps are float seconds since the Unix epoch (double precision), as in the records.
* Dict, list and policy-document fields are JSON text written by the store.
* Bucket names, object keys and other sorted identifiers compare in binary order on both
  backends: SQLite's default BINARY collation compares UTF-8 bytes, and on PostgreSQL the
  columns use COLLATE "C". Binary UTF-8 order equals the code point order of Python strings,
  which is the order S3 lists in.
* Object rows carry `seq`, taken from the `seq_counter` row inside the writing transaction
  (commit-ordered on both backends); control-plane rows carry `updated_at`; deletes leave a
  row in `tombstones` for the cluster reconciler.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from objstore.meta.records import (
    BucketRecord,
    CredentialRecord,
    ObjectRecord,
    PartRecord,
    PartRef,
    UploadRecord,
    UserRecord,
)

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

# Text compared byte-wise on both backends (SQLite's default collation already is).
SortedText = sa.Text().with_variant(sa.Text(collation="C"), "postgresql")
Timestamp: sa.Double[float] = sa.Double()
# SQLite only autoincrements an INTEGER PRIMARY KEY.
AutoId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

OBJECTS_SEQ_NAME = "objects"


def _updated_at() -> sa.Column[float]:
    return sa.Column("updated_at", Timestamp, nullable=False, server_default="0")


schema_version = sa.Table(
    "schema_version",
    metadata,
    sa.Column("version", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("description", sa.Text, nullable=False),
    sa.Column("applied_at", Timestamp, nullable=False),
)

seq_counter = sa.Table(
    "seq_counter",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("value", sa.BigInteger, nullable=False),
)

buckets = sa.Table(
    "buckets",
    metadata,
    sa.Column("name", SortedText, primary_key=True),
    sa.Column("owner_id", sa.Text, nullable=False),
    sa.Column("region", sa.Text, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("versioning", sa.Text, nullable=False),
    sa.Column("object_lock", sa.Boolean, nullable=False),
    _updated_at(),
)

bucket_config = sa.Table(
    "bucket_config",
    metadata,
    sa.Column(
        "bucket",
        SortedText,
        sa.ForeignKey("buckets.name", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("key", SortedText, primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
    _updated_at(),
)

objects = sa.Table(
    "objects",
    metadata,
    sa.Column("bucket", SortedText, sa.ForeignKey("buckets.name"), primary_key=True),
    sa.Column("key", SortedText, primary_key=True),
    sa.Column("version_id", SortedText, primary_key=True),
    sa.Column("blob_id", sa.Text, nullable=True),
    sa.Column("size", sa.BigInteger, nullable=False),
    sa.Column("etag", sa.Text, nullable=False),
    sa.Column("last_modified", Timestamp, nullable=False),
    sa.Column("is_latest", sa.Boolean, nullable=False),
    sa.Column("is_delete_marker", sa.Boolean, nullable=False),
    sa.Column("owner_id", sa.Text, nullable=False),
    sa.Column("owner_name", sa.Text, nullable=False),
    sa.Column("content_type", sa.Text, nullable=False),
    sa.Column("user_metadata", sa.Text, nullable=False),
    sa.Column("system_headers", sa.Text, nullable=False),
    sa.Column("storage_class", sa.Text, nullable=False),
    sa.Column("checksums", sa.Text, nullable=False),
    sa.Column("checksum_type", sa.Text, nullable=True),
    sa.Column("tags", sa.Text, nullable=False),
    sa.Column("encryption_algorithm", sa.Text, nullable=True),
    sa.Column("encryption_key_id", sa.Text, nullable=True),
    sa.Column("encryption_params", sa.Text, nullable=False),
    sa.Column("compression", sa.Text, nullable=True),
    sa.Column("retention_mode", sa.Text, nullable=True),
    sa.Column("retain_until_date", Timestamp, nullable=True),
    sa.Column("legal_hold_status", sa.Text, nullable=True),
    sa.Column("lock_updated_at", Timestamp, nullable=True),
    sa.Column("tags_updated_at", Timestamp, nullable=True),
    sa.Column("acl", sa.Text, nullable=True),
    sa.Column("stages_updated_at", Timestamp, nullable=True),
    sa.Column("replication_status", sa.Text, nullable=True),
    sa.Column("parts", sa.Text, nullable=False),
    sa.Column("seq", sa.BigInteger, nullable=False, unique=True),
)

# The predicate is a literal (`is_latest = 1` / `= true`) and the store filters with the same
# expression, so both planners match queries to this partial index. It serves latest
# listings as one range scan and guarantees one latest row per key.
LATEST_PREDICATE = objects.c.is_latest == sa.true()
sa.Index(
    "ux_objects_latest",
    objects.c.bucket,
    objects.c.key,
    unique=True,
    sqlite_where=LATEST_PREDICATE,
    postgresql_where=LATEST_PREDICATE,
)
sa.Index(
    "ix_objects_versions",
    objects.c.bucket,
    objects.c.key,
    objects.c.last_modified.desc(),
    objects.c.seq.desc(),
)
sa.Index("ix_objects_blob_id", objects.c.blob_id)

# Per bucket: versions that are not delete markers, and their bytes. Kept by triggers on
# `objects` (meta/usage_counters.py), never written by the store itself. No foreign key:
# a trigger on `buckets` removes a deleted bucket's row.
bucket_usage = sa.Table(
    "bucket_usage",
    metadata,
    sa.Column("bucket", SortedText, primary_key=True),
    sa.Column("objects", sa.BigInteger, nullable=False),
    sa.Column("stored_bytes", sa.BigInteger, nullable=False),
)

multipart_uploads = sa.Table(
    "multipart_uploads",
    metadata,
    sa.Column("upload_id", SortedText, primary_key=True),
    sa.Column("bucket", SortedText, sa.ForeignKey("buckets.name"), nullable=False),
    sa.Column("key", SortedText, nullable=False),
    sa.Column("initiated_at", Timestamp, nullable=False),
    sa.Column("owner_id", sa.Text, nullable=False),
    sa.Column("owner_name", sa.Text, nullable=False),
    sa.Column("content_type", sa.Text, nullable=False),
    sa.Column("user_metadata", sa.Text, nullable=False),
    sa.Column("system_headers", sa.Text, nullable=False),
    sa.Column("storage_class", sa.Text, nullable=False),
    sa.Column("checksum_algorithm", sa.Text, nullable=True),
    sa.Column("tags", sa.Text, nullable=False),
    sa.Column("extra", sa.Text, nullable=False),
    _updated_at(),
)
sa.Index(
    "ix_multipart_uploads_listing",
    multipart_uploads.c.bucket,
    multipart_uploads.c.key,
    multipart_uploads.c.upload_id,
)

multipart_parts = sa.Table(
    "multipart_parts",
    metadata,
    sa.Column(
        "upload_id",
        SortedText,
        sa.ForeignKey("multipart_uploads.upload_id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("part_number", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("blob_id", sa.Text, nullable=False),
    sa.Column("size", sa.BigInteger, nullable=False),
    sa.Column("etag", sa.Text, nullable=False),
    sa.Column("last_modified", Timestamp, nullable=False),
    sa.Column("checksums", sa.Text, nullable=False),
    # The part's wrapped data key (JSON) when its upload is encrypted; NULL otherwise.
    sa.Column("encryption_params", sa.Text, nullable=True),
)

# Uploads completed lately, so that a retried CompleteMultipartUpload (a client that timed
# out) gets the same answer: kept for a while (upload_queries.COMPLETED_UPLOAD_KEPT_SECONDS)
# and only while the version it made exists. Node-local; `recover` does not rebuild it.
completed_uploads = sa.Table(
    "completed_uploads",
    metadata,
    sa.Column("upload_id", SortedText, primary_key=True),
    sa.Column("bucket", SortedText, nullable=False),
    sa.Column("key", SortedText, nullable=False),
    sa.Column("version_id", sa.Text, nullable=False),
    sa.Column("blob_id", sa.Text, nullable=False),
    sa.Column("completed_at", Timestamp, nullable=False, index=True),
)

users = sa.Table(
    "users",
    metadata,
    sa.Column("user_id", sa.Text, primary_key=True),
    sa.Column("username", SortedText, nullable=False, unique=True),
    sa.Column("description", sa.Text, nullable=False),
    sa.Column("is_root", sa.Boolean, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
    _updated_at(),
)

credentials = sa.Table(
    "credentials",
    metadata,
    sa.Column("access_key_id", sa.Text, primary_key=True),
    sa.Column("secret_access_key", sa.Text, nullable=False),
    sa.Column(
        "user_id",
        sa.Text,
        sa.ForeignKey("users.user_id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
    sa.Column("description", sa.Text, nullable=False),
    sa.Column("active", sa.Boolean, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
    _updated_at(),
)

teams = sa.Table(
    "teams",
    metadata,
    sa.Column("team_id", sa.Text, primary_key=True),
    sa.Column("name", SortedText, nullable=False, unique=True),
    sa.Column("description", sa.Text, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
    _updated_at(),
)

team_members = sa.Table(
    "team_members",
    metadata,
    sa.Column(
        "team_id", sa.Text, sa.ForeignKey("teams.team_id", ondelete="CASCADE"), primary_key=True
    ),
    sa.Column(
        "user_id",
        sa.Text,
        sa.ForeignKey("users.user_id", ondelete="CASCADE"),
        primary_key=True,
        index=True,
    ),
    _updated_at(),
)

grants = sa.Table(
    "grants",
    metadata,
    sa.Column("grant_id", sa.Text, primary_key=True),
    sa.Column("name", SortedText, nullable=False, unique=True),
    sa.Column("description", sa.Text, nullable=False),
    sa.Column("document", sa.Text, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
    _updated_at(),
)

user_grants = sa.Table(
    "user_grants",
    metadata,
    sa.Column(
        "user_id", sa.Text, sa.ForeignKey("users.user_id", ondelete="CASCADE"), primary_key=True
    ),
    sa.Column(
        "grant_id",
        sa.Text,
        sa.ForeignKey("grants.grant_id", ondelete="CASCADE"),
        primary_key=True,
        index=True,
    ),
    _updated_at(),
)

team_grants = sa.Table(
    "team_grants",
    metadata,
    sa.Column(
        "team_id", sa.Text, sa.ForeignKey("teams.team_id", ondelete="CASCADE"), primary_key=True
    ),
    sa.Column(
        "grant_id",
        sa.Text,
        sa.ForeignKey("grants.grant_id", ondelete="CASCADE"),
        primary_key=True,
        index=True,
    ),
    _updated_at(),
)

settings = sa.Table(
    "settings",
    metadata,
    sa.Column("key", SortedText, primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
    _updated_at(),
)

# Deleted entities, for last-writer-wins reconciliation between nodes. `key` is the entity's
# key within its family (see `store.tombstone_key`); object-version tombstones also take a
# `seq` so the commit-ordered change cursor sees deletes as well as writes.
tombstones = sa.Table(
    "tombstones",
    metadata,
    sa.Column("family", sa.Text, primary_key=True),
    sa.Column("key", SortedText, primary_key=True),
    sa.Column("deleted_at", Timestamp, nullable=False),
    sa.Column("seq", sa.BigInteger, nullable=True, unique=True),
)

# Anti-entropy's cursor toward each peer (cluster/anti_entropy.py): how far this node has
# pulled the peer's changed-since manifest. Node-local: never replicated, never exported.
# `cursor` is the peer's seq up to which every entry was applied (or skipped);
# `peer_max_seq` the peer's max_seq reported at the last advance (rule 8's rewind check);
# `failing_seq` / `failed_passes` the entry that failed and on how many passes in a row
# (rule 9: skipped after 5, counted in `skipped_entries`).
sync_cursors = sa.Table(
    "sync_cursors",
    metadata,
    sa.Column("peer_node_id", sa.Text, primary_key=True),
    sa.Column("cursor", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("peer_max_seq", sa.BigInteger, nullable=True),
    sa.Column("first_pass_done", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("last_reconcile", Timestamp, nullable=True),
    sa.Column("failing_seq", sa.BigInteger, nullable=True),
    sa.Column("failed_passes", sa.Integer, nullable=False, server_default="0"),
    sa.Column("skipped_entries", sa.BigInteger, nullable=False, server_default="0"),
)

# Maintenance jobs (engine/job_rules.py, workers/jobs.py). Node-local: never replicated,
# exported or imported. `active` is 1 while the job is pending, running or paused and NULL
# once it ended: its unique index lets at most one job be active, on both backends.
# `cursor` is where the job's runner stopped (opaque text), for a resume after a restart.
# The durable outbox (engine/outbox.py): one entry per object change a consumer must get,
# written in the change's own transaction under the change's commit-ordered seq.
outbox = sa.Table(
    "outbox",
    metadata,
    sa.Column("seq", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("kind", sa.Text, nullable=False),  # ChangeKind value
    sa.Column("operation", sa.Text, nullable=False),  # the request's route name
    sa.Column("bucket", sa.Text, nullable=False),
    sa.Column("key", sa.Text, nullable=False),
    sa.Column("version_id", sa.Text, nullable=False),
    sa.Column("size", sa.BigInteger, nullable=False),
    sa.Column("etag", sa.Text, nullable=False),
    sa.Column("is_delete_marker", sa.Boolean, nullable=False),
    sa.Column("principal", sa.Text, nullable=False),  # user id, empty when anonymous
    sa.Column("source_address", sa.Text, nullable=False),
    sa.Column("request_id", sa.Text, nullable=False),
    sa.Column("event_time", Timestamp, nullable=False),
)

# Each outbox consumer's cursor: every entry at or below it was acknowledged.
outbox_cursors = sa.Table(
    "outbox_cursors",
    metadata,
    sa.Column("consumer", sa.Text, primary_key=True),
    sa.Column("cursor", sa.BigInteger, nullable=False, server_default="0"),
)

# Bucket notification deliveries (notify/, migration 10): one row per (event, target),
# written by the notification consumer in the transaction that moves its outbox cursor,
# then delivered per target with retries. Node-local: never replicated or exported.
notification_events = sa.Table(
    "notification_events",
    metadata,
    sa.Column("id", AutoId, primary_key=True, autoincrement=True),
    sa.Column("seq", sa.BigInteger, nullable=False),  # the outbox entry's (the sequencer)
    sa.Column("target", sa.Text, nullable=False),  # target name, or an ad-hoc webhook URL
    sa.Column("bucket", sa.Text, nullable=False),
    sa.Column("key", sa.Text, nullable=False),
    sa.Column("event_name", sa.Text, nullable=False),
    sa.Column("body", sa.Text, nullable=False),  # the S3 event document (JSON)
    sa.Column("status", sa.Text, nullable=False),  # pending | delivered | failed
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("errors", sa.Text, nullable=False, server_default="[]"),  # [{at, error}]
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("next_attempt_at", Timestamp, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
    sa.Index("ix_notification_events_queue", "status", "target", "id"),
    sa.Index("ix_notification_events_updated", "updated_at"),
)


# The replication journal (replication/journal.py): node-local, never replicated (cluster
# rule 11). One row per object change and destination to replicate, fed from the outbox by
# the node that served the client write; (seq, rule_id) makes a re-delivered outbox page
# a no-op. `status`: PENDING (to do or backing off until next_attempt_at), COMPLETED,
# FAILED (after the final retry), SKIPPED (nothing to send: the source is gone).
replication_journal = sa.Table(
    "replication_journal",
    metadata,
    sa.Column("id", AutoId, primary_key=True, autoincrement=True),
    sa.Column("seq", sa.BigInteger, nullable=False),  # the outbox entry's (0: existing)
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
    sa.Column("kind", sa.Text, nullable=False),  # put | delete_marker | tags | lock | delete
    sa.Column("operation", sa.Text, nullable=False),
    sa.Column("bucket", sa.Text, nullable=False),
    sa.Column("key", sa.Text, nullable=False),
    sa.Column("version_id", sa.Text, nullable=False),
    sa.Column("size", sa.BigInteger, nullable=False),
    sa.Column("etag", sa.Text, nullable=False),
    sa.Column("rule_id", sa.Text, nullable=False),
    sa.Column("endpoint", sa.Text, nullable=False),
    sa.Column("dest_bucket", sa.Text, nullable=False),
    sa.Column("region", sa.Text, nullable=False),
    sa.Column("credential_ref", sa.Text, nullable=False),
    sa.Column("storage_class", sa.Text, nullable=True),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("next_attempt_at", Timestamp, nullable=False),
    sa.Column("last_error", sa.Text, nullable=True),
    sa.UniqueConstraint("seq", "rule_id", "endpoint", "dest_bucket",
                        name="uq_replication_journal_entry"),
    sa.Index("ix_replication_journal_status", "status", "id"),
    sa.Index("ix_replication_journal_key", "bucket", "key", "id"),
)

maintenance_jobs = sa.Table(
    "maintenance_jobs",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("job_type", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("mode", sa.Text, nullable=False),
    sa.Column("params", sa.Text, nullable=False),  # JSON object
    sa.Column("active", sa.Integer, nullable=True, unique=True),
    sa.Column("total", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("done", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("rate", sa.Double, nullable=False, server_default="0"),
    sa.Column("cursor", sa.Text, nullable=True),
    sa.Column("last_error", sa.Text, nullable=True),
    sa.Column("created_at", Timestamp, nullable=False, index=True),
    sa.Column("updated_at", Timestamp, nullable=False),
    sa.Column("started_at", Timestamp, nullable=True),
    sa.Column("finished_at", Timestamp, nullable=True),
    # The node whose worker runs (or last ran) it (migration 9): in a cluster the job rows
    # travel with the control plane, and only that node drains for a maintenance-mode job.
    sa.Column("runner", sa.Text, nullable=True),
)

# A job's log entries (the newest LOG_ENTRIES_MAX of each job are kept).
maintenance_job_logs = sa.Table(
    "maintenance_job_logs",
    metadata,
    sa.Column("id", AutoId, primary_key=True, autoincrement=True),
    sa.Column("job_id", sa.Text, nullable=False, index=True),
    sa.Column("ts", Timestamp, nullable=False),
    sa.Column("level", sa.Text, nullable=False),
    sa.Column("message", sa.Text, nullable=False),
)

audit_log = sa.Table(
    "audit_log",
    metadata,
    sa.Column("id", AutoId, primary_key=True, autoincrement=True),
    sa.Column("ts", Timestamp, nullable=False, index=True),
    sa.Column("node_id", sa.Text, nullable=True),
    sa.Column("request_id", sa.Text, nullable=True),
    sa.Column("user_id", sa.Text, nullable=True),
    sa.Column("username", sa.Text, nullable=True, index=True),
    sa.Column("access_key", sa.Text, nullable=True),
    sa.Column("operation", sa.Text, nullable=False, index=True),
    sa.Column("bucket", sa.Text, nullable=True, index=True),
    sa.Column("key", sa.Text, nullable=True),
    sa.Column("source_ip", sa.Text, nullable=True),
    sa.Column("status", sa.Integer, nullable=True),
    sa.Column("error_code", sa.Text, nullable=True),
    sa.Column("duration_ms", sa.Double, nullable=True),
    sa.Column("bytes_in", sa.BigInteger, nullable=True),
    sa.Column("bytes_out", sa.BigInteger, nullable=True),
    sa.Column("user_agent", sa.Text, nullable=True),
    sa.Column("details", sa.Text, nullable=True),  # JSON object of further fields
)

# Node-local samples of the metrics history (request counts are per interval).
metrics_history = sa.Table(
    "metrics_history",
    metadata,
    sa.Column("id", AutoId, primary_key=True, autoincrement=True),
    sa.Column("ts", Timestamp, nullable=False, index=True),
    sa.Column("node_id", sa.Text, nullable=False),
    sa.Column("interval_seconds", sa.Double, nullable=False),
    sa.Column("requests", sa.BigInteger, nullable=False),
    sa.Column("errors", sa.BigInteger, nullable=False),
    sa.Column("server_errors", sa.BigInteger, nullable=False),
    sa.Column("bytes_in", sa.BigInteger, nullable=False),
    sa.Column("bytes_out", sa.BigInteger, nullable=False),
    sa.Column("buckets", sa.BigInteger, nullable=False),
    sa.Column("objects", sa.BigInteger, nullable=False),
    sa.Column("stored_bytes", sa.BigInteger, nullable=False),
)


# -- rows <-> records -----------------------------------------------------------------


def dumps_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def loads_dict(text: str | None) -> dict[str, Any]:
    if not text or text == "{}":  # most rows' (no JSON parse for them)
        return {}
    value = json.loads(text)
    return value if isinstance(value, dict) else {}


def object_values(record: ObjectRecord) -> dict[str, Any]:
    return {
        "bucket": record.bucket,
        "key": record.key,
        "version_id": record.version_id,
        "blob_id": record.blob_id,
        "size": record.size,
        "etag": record.etag,
        "last_modified": record.last_modified,
        "is_latest": record.is_latest,
        "is_delete_marker": record.is_delete_marker,
        "owner_id": record.owner_id,
        "owner_name": record.owner_name,
        "content_type": record.content_type,
        "user_metadata": dumps_json(record.user_metadata),
        "system_headers": dumps_json(record.system_headers),
        "storage_class": record.storage_class,
        "checksums": dumps_json(record.checksums),
        "checksum_type": record.checksum_type,
        "tags": dumps_json(record.tags),
        "encryption_algorithm": record.encryption_algorithm,
        "encryption_key_id": record.encryption_key_id,
        "encryption_params": dumps_json(record.encryption_params),
        "compression": record.compression,
        "retention_mode": record.retention_mode,
        "retain_until_date": record.retain_until_date,
        "legal_hold_status": record.legal_hold_status,
        "lock_updated_at": record.lock_updated_at,
        "tags_updated_at": record.tags_updated_at,
        "acl": record.acl,
        "stages_updated_at": record.stages_updated_at,
        "replication_status": record.replication_status,
        "parts": dumps_json([part_ref_dict(p) for p in record.parts]),
        "seq": record.seq,
    }


def part_ref_dict(part: PartRef) -> dict[str, Any]:
    found = {
        "part_number": part.part_number,
        "blob_id": part.blob_id,
        "size": part.size,
        "etag": part.etag,
        "checksums": part.checksums,
    }
    if part.encryption_params:  # only an encrypted composite's parts have one
        found["encryption_params"] = part.encryption_params
    return found


def part_refs(text: str | None) -> tuple[PartRef, ...]:
    if not text or text == "[]":  # a plain object's
        return ()
    return tuple(
        PartRef(
            part_number=int(p["part_number"]),
            blob_id=str(p["blob_id"]),
            size=int(p["size"]),
            etag=str(p["etag"]),
            checksums=dict(p.get("checksums") or {}),
            encryption_params=dict(p.get("encryption_params") or {}),
        )
        for p in json.loads(text)
    )


def object_record(row: Mapping[Any, Any]) -> ObjectRecord:
    """The record of an `objects` row. Built without the dataclass's `__init__`: a frozen
    dataclass sets each of its 32 fields through `object.__setattr__`, which made this the
    largest cost of reading many rows (a DeleteObjects reads 1,000); the instance is the
    same (every field set, the same values: tests/unit/test_schema_records.py)."""
    record = _new_object(ObjectRecord)
    record.__dict__.update(
        bucket=row["bucket"],
        key=row["key"],
        version_id=row["version_id"],
        blob_id=row["blob_id"],
        size=int(row["size"]),
        etag=row["etag"],
        last_modified=float(row["last_modified"]),
        is_latest=bool(row["is_latest"]),
        is_delete_marker=bool(row["is_delete_marker"]),
        owner_id=row["owner_id"],
        owner_name=row["owner_name"],
        content_type=row["content_type"],
        user_metadata=loads_dict(row["user_metadata"]),
        system_headers=loads_dict(row["system_headers"]),
        storage_class=row["storage_class"],
        checksums=loads_dict(row["checksums"]),
        checksum_type=row["checksum_type"],
        tags=loads_dict(row["tags"]),
        encryption_algorithm=row["encryption_algorithm"],
        encryption_key_id=row["encryption_key_id"],
        encryption_params=loads_dict(row["encryption_params"]),
        compression=row["compression"],
        retention_mode=row["retention_mode"],
        retain_until_date=row["retain_until_date"],
        legal_hold_status=row["legal_hold_status"],
        lock_updated_at=row["lock_updated_at"],
        tags_updated_at=row["tags_updated_at"],
        acl=row["acl"],
        stages_updated_at=row["stages_updated_at"],
        replication_status=row["replication_status"],
        parts=part_refs(row["parts"]),
        seq=int(row["seq"]),
    )
    return record


_new_object = object.__new__


def bucket_record(row: Mapping[Any, Any]) -> BucketRecord:
    return BucketRecord(
        name=row["name"],
        owner_id=row["owner_id"],
        region=row["region"],
        created_at=float(row["created_at"]),
        versioning=row["versioning"],
        object_lock=bool(row["object_lock"]),
        updated_at=float(row["updated_at"]),
    )


def upload_values(upload: UploadRecord) -> dict[str, Any]:
    return {
        "upload_id": upload.upload_id,
        "bucket": upload.bucket,
        "key": upload.key,
        "initiated_at": upload.initiated_at,
        "owner_id": upload.owner_id,
        "owner_name": upload.owner_name,
        "content_type": upload.content_type,
        "user_metadata": dumps_json(upload.user_metadata),
        "system_headers": dumps_json(upload.system_headers),
        "storage_class": upload.storage_class,
        "checksum_algorithm": upload.checksum_algorithm,
        "tags": dumps_json(upload.tags),
        "extra": dumps_json(upload.extra),
        "updated_at": upload.updated_at,
    }


def upload_record(row: Mapping[Any, Any]) -> UploadRecord:
    return UploadRecord(
        upload_id=row["upload_id"],
        bucket=row["bucket"],
        key=row["key"],
        initiated_at=float(row["initiated_at"]),
        owner_id=row["owner_id"],
        owner_name=row["owner_name"],
        content_type=row["content_type"],
        user_metadata=loads_dict(row["user_metadata"]),
        system_headers=loads_dict(row["system_headers"]),
        storage_class=row["storage_class"],
        checksum_algorithm=row["checksum_algorithm"],
        tags=loads_dict(row["tags"]),
        extra=loads_dict(row["extra"]),
        updated_at=float(row["updated_at"]),
    )


def part_record(row: Mapping[Any, Any]) -> PartRecord:
    return PartRecord(
        upload_id=row["upload_id"],
        part_number=int(row["part_number"]),
        blob_id=row["blob_id"],
        size=int(row["size"]),
        etag=row["etag"],
        last_modified=float(row["last_modified"]),
        checksums=loads_dict(row["checksums"]),
        encryption_params=loads_dict(row.get("encryption_params")),
    )


def user_record(row: Mapping[Any, Any], prefix: str = "") -> UserRecord:
    return UserRecord(
        user_id=row[prefix + "user_id"],
        username=row[prefix + "username"],
        created_at=float(row[prefix + "created_at"]),
        description=row[prefix + "description"],
        is_root=bool(row[prefix + "is_root"]),
        updated_at=float(row[prefix + "updated_at"]),
    )


def credential_record(row: Mapping[Any, Any]) -> CredentialRecord:
    return CredentialRecord(
        access_key_id=row["access_key_id"],
        secret_access_key=row["secret_access_key"],
        user_id=row["user_id"],
        created_at=float(row["created_at"]),
        description=row["description"],
        active=bool(row["active"]),
        updated_at=float(row["updated_at"]),
    )
