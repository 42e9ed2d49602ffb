"""`schema.object_record` builds its record without the dataclass's `__init__` (for
speed): the record must be the one `ObjectRecord(...)` makes, every field set, and a field
added to ObjectRecord must not be forgotten there."""

from __future__ import annotations

import dataclasses

import pytest

from objstore.meta import schema
from objstore.meta.records import ObjectRecord, PartRef

EVERY_FIELD = ObjectRecord(
    bucket="b", key="k/é", version_id="v1", blob_id="00000000-0000-4000-8000-000000000001",
    size=7, etag="abc-2", last_modified=12.5, is_latest=False, is_delete_marker=False,
    owner_id="u-1", owner_name="alice", content_type="text/plain",
    user_metadata={"colour": "blue"}, system_headers={"cache-control": "max-age=9"},
    storage_class="STANDARD_IA", checksums={"crc32": "AAAAAA=="}, checksum_type="COMPOSITE",
    tags={"a": "1"}, encryption_algorithm="AES256", encryption_key_id="key-1",
    encryption_params={"iv": "x"}, compression="zstd", retention_mode="GOVERNANCE",
    retain_until_date=99.0, legal_hold_status="ON", lock_updated_at=13.0,
    tags_updated_at=14.0, acl='{"grants": []}', stages_updated_at=15.0,
    replication_status="PENDING",
    parts=(PartRef(1, "00000000-0000-4000-8000-000000000002", 3, "e1"),
           PartRef(2, "00000000-0000-4000-8000-000000000003", 4, "e2", {"crc32": "x"})),
    seq=42,
)


def test_a_row_becomes_the_record_it_was_written_from() -> None:
    record = schema.object_record(schema.object_values(EVERY_FIELD))
    assert record == EVERY_FIELD
    assert vars(record).keys() == {f.name for f in dataclasses.fields(ObjectRecord)}
    assert dataclasses.replace(record, size=8) == dataclasses.replace(EVERY_FIELD, size=8)
    assert repr(record) == repr(EVERY_FIELD)


def test_the_record_stays_frozen() -> None:
    record = schema.object_record(schema.object_values(ObjectRecord("b", "k", "v", None, 0,
                                                                    "", 1.0)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.size = 3  # type: ignore[misc]
