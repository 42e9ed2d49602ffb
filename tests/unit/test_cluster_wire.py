"""The wire format of replicated rows and deletions (cluster/wire.py): pure, no reactor.
Row -> JSON -> row is the identity on replicated content (property-tested), unknown fields
are ignored, absent optional ones defaulted, wrong types refused."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from objstore.blobs.sidecar import record_to_sidecar
from objstore.cluster.wire import (
    _FIELD_KINDS,
    BLOB_FIELD,
    NODE_LOCAL_FIELDS,
    PROTOCOL_VERSION,
    ReplicatedDelete,
    WireError,
    decode_delete,
    decode_row,
    decode_row_and_blob,
    encode_ack,
    encode_delete,
    encode_row,
    row_document,
)
from objstore.convergence.ack import Ack, ack_from_response
from objstore.meta.records import ObjectRecord, PartRef

text = st.text(max_size=20)
optional_text = st.none() | text
stamps = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e12, max_value=1e12)
string_maps = st.dictionaries(text, text, max_size=3)
json_scalars = st.none() | st.booleans() | st.integers(-2**53, 2**53) | text | stamps
parts = st.builds(PartRef, part_number=st.integers(1, 10_000), blob_id=st.uuids().map(str),
                  size=st.integers(0, 2**40), etag=text, checksums=string_maps)
records = st.builds(
    ObjectRecord, bucket=text, key=text, version_id=text,
    blob_id=st.none() | st.uuids().map(str), size=st.integers(0, 2**50), etag=text,
    last_modified=stamps, is_latest=st.booleans(), is_delete_marker=st.booleans(),
    owner_id=text, owner_name=text, content_type=text, user_metadata=string_maps,
    system_headers=string_maps, storage_class=text, checksums=string_maps,
    checksum_type=optional_text, tags=string_maps, encryption_algorithm=optional_text,
    encryption_key_id=optional_text,
    encryption_params=st.dictionaries(text, json_scalars, max_size=3),
    compression=optional_text, retention_mode=optional_text,
    retain_until_date=st.none() | stamps, legal_hold_status=optional_text,
    lock_updated_at=st.none() | stamps, replication_status=optional_text,
    tags_updated_at=st.none() | stamps,
    parts=st.lists(parts, max_size=3).map(tuple), seq=st.integers(0, 2**40))


def replicated(record: ObjectRecord) -> ObjectRecord:
    """A row's replicated content: the node-local fields at what the receiver starts from."""
    return replace(record, is_latest=False, seq=0)


@given(records)
def test_row_to_json_to_row_is_the_identity_on_replicated_content(record: ObjectRecord
                                                                   ) -> None:
    assert decode_row(encode_row(record)) == replicated(record)


@given(records, st.dictionaries(st.text(min_size=1).filter(
    lambda name: name not in _FIELD_KINDS), json_scalars, max_size=4),
    st.dictionaries(st.sampled_from(["future", "xattr"]), json_scalars, max_size=2))
def test_unknown_fields_are_ignored(record: ObjectRecord, extra: dict[str, Any],
                                    part_extra: dict[str, Any]) -> None:
    document = {**row_document(record), **extra}
    document["parts"] = [{**part, **part_extra} for part in document["parts"]]
    assert decode_row(json.dumps(document).encode()) == replicated(record)


@given(records, st.binary(max_size=300))
def test_a_row_with_its_bytes_round_trips(record: ObjectRecord, blob: bytes) -> None:
    body = encode_row(record, blob)
    assert decode_row_and_blob(body) == (replicated(record), blob)
    assert decode_row(body) == replicated(record)  # what an older node reads of it
    assert decode_row_and_blob(encode_row(record)) == (replicated(record), None)


@pytest.mark.parametrize("value", ["QUJD!", "QUJ", "QU=JD", "\u00e9", 3, [], {"a": 1}])
def test_bytes_that_are_not_base64_are_refused(value: Any) -> None:
    document = {**row_document(ObjectRecord("b", "k", "null", None, 0, "e", 1.0)),
                BLOB_FIELD: value}
    with pytest.raises(WireError, match=BLOB_FIELD):
        decode_row_and_blob(json.dumps(document).encode())


def test_the_document_is_the_sidecar_with_the_protocol() -> None:
    record = ObjectRecord("b", "k", "null", "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa", 3, "e",
                          10.5, seq=7)
    document = json.loads(encode_row(record))
    sidecar = record_to_sidecar(record)
    del sidecar["kind"]
    assert document == json.loads(json.dumps({**sidecar, "protocol": PROTOCOL_VERSION}))
    assert "seq" not in document and "is_latest" not in document


def test_every_replicated_field_has_a_kind() -> None:
    # A field added to ObjectRecord must be decoded too, or peers would drop it.
    replicated_fields = {f.name for f in dataclasses.fields(ObjectRecord)} - set(
        NODE_LOCAL_FIELDS)
    assert set(_FIELD_KINDS) == replicated_fields


def test_absent_optional_fields_take_their_defaults() -> None:
    minimal = {"bucket": "b", "key": "k", "version_id": "null", "blob_id": None,
               "size": 0, "etag": "", "last_modified": 5}
    assert decode_row(json.dumps(minimal).encode()) == ObjectRecord(
        "b", "k", "null", None, 0, "", 5.0, is_latest=False)


@pytest.mark.parametrize("change", [
    {"size": "3"}, {"size": True}, {"last_modified": "now"}, {"tags": {"a": 1}},
    {"parts": {}}, {"parts": [{"part_number": 1}]}, {"is_delete_marker": 1},
    {"retain_until_date": 10**400}, {"user_metadata": []}, {"tags_updated_at": "later"},
])
def test_a_field_of_the_wrong_type_is_refused(change: dict[str, Any]) -> None:
    document = {"bucket": "b", "key": "k", "version_id": "null", "blob_id": None,
                "size": 0, "etag": "", "last_modified": 5, **change}
    with pytest.raises(WireError):
        decode_row(json.dumps(document).encode())


@pytest.mark.parametrize("body", [b"", b"[]", b"{", b"\xff", b'{"bucket": "b"}'])
def test_what_is_no_row_is_refused(body: bytes) -> None:
    with pytest.raises(WireError):
        decode_row(body)


@given(text, text, text, stamps)
def test_a_deletion_round_trips(bucket: str, key: str, version_id: str,
                                deleted_at: float) -> None:
    delete = ReplicatedDelete(bucket, key, version_id, deleted_at)
    assert decode_delete(encode_delete(delete)) == delete


def test_a_deletion_ignores_unknown_fields_and_refuses_wrong_ones() -> None:
    body = {"bucket": "b", "key": "k", "version_id": "null", "deleted_at": 3, "x": [1]}
    assert decode_delete(json.dumps(body).encode()) == ReplicatedDelete("b", "k", "null", 3.0)
    for broken in ({**body, "deleted_at": "3"}, {"bucket": "b"}, [body]):
        with pytest.raises(WireError):
            decode_delete(json.dumps(broken).encode())


@pytest.mark.parametrize("ack", [Ack(True, True), Ack(True, False), Ack(False, False)])
def test_the_ack_reads_back(ack: Ack) -> None:
    assert ack_from_response(200, json.dumps(encode_ack(ack)).encode()) == ack
