"""Plain records exchanged with the metadata store.

They carry no behaviour and no database types: the store turns rows into these and back,
so the engine, the sidecars and the cluster code share one shape. Timestamps are float
seconds since the Unix epoch (UTC).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

NULL_VERSION = "null"


@dataclass(frozen=True)
class PartRef:
    """One part of a composite (multipart) object: which blob holds its bytes."""

    part_number: int
    blob_id: str
    size: int
    etag: str
    checksums: dict[str, str] = field(default_factory=dict)
    # The part's own wrapped data key (an encrypted composite: blobs/factory.py); empty
    # for a part stored as sent or only compressed.
    encryption_params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BucketRecord:
    name: str
    owner_id: str
    region: str
    created_at: float
    versioning: str = "Disabled"  # Disabled | Enabled | Suspended
    object_lock: bool = False
    updated_at: float = 0.0


@dataclass(frozen=True)
class ObjectRecord:
    """One version of one key (or a delete marker)."""

    bucket: str
    key: str
    version_id: str  # NULL_VERSION for writes to unversioned or suspended buckets
    blob_id: str | None  # None only for delete markers
    size: int
    etag: str  # hex md5 without quotes, or "hex-N" for multipart
    last_modified: float
    is_latest: bool = True
    is_delete_marker: bool = False
    owner_id: str = ""
    owner_name: str = ""
    content_type: str = "binary/octet-stream"
    user_metadata: dict[str, str] = field(default_factory=dict)  # x-amz-meta-<name> -> value
    system_headers: dict[str, str] = field(default_factory=dict)  # cache-control, expires, ...
    storage_class: str = "STANDARD"
    checksums: dict[str, str] = field(default_factory=dict)  # "crc32" -> base64 digest, ...
    checksum_type: str | None = None  # FULL_OBJECT | COMPOSITE
    tags: dict[str, str] = field(default_factory=dict)
    encryption_algorithm: str | None = None  # AES256 | aws:kms | SSE-C
    encryption_key_id: str | None = None
    encryption_params: dict[str, Any] = field(default_factory=dict)
    compression: str | None = None
    retention_mode: str | None = None  # GOVERNANCE | COMPLIANCE
    retain_until_date: float | None = None
    legal_hold_status: str | None = None  # ON | OFF
    lock_updated_at: float | None = None
    # When the tag set last changed (Put/DeleteObjectTagging); None: the tags the version
    # was written with, older than any change (convergence/lww.py orders by it).
    tags_updated_at: float | None = None
    # The version's ACL (`iam.acl_rules.Acl.to_json`); None: the owner's FULL_CONTROL
    # alone (private), what every version written before object ACLs existed has. A
    # change of it stamps tags_updated_at (the row's one stamp for sub-resource changes).
    acl: str | None = None
    # When a maintenance job last rewrote how the version is stored (its blob through
    # other stages, or its data key wrapped anew); None: as written. Orders that rewrite
    # after the stamps above (convergence/lww.py), so it replicates (docs/CLUSTER.md).
    stages_updated_at: float | None = None
    replication_status: str | None = None  # PENDING | COMPLETED | FAILED | REPLICA
    parts: tuple[PartRef, ...] = ()  # non-empty for composite (multipart) objects
    seq: int = 0  # assigned by the store inside the writing transaction


@dataclass(frozen=True)
class UploadRecord:
    upload_id: str
    bucket: str
    key: str
    initiated_at: float
    owner_id: str = ""
    owner_name: str = ""
    content_type: str = "binary/octet-stream"
    user_metadata: dict[str, str] = field(default_factory=dict)
    system_headers: dict[str, str] = field(default_factory=dict)
    storage_class: str = "STANDARD"
    checksum_algorithm: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # encryption, lock headers, ...
    updated_at: float = 0.0


@dataclass(frozen=True)
class PartRecord:
    upload_id: str
    part_number: int
    blob_id: str
    size: int
    etag: str
    last_modified: float
    checksums: dict[str, str] = field(default_factory=dict)
    # The part's wrapped data key, bound to its upload (blobs/factory.py); empty unless
    # the upload is encrypted.
    encryption_params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class UserRecord:
    user_id: str
    username: str
    created_at: float
    description: str = ""
    is_root: bool = False
    updated_at: float = 0.0


@dataclass(frozen=True)
class CredentialRecord:
    access_key_id: str
    secret_access_key: str
    user_id: str
    created_at: float
    description: str = ""
    active: bool = True
    updated_at: float = 0.0


@dataclass(frozen=True)
class WritePrecondition:
    """A conditional write, checked inside the writing transaction so that it is atomic
    with respect to concurrent writers of the same key. `if_absent`: no current object
    (If-None-Match: *); `if_match_etag`: the current object's ETag (If-Match);
    `if_none_match_etag`: any current object has another ETag (If-None-Match: "etag")."""

    if_absent: bool = False
    if_match_etag: str | None = None
    if_none_match_etag: str | None = None


@dataclass(frozen=True)
class PutResult:
    """Outcome of storing a version: the stored record (with its seq) and the blobs that the
    write made unreachable, which the caller deletes after the commit."""

    record: ObjectRecord
    orphaned_blob_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class DeleteResult:
    """Outcome of removing one version: what was removed (None when nothing matched), the
    record that became latest in its place, if any, and the stamp of the tombstone the
    removal left (None when nothing was removed): what the cluster sends its peers."""

    removed: ObjectRecord | None
    new_latest: ObjectRecord | None = None
    deleted_at: float | None = None
