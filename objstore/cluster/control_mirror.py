"""The control record (`blobs/control.py`, what `objstore recover` rebuilds the control
plane from) after a control-plane merge: each row the merge wrote is written there in the
form the admin and S3 services write it, each row it deleted is removed. Runs on the IO
pool (file writes, fsync). No Twisted here.

Families and keys coincide with the merge's (`pair_key`, `config_control_key`: "a:b");
uploads and parts have no control record (as when a client makes them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Protocol

from objstore.convergence.control_merge import FAMILY_BY_NAME
from objstore.meta import schema
from objstore.meta.control_snapshot_queries import MergeOutcome
from objstore.meta.grant_queries import grant_record, team_record

CONTROL_FAMILIES: dict[str, str] = {
    "bucket": "buckets",
    "bucket_config": "bucket_config",
    "setting": "settings",
    "user": "users",
    "credential": "credentials",
    "team": "teams",
    "grant": "grants",
    "team_member": "team_members",
    "user_grant": "user_grants",
    "team_grant": "team_grants",
}
_PAIRS = {"team_member": ("team_id", "user_id"), "user_grant": ("user_id", "grant_id"),
          "team_grant": ("team_id", "grant_id")}


class ControlFiles(Protocol):
    def write(self, family: str, key: str, data: dict[str, Any]) -> None: ...

    def remove(self, family: str, key: str) -> None: ...


def control_document(family: str, row: Mapping[str, Any],
                     bucket_created_at: Mapping[str, float]) -> dict[str, Any] | None:
    """The control record's document of a merged row (None: not kept there)."""
    if family == "bucket":
        return dataclasses.asdict(schema.bucket_record(row))
    if family == "user":
        return dataclasses.asdict(schema.user_record(row))
    if family == "credential":
        return dataclasses.asdict(schema.credential_record(row))
    if family == "team":
        return dataclasses.asdict(team_record(row))
    if family == "grant":
        return dataclasses.asdict(grant_record(row))
    if family in _PAIRS:
        first, second = _PAIRS[family]
        return {first: row[first], second: row[second], "updated_at": row["updated_at"]}
    if family == "setting":
        return {"value": row["value"]}
    if family == "bucket_config":
        created = bucket_created_at.get(str(row["bucket"]))
        if created is None:
            return None
        return {"bucket": row["bucket"], "key": row["key"], "value": row["value"],
                "bucket_created_at": created}
    return None


def mirror(control: ControlFiles, outcome: MergeOutcome) -> None:
    """(IO thread) Bring the control record in line with what the merge wrote."""
    for family, keys in outcome.removed.items():
        target = CONTROL_FAMILIES.get(family)
        if target is not None:
            for key in keys:
                control.remove(target, key)
    for family, rows in outcome.written.items():
        target = CONTROL_FAMILIES.get(family)
        if target is None:
            continue
        spec_key = FAMILY_BY_NAME[family].key_columns
        for row in rows:
            document = control_document(family, row, outcome.bucket_created_at)
            if document is not None:
                control.write(target, ":".join(str(row[c]) for c in spec_key), document)


__all__ = ["CONTROL_FAMILIES", "ControlFiles", "control_document", "mirror"]
