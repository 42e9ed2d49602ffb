"""Conversion between object records and sidecar documents.

A sidecar is the JSON twin of one object row (minus `seq`, which is node-local): with the
control-plane record it is all `objstore recover` needs to rebuild the database.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from objstore.meta.records import ObjectRecord, PartRef

_NODE_LOCAL = ("seq", "is_latest")
_FIELDS = {f.name for f in dataclasses.fields(ObjectRecord)}


def record_to_sidecar(record: ObjectRecord) -> dict[str, Any]:
    data = dataclasses.asdict(record)
    for name in _NODE_LOCAL:
        data.pop(name, None)
    data["kind"] = "object"
    return data


def record_from_sidecar(data: dict[str, Any]) -> ObjectRecord:
    """Rebuild a record (is_latest=False, seq=0: the caller decides latest). Unknown fields
    written by a newer version are ignored."""
    values = {k: v for k, v in data.items() if k in _FIELDS and k not in _NODE_LOCAL}
    values["parts"] = tuple(PartRef(**p) for p in values.get("parts", ()))
    return ObjectRecord(**values, is_latest=False)
