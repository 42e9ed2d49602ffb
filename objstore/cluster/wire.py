"""The wire format of replicated object rows and deletions (JSON bodies of POST
/cluster/v1/object and /cluster/v1/object/delete) and of the ack answering them.

A row travels as its sidecar document (`blobs.sidecar.record_to_sidecar`: every field of
`ObjectRecord` but the node-local `seq` and `is_latest`, which the receiver assigns) with
`kind` replaced by `protocol` (the cluster protocol version the ping reports). The sidecar
already is the complete serialization of a row, so there is one, not two: a field added to
`ObjectRecord` is sent as soon as the sidecar carries it; decoding then needs its kind in
`_FIELD_KINDS` (a unit test fails until it is there).

Decoding trusts nothing of the document's shape (a peer is authenticated, not infallible):
every known field is type-checked and a wrong one is a `WireError` (the route's 400);
unknown fields, in the row and in its parts, are ignored and absent optional fields take
the record's defaults (wire changes within v1 are additive). Whether the values make a row
this server could have written (UUID blob ids, a valid key, dates of the years 1970 to
9999, enumerations, ...) is the apply path's check
(`engine.replication_apply.check_replicated_record`, with `convergence.row_rules`), not
this module's: a row of a manifest page that fails it fails its entry, not the page. The
body itself is read by `json_input.parse_json` (nesting, integers past 64 bits: a
WireError).

A row of POST /cluster/v1/object may carry its blob's bytes (as stored) in the additive
field `blob_base64` (standard base64), for blobs of at most `INLINE_BLOB_BYTES`: one
request and one sidecar write on the peer instead of the blob route's PUT followed by the
row (fanout.py). The signature covers the body, so the bytes are as authenticated as the
blob route's. An older node ignores the field and answers `has_blob: false`; the sender
then sends the bytes the old way. Bad base64 is a WireError.

Pure: no I/O, no Twisted.
"""

from __future__ import annotations

import binascii
import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from objstore.blobs.sidecar import record_to_sidecar
from objstore.convergence.ack import Ack
from objstore.json_input import parse_json
from objstore.meta.records import ObjectRecord, PartRef

PROTOCOL_VERSION = 1
PROTOCOL_FIELD = "protocol"
BLOB_FIELD = "blob_base64"
# A blob up to this size travels inside its row (base64: a third more, well within the
# JSON routes' 2 MiB cap); a larger one goes first through the blob route, streamed.
INLINE_BLOB_BYTES = 256 * 1024


class WireError(ValueError):
    """A document that is not a row, a deletion or an ack of this protocol."""


# -- field kinds ----------------------------------------------------------------------------


def _str(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise WireError(f"{name} must be a string")
    return value


def _optional_str(name: str, value: object) -> str | None:
    return None if value is None else _str(name, value)


def _int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise WireError(f"{name} must be an integer")
    return value


def _float(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise WireError(f"{name} must be a number")
    try:
        return float(value)
    except OverflowError:
        raise WireError(f"{name} is out of range") from None


def _optional_float(name: str, value: object) -> float | None:
    return None if value is None else _float(name, value)


def _bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise WireError(f"{name} must be true or false")
    return value


def _object(name: str, value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise WireError(f"{name} must be a JSON object")
    return dict(value)


def _strings(name: str, value: object) -> dict[str, str]:
    found = _object(name, value)
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in found.items()):
        raise WireError(f"{name} must map strings to strings")
    return found


def _part(name: str, value: object) -> PartRef:
    document = _object(name, value)
    try:
        return PartRef(
            part_number=_int(f"{name}.part_number", document["part_number"]),
            blob_id=_str(f"{name}.blob_id", document["blob_id"]),
            size=_int(f"{name}.size", document["size"]),
            etag=_str(f"{name}.etag", document["etag"]),
            checksums=_strings(f"{name}.checksums", document.get("checksums", {})),
            encryption_params=_object(f"{name}.encryption_params",
                                      document.get("encryption_params", {})),
        )
    except KeyError as missing:
        raise WireError(f"{name} lacks {missing.args[0]}") from None


def _parts(name: str, value: object) -> tuple[PartRef, ...]:
    if not isinstance(value, list):
        raise WireError(f"{name} must be a list")
    return tuple(_part(f"{name}[{index}]", item) for index, item in enumerate(value))


# Every replicated field of ObjectRecord and how it is read. Fields without a default in
# ObjectRecord are required.
_FIELD_KINDS: Mapping[str, Callable[[str, object], Any]] = {
    "bucket": _str, "key": _str, "version_id": _str, "blob_id": _optional_str,
    "size": _int, "etag": _str, "last_modified": _float,
    "is_delete_marker": _bool, "owner_id": _str, "owner_name": _str,
    "content_type": _str, "user_metadata": _strings, "system_headers": _strings,
    "storage_class": _str, "checksums": _strings, "checksum_type": _optional_str,
    "tags": _strings, "encryption_algorithm": _optional_str,
    "encryption_key_id": _optional_str, "encryption_params": _object,
    "compression": _optional_str, "retention_mode": _optional_str,
    "retain_until_date": _optional_float, "legal_hold_status": _optional_str,
    "lock_updated_at": _optional_float, "replication_status": _optional_str,
    "parts": _parts,
    # Absent in the rows of peers older than schema 5: None (rule 14).
    "tags_updated_at": _optional_float,
    # Absent in the rows of peers older than schema 12: None (the owner's ACL alone).
    "acl": _optional_str,
    # Absent in the rows of peers older than schema 14: None.
    "stages_updated_at": _optional_float,
}
NODE_LOCAL_FIELDS = ("seq", "is_latest")
_REQUIRED = tuple(
    f.name for f in dataclasses.fields(ObjectRecord)
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)


# -- rows -----------------------------------------------------------------------------------


def row_document(record: ObjectRecord) -> dict[str, Any]:
    """The JSON document of a row: its sidecar, `kind` replaced by `protocol`."""
    document = record_to_sidecar(record)
    document.pop("kind", None)
    document[PROTOCOL_FIELD] = PROTOCOL_VERSION
    return document


def row_from_document(document: object) -> ObjectRecord:
    """The row a document describes (`is_latest` False and `seq` 0: the receiver decides
    them); WireError when a known field has the wrong type or a required one is absent."""
    if not isinstance(document, dict):
        raise WireError("an object row must be a JSON object")
    missing = [name for name in _REQUIRED if name not in document]
    if missing:
        raise WireError(f"the object row lacks {', '.join(missing)}")
    values = {name: read(name, document[name]) for name, read in _FIELD_KINDS.items()
              if name in document}
    return ObjectRecord(**values, is_latest=False)


def encode_row(record: ObjectRecord, blob: bytes | None = None) -> bytes:
    """The row's JSON body; `blob`: its blob's bytes as stored, sent with it."""
    document = row_document(record)
    if blob is not None:
        document[BLOB_FIELD] = binascii.b2a_base64(blob, newline=False).decode("ascii")
    return _encode(document)


def decode_row(body: bytes) -> ObjectRecord:
    return row_from_document(_decode(body))


def decode_row_and_blob(body: bytes) -> tuple[ObjectRecord, bytes | None]:
    """The row of a POST /cluster/v1/object body and the blob bytes sent with it (None:
    none were)."""
    document = _decode(body)
    record = row_from_document(document)
    assert isinstance(document, dict)  # row_from_document refused anything else
    encoded = document.get(BLOB_FIELD)
    if encoded is None:
        return record, None
    if not isinstance(encoded, str):
        raise WireError(f"{BLOB_FIELD} must be a string")
    try:
        return record, binascii.a2b_base64(encoded.encode("ascii"), strict_mode=True)
    except (binascii.Error, UnicodeEncodeError) as error:
        raise WireError(f"{BLOB_FIELD} is not base64: {error}") from None


# -- deletions ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReplicatedDelete:
    """A peer's deletion of one version: its tombstone's stamp."""

    bucket: str
    key: str
    version_id: str
    deleted_at: float


def encode_delete(delete: ReplicatedDelete) -> bytes:
    return _encode({"bucket": delete.bucket, "key": delete.key,
                    "version_id": delete.version_id, "deleted_at": delete.deleted_at,
                    PROTOCOL_FIELD: PROTOCOL_VERSION})


def decode_delete(body: bytes) -> ReplicatedDelete:
    document = _decode(body)
    if not isinstance(document, dict):
        raise WireError("a deletion must be a JSON object")
    try:
        return ReplicatedDelete(
            bucket=_str("bucket", document["bucket"]), key=_str("key", document["key"]),
            version_id=_str("version_id", document["version_id"]),
            deleted_at=_float("deleted_at", document["deleted_at"]))
    except KeyError as missing:
        raise WireError(f"the deletion lacks {missing.args[0]}") from None


# -- acks -----------------------------------------------------------------------------------


def encode_ack(ack: Ack) -> dict[str, bool]:
    """ClusterObjectAck (read back with `convergence.ack.ack_from_response`)."""
    return {"applied": ack.applied, "has_blob": ack.has_blob}


# -- JSON -----------------------------------------------------------------------------------


def _encode(document: Mapping[str, Any]) -> bytes:
    # No NaN or Infinity: they are not JSON, and no stored stamp is one.
    return json.dumps(document, allow_nan=False, separators=(",", ":")).encode()


def _decode(body: bytes) -> object:
    try:
        return parse_json(body)
    except (ValueError, UnicodeDecodeError) as error:
        raise WireError(f"the body is not JSON: {error}") from None
