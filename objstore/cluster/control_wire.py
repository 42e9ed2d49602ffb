"""The JSON of the control plane on the wire: the op notice (POST /cluster/v1/op) and the
control-plane snapshot (POST /cluster/v1/control-snapshot).

Op: `{kind, bucket, key, version_id, subject, at}` plus, for tags_changed and
lock_changed, `record` (the committed row, `wire.row_document`). Unknown fields are
ignored, absent optional ones defaulted (rule 14).

Snapshot: `{"protocol": 1, "node_id", "families": {family: {"rows": [row, ...],
"tombstones": {key: deleted_at}}}}`; a row is its columns as the database stores them
(`control_snapshot_queries.valid_row` checks each). A family this node does not know is
ignored; a row that does not check out is left out (counted in `DecodedSnapshot.ignored`);
a snapshot that is not such a document is a `WireError`. The snapshot carries credential
secrets: it travels only on the authenticated route and is never logged.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from objstore.cluster.fanout import ClusterOp
from objstore.cluster.wire import PROTOCOL_VERSION, WireError, row_document, row_from_document
from objstore.convergence.control_merge import FAMILY_BY_NAME, FamilyState
from objstore.engine.changes import ChangeKind
from objstore.json_input import parse_json
from objstore.meta.control_snapshot_queries import valid_row

ROW_KINDS = frozenset({ChangeKind.TAGS_CHANGED.value, ChangeKind.LOCK_CHANGED.value,
                       ChangeKind.ACL_CHANGED.value})


def encode_op(op: ClusterOp) -> bytes:
    document: dict[str, Any] = op.document()
    if op.record is not None:
        document["record"] = row_document(op.record)
    return json.dumps(document, separators=(",", ":")).encode()


def _text(document: dict[str, Any], name: str) -> str:
    value = document.get(name, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise WireError(f"{name} must be a string")
    return value


def decode_op(body: bytes) -> ClusterOp:
    document = _json(body)
    kind = document.get("kind")
    if not isinstance(kind, str) or not kind:
        raise WireError("kind must be a non-empty string")
    version_id = document.get("version_id")
    if version_id is not None and not isinstance(version_id, str):
        raise WireError("version_id must be a string or null")
    at = document.get("at", 0.0)
    if isinstance(at, bool) or not isinstance(at, int | float) or not math.isfinite(at):
        raise WireError("at must be a finite number")
    record = None
    if kind in ROW_KINDS:
        if "record" not in document:
            raise WireError(f"{kind} needs its record")
        record = row_from_document(document["record"])
    return ClusterOp(kind=kind, bucket=_text(document, "bucket"), key=_text(document, "key"),
                     version_id=version_id, subject=_text(document, "subject"),
                     at=float(at), record=record)


@dataclass(frozen=True, slots=True)
class DecodedSnapshot:
    node_id: str
    families: dict[str, FamilyState]
    ignored: int  # rows and tombstones left out (unknown shape)


def snapshot_document(node_id: str, state: dict[str, FamilyState]) -> dict[str, Any]:
    return {
        "protocol": PROTOCOL_VERSION,
        "node_id": node_id,
        "families": {
            name: {"rows": list(family.rows.values()), "tombstones": dict(family.tombstones)}
            for name, family in state.items()
        },
    }


def encode_snapshot(node_id: str, state: dict[str, FamilyState]) -> bytes:
    return json.dumps(snapshot_document(node_id, state), separators=(",", ":")).encode()


def decode_snapshot(body: bytes) -> DecodedSnapshot:
    document = _json(body)
    node_id = document.get("node_id", "")
    families = document.get("families")
    if not isinstance(node_id, str) or not isinstance(families, dict):
        raise WireError("a control snapshot needs node_id and families")
    decoded: dict[str, FamilyState] = {}
    ignored = 0
    for name, family in families.items():
        spec = FAMILY_BY_NAME.get(name)
        if spec is None:
            continue  # a family of a newer version: no information here
        if not isinstance(family, dict):
            raise WireError(f"family {name} must be an object")
        raw_rows = family.get("rows", [])
        raw_tombstones = family.get("tombstones", {})
        if not isinstance(raw_rows, list) or not isinstance(raw_tombstones, dict):
            raise WireError(f"family {name} needs a list of rows and an object of tombstones")
        rows: dict[str, dict[str, Any]] = {}
        for raw in raw_rows:
            row = valid_row(name, raw)
            if row is None:
                ignored += 1
                continue
            rows[spec.key_of(row)] = row
        tombstones: dict[str, float] = {}
        for key, deleted_at in raw_tombstones.items():
            if isinstance(deleted_at, bool) or not isinstance(deleted_at, int | float) \
                    or not math.isfinite(deleted_at):
                ignored += 1
                continue
            tombstones[key] = float(deleted_at)
        decoded[name] = FamilyState(rows, tombstones)
    return DecodedSnapshot(node_id, decoded, ignored)


def _json(body: bytes) -> dict[str, Any]:
    try:
        document = parse_json(body)
    except (ValueError, UnicodeDecodeError) as error:
        raise WireError(f"not JSON: {error}") from None
    if not isinstance(document, dict):
        raise WireError("not a JSON object")
    return document


__all__ = ["ROW_KINDS", "DecodedSnapshot", "decode_op", "decode_snapshot", "encode_op",
           "encode_snapshot", "snapshot_document"]
