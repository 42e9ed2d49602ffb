"""The stage plan of a blob: which stages its bytes pass through (compress? which
encryption, under which master key?), decided once per body and recorded with it.

A `StagePlan` says what to do, never how: the engine decides it from the request and the
bucket's settings (engine/stage_plan.py) before the body is read, the factory
(blobs/factory.py) turns it into a writer's stages, and the object record (and so the
sidecar, `objstore recover`, replication and repair) carries it as the four fields
`compression`, `encryption_algorithm`, `encryption_key_id` and `encryption_params`. Readers,
`check --deep` and copies ask `plan_of(record)`; replicated and repaired blobs are copied as
stored bytes and never look inside.

`IDENTITY` (no stage) is the fast path: a plain object's writer and reader are exactly
those of a blob stored as sent. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

SSE_S3 = "AES256"  # the record's encryption_algorithm for SSE-S3 (as AWS names it)
# Encryptions whose data key the node's master key wraps: SSE-S3, and SSE-KMS mapped to
# the same key (crypto/kms_key.py); stored, read, re-wrapped and rotated alike.
MASTER_KEY_ENCRYPTIONS = frozenset({SSE_S3, "aws:kms"})


@dataclass(frozen=True, slots=True)
class StagePlan:
    """The stages of one body. `key_id`: the master key that wraps its data key;
    `compression_level`: the level a writer compresses at (None: the format's default;
    not recorded: a reader does not need it)."""

    compression: str | None = None
    encryption: str | None = None
    key_id: str | None = None
    compression_level: int | None = None

    @property
    def identity(self) -> bool:
        return self.compression is None and self.encryption is None


IDENTITY = StagePlan()


def plan_document(plan: StagePlan) -> dict[str, Any]:
    """The plan as JSON (a multipart upload keeps the plan its parts are written with)."""
    return {"compression": plan.compression, "encryption": plan.encryption,
            "key_id": plan.key_id, "compression_level": plan.compression_level}


def plan_from_document(document: object) -> StagePlan:
    """The plan `plan_document` wrote (identity for anything else: an upload made
    before plans were recorded stores its parts as sent)."""
    if not isinstance(document, dict):
        return IDENTITY
    values = {name: document.get(name) for name in
              ("compression", "encryption", "key_id", "compression_level")}
    if not all(isinstance(values[name], (str, type(None)))
               for name in ("compression", "encryption", "key_id")):
        return IDENTITY
    level = values["compression_level"]
    if not isinstance(level, (int, type(None))) or isinstance(level, bool):
        level = None
    plan = StagePlan(values["compression"], values["encryption"], values["key_id"], level)
    return IDENTITY if plan.identity else plan


class StagedRecord(Protocol):
    """What a record says about its stages (ObjectRecord has these fields)."""

    @property
    def compression(self) -> str | None: ...

    @property
    def encryption_algorithm(self) -> str | None: ...

    @property
    def encryption_key_id(self) -> str | None: ...

    @property
    def encryption_params(self) -> dict[str, Any]: ...


def plan_of(record: StagedRecord) -> StagePlan:
    """The plan a record's blob was written with."""
    if record.compression is None and record.encryption_algorithm is None:
        return IDENTITY
    return StagePlan(record.compression, record.encryption_algorithm,
                     record.encryption_key_id)
