"""Conversion between records and the documents beside the blobs.

A sidecar is the JSON twin of one object row (minus `seq`, which is node-local); a part's
sidecar (kind "part", written by the multipart service) holds its part row; an upload
record (`BlobStore.write_upload_record`) holds an open upload's row. With the control-plane
record they are all `objstore recover` needs to rebuild the database.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from objstore.meta.records import ObjectRecord, PartRecord, PartRef, UploadRecord

_NODE_LOCAL = ("seq", "is_latest")
_FIELDS = {f.name for f in dataclasses.fields(ObjectRecord)}
_SIDECAR_FIELDS = tuple(
    f.name for f in dataclasses.fields(ObjectRecord) if f.name not in _NODE_LOCAL)
_UPLOAD_FIELDS = {f.name for f in dataclasses.fields(UploadRecord)}


def record_to_sidecar(record: ObjectRecord) -> dict[str, Any]:
    """The sidecar document of `record`: what `dataclasses.asdict` gives, minus the
    node-local fields. Built field by field because it runs on the reactor for every
    write, where `asdict`'s generic deep copy cost ~70 µs."""
    data = {name: _plain(getattr(record, name)) for name in _SIDECAR_FIELDS}
    data["kind"] = "object"
    return data


_SCALARS = frozenset({str, int, float, bool, type(None), bytes})


def _plain(value: Any) -> Any:
    """A copy of a field value made of dicts, lists and scalars (as `asdict` copies it);
    immutable scalars are shared (most fields: tested first, without `is_dataclass`)."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is dict:
        return {key: _plain(item) for key, item in value.items()}
    if kind is tuple or kind is list:
        return kind(_plain(item) for item in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def record_from_sidecar(data: dict[str, Any]) -> ObjectRecord:
    """Rebuild a record (is_latest=False, seq=0: the caller decides latest). Unknown fields
    written by a newer version are ignored."""
    values = {k: v for k, v in data.items() if k in _FIELDS and k not in _NODE_LOCAL}
    values["parts"] = tuple(PartRef(**p) for p in values.get("parts", ()))
    return ObjectRecord(**values, is_latest=False)


def upload_to_record(upload: UploadRecord) -> dict[str, Any]:
    """The record document of an open upload."""
    return {**dataclasses.asdict(upload), "kind": "upload"}


def upload_from_record(data: dict[str, Any]) -> UploadRecord:
    """Rebuild an upload row; unknown fields written by a newer version are ignored."""
    return UploadRecord(**{k: v for k, v in data.items() if k in _UPLOAD_FIELDS})


def part_from_sidecar(blob_id: str, data: dict[str, Any]) -> PartRecord:
    """Rebuild a part row from its sidecar (`engine.multipart.part_sidecar`)."""
    return PartRecord(
        upload_id=data["upload_id"], part_number=int(data["part_number"]), blob_id=blob_id,
        size=int(data["size"]), etag=data["etag"], last_modified=float(data["last_modified"]),
        checksums=dict(data.get("checksums") or {}),
        encryption_params=dict(data.get("encryption_params") or {}),
    )
