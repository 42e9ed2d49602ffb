"""convergence/row_rules.py: what a replicated row may hold. Every rule refuses its
field (named in the problem) and lets through the rows objstore writes itself."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from objstore.convergence import row_rules
from objstore.convergence.row_rules import blob_problem, row_problem, stamp_problem
from objstore.engine import lock_rules
from objstore.iam import acl_rules
from objstore.meta.records import ObjectRecord, PartRef
from objstore.s3 import multipart, objects
from objstore.utc_dates import END_STAMP, LAST_STAMP

T = 1_700_000_000.0
YEAR_10000 = 253402300800.0
PART_BLOB = "cccccccc-cccc-4ccc-8ccc-cccccccccccc"


def row(**fields: Any) -> ObjectRecord:
    values: dict[str, Any] = {
        "bucket": "b", "key": "k", "version_id": "null",
        "blob_id": "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa", "size": 3,
        "etag": "900150983cd24fb0d6963f7d28e17f72", "last_modified": T}
    values.update(fields)
    return ObjectRecord(**values)


def refused_field(record: ObjectRecord) -> str:
    problem = row_problem(record)
    assert problem is not None, record
    return problem.field


def test_rows_objstore_writes_pass() -> None:
    assert row_problem(row()) is None
    assert row_problem(row(
        storage_class="STANDARD_IA", retention_mode="COMPLIANCE", retain_until_date=T + 86400,
        legal_hold_status="ON", lock_updated_at=T, tags_updated_at=T, tags={"t": "v"},
        checksums={"crc32": "AAAAAA=="}, checksum_type="FULL_OBJECT",
        user_metadata={"color": "blue"}, system_headers={"cache-control": "no-cache"},
        content_type="text/plain; charset=utf-8", replication_status="REPLICA",
        owner_name="ünïcode", encryption_algorithm="AES256")) is None
    assert row_problem(row(blob_id=None, is_delete_marker=True, size=0, etag="")) is None
    composite = row(size=10, etag="abc-2", checksums={"crc32": "AAAAAA==-2"},
                    checksum_type="COMPOSITE",
                    parts=(PartRef(1, PART_BLOB, 6, "e1", {"crc32": "AAAAAA=="}),
                           PartRef(2, PART_BLOB, 4, "e2", {"crc32": "BBBBBB=="})))
    assert row_problem(composite) is None


@pytest.mark.parametrize("stamp", [1e18, YEAR_10000, 1.7e308, -1e15, -0.5, 1e12, math.nan,
                                   math.inf, -math.inf], ids=repr)
@pytest.mark.parametrize("name", ["last_modified", "lock_updated_at", "tags_updated_at",
                                  "stages_updated_at", "retain_until_date"])
def test_stamps_and_dates_outside_1970_to_9999_are_refused(name: str, stamp: float) -> None:
    assert refused_field(row(**{name: stamp})) == name


def test_the_ends_of_the_range_pass() -> None:
    assert row_problem(row(last_modified=0.0, retain_until_date=LAST_STAMP)) is None
    assert stamp_problem("deleted_at", LAST_STAMP + 1) is not None
    # The last retain-until date a client may set (S3 parses years up to 9999).
    assert row_problem(row(retain_until_date=253402300799.999)) is None
    assert stamp_problem("deleted_at", None) is None


@given(st.floats())
def test_a_stamp_passes_exactly_when_it_renders(stamp: float) -> None:
    passes = row_problem(row(last_modified=stamp)) is None
    assert passes == (math.isfinite(stamp) and 0 <= stamp < END_STAMP)


@pytest.mark.parametrize(("fields", "field"), [
    ({"size": -1}, "size"),
    ({"size": 10 ** 30}, "size"),
    ({"size": 2 ** 63}, "size"),
    ({"size": 5, "parts": (PartRef(0, PART_BLOB, 5, "e"),)}, "parts[0].part_number"),
    ({"size": 5, "parts": (PartRef(10_001, PART_BLOB, 5, "e"),)}, "parts[0].part_number"),
    ({"size": 10, "parts": (PartRef(2, PART_BLOB, 5, "e"), PartRef(1, PART_BLOB, 5, "e"))},
     "parts[1].part_number"),
    ({"size": 10, "parts": (PartRef(1, PART_BLOB, 5, "e"), PartRef(1, PART_BLOB, 5, "e"))},
     "parts[1].part_number"),
    ({"size": 0, "parts": (PartRef(1, PART_BLOB, -1, "e"), PartRef(2, PART_BLOB, 1, "e"))},
     "parts[0].size"),
    ({"size": 2 ** 62, "parts": (PartRef(1, PART_BLOB, 5, "e"),)}, "size"),
], ids=str)
def test_sizes_and_part_numbers(fields: dict[str, Any], field: str) -> None:
    assert refused_field(row(**fields)) == field


@pytest.mark.parametrize(("name", "value"), [
    ("storage_class", "FAST"), ("storage_class", "standard"),
    ("retention_mode", "FOREVER"), ("legal_hold_status", "MAYBE"),
    ("legal_hold_status", "ON\r\nX-Injected: 1"), ("checksum_type", "BOTH"),
    ("encryption_algorithm", "rot13"), ("replication_status", "DONE"),
    ("compression", "Not A Token"), ("compression", "x" * 40),
])
def test_enumerations_hold_one_of_their_values(name: str, value: str) -> None:
    assert refused_field(row(**{name: value})) == name


def test_checksums_name_known_algorithms_in_base64() -> None:
    assert refused_field(row(checksums={"md4": "AAAA"})) == "checksums name"
    assert refused_field(row(checksums={"crc32": "not base64!"})) == "checksums['crc32']"
    bad_part = PartRef(1, PART_BLOB, 3, "e", {"crc32": "\n"})
    assert refused_field(row(parts=(bad_part,))) == "parts[0].checksums['crc32']"


@pytest.mark.parametrize(("fields", "field"), [
    ({"etag": 'ab"cd'}, "etag"),
    ({"etag": "e" * 200}, "etag"),
    ({"etag": "ab\ncd"}, "etag"),
    ({"content_type": "text/plain\r\nSet-Cookie: x=1"}, "content_type"),
    ({"content_type": "text/\x00plain"}, "content_type"),
    ({"encryption_key_id": "key\n"}, "encryption_key_id"),
    ({"user_metadata": {"bad name": "v"}}, "user_metadata name"),
    ({"user_metadata": {"ok": "v\r\nx"}}, "user_metadata['ok']"),
    ({"system_headers": {"location": "/elsewhere"}}, "system_headers name"),
    ({"system_headers": {"expires": "\r"}}, "system_headers['expires']"),
    ({"owner_name": "\ud800"}, "owner_name"),
    ({"tags": {"t": "\udfff"}}, "tags['t']"),
    ({"parts": (PartRef(1, PART_BLOB, 3, 'e"'),)}, "parts[0].etag"),
], ids=str)
def test_strings_are_unicode_and_header_safe(fields: dict[str, Any], field: str) -> None:
    assert refused_field(row(**fields)) == field


def test_control_characters_a_client_can_store_pass() -> None:
    """Owner names and tags are shown in XML only, which writes control characters as
    character references (as keys are): a row holding them is one objstore can write."""
    assert row_problem(row(owner_name="a\x01b", tags={"t": "line\nbreak"})) is None
    assert row_problem(row(user_metadata={"m": "tab\there"})) is None
    # A client's PUT stores other control characters in metadata and Content-Type (the
    # listener refuses only NUL, CR and LF): such rows must replicate.
    assert row_problem(row(user_metadata={"m": "a\x01\x1b\x7fb"},
                           content_type="text/\x0bplain")) is None


def test_a_problem_names_its_field_and_shows_its_value_safely() -> None:
    problem = row_problem(row(content_type="x\ud800\r\n"))
    assert problem is not None
    assert problem.field == "content_type"
    problem.value.encode("ascii")  # shown escaped: safe in a JSON error and a log line
    assert "content_type" in str(problem)


def test_blob_problem_compares_a_plain_rows_size_with_its_bytes() -> None:
    assert blob_problem(row(size=3), 3) is None
    problem = blob_problem(row(size=2 ** 62), 3)
    assert problem is not None and problem.field == "size"
    # Compressed or encrypted rows store another length; composites and delete markers
    # hold no bytes of their own.
    assert blob_problem(row(size=2 ** 62, compression="zstd"), 3) is None
    assert blob_problem(row(size=2 ** 62, encryption_algorithm="AES256"), 3) is None
    assert blob_problem(row(size=3, parts=(PartRef(1, PART_BLOB, 3, "e"),)), 0) is None
    assert blob_problem(row(blob_id=None, is_delete_marker=True, size=0), 7) is None


def test_the_enumerations_match_what_client_requests_may_set() -> None:
    assert row_rules.STORAGE_CLASSES == objects.STORAGE_CLASSES
    assert row_rules.RETENTION_MODES == lock_rules.MODES
    assert row_rules.HOLD_STATUSES == lock_rules.HOLD_STATUSES
    assert frozenset(multipart.ALGORITHMS.values()) == row_rules.CHECKSUM_ALGORITHMS
    assert frozenset(objects.SYSTEM_HEADERS) == row_rules.SYSTEM_HEADERS
    assert frozenset(acl_rules.PERMISSIONS) == row_rules.ACL_PERMISSIONS


def test_an_object_acl_must_be_a_stored_acl() -> None:
    good = acl_rules.canned_acl("public-read", "o").to_json()
    assert row_rules.row_problem(row(acl=good)) is None
    for bad in ("{", "[]", '{"owner":"o"}', '{"owner":"o","grants":[["u","SIDEWAYS",""]]}',
                '{"owner":1,"grants":[]}', '{"owner":"o","grants":[["u","READ"]]}'):
        assert refused_field(row(acl=bad)) == "acl"


def test_every_field_of_a_row_is_checked_or_left_to_the_engine() -> None:
    """A field added to ObjectRecord must be considered here: the rules name every field
    they check; the engine checks bucket, key, version id and blob ids; seq and
    is_latest are the receiver's; is_delete_marker and encryption_params carry no value
    a header or SQLite could choke on (wire.py checks their types)."""
    import dataclasses
    checked = {"last_modified", "lock_updated_at", "tags_updated_at", "stages_updated_at",
               "retain_until_date",
               "size", "parts", "storage_class", "retention_mode", "legal_hold_status",
               "checksum_type", "encryption_algorithm", "replication_status",
               "compression", "checksums", "etag", "content_type", "encryption_key_id",
               "user_metadata", "system_headers", "owner_id", "owner_name", "tags", "acl"}
    elsewhere = {"bucket", "key", "version_id", "blob_id", "seq", "is_latest",
                 "is_delete_marker", "encryption_params"}
    assert {f.name for f in dataclasses.fields(ObjectRecord)} == checked | elsewhere
    assert replace(row(), owner_id="\ud800") is not None
    assert refused_field(row(owner_id="\ud800")) == "owner_id"
