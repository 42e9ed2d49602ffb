"""What rotate-key re-wraps (workers/key_rotation.py `rewrapped`, `rewrapped_part`), with
real key versions: a single-blob version's data key, each part key of a completed SSE-S3
multipart version (bound to the version and the part's blob), an open upload's part key
(bound to the upload); after it only the new version is needed. SSE-C versions,
unknown formats and parts already under the active version are left alone."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from objstore.crypto.master_key import (
    Keyring,
    LocalMasterKey,
    UnwrapError,
    key_context,
    part_context,
)
from objstore.crypto.packages import FORMAT
from objstore.meta.records import ObjectRecord, PartRecord, PartRef, UploadRecord
from objstore.workers.key_rotation import rewrapped, rewrapped_part

OLD, NEW = LocalMasterKey(os.urandom(32)), LocalMasterKey(os.urandom(32))
BOTH, ONLY_NEW = Keyring([OLD, NEW]), Keyring([NEW])
DATA = [os.urandom(32) for _ in range(3)]


def version(**fields: object) -> ObjectRecord:
    values: dict[str, object] = {"encryption_algorithm": "AES256",
                                 "encryption_key_id": OLD.key_id, **fields}
    return ObjectRecord(bucket="b", key="k", version_id="v1", blob_id="blob", size=9,
                        etag="e", last_modified=1.0, **values)  # type: ignore[arg-type]


def test_a_single_blob_versions_key() -> None:
    context = key_context("b", "k", "v1")
    record = version(encryption_params={"format": FORMAT,
                                        "wrapped_key": OLD.wrap(DATA[0], context)})
    fresh = rewrapped(BOTH, record)
    assert fresh is not None and fresh[1] is None
    assert ONLY_NEW.unwrap(NEW.key_id, fresh[0]["wrapped_key"], context) == DATA[0]


def test_each_part_key_of_a_composite() -> None:
    parts = tuple(PartRef(n, f"p{n}", 5, "e", encryption_params={
        "format": FORMAT, "wrapped_key": OLD.wrap(DATA[n], part_context("b", "k", "v1",
                                                                          f"p{n}"))})
        for n in (1, 2))
    record = version(parts=parts, encryption_params={"format": FORMAT, "keys": "per-part"})
    fresh = rewrapped(BOTH, record)
    assert fresh is not None and fresh[0] == record.encryption_params
    new_parts = fresh[1]
    assert new_parts is not None
    assert [p.blob_id for p in new_parts] == ["p1", "p2"]
    for part in new_parts:
        context = part_context("b", "k", "v1", part.blob_id)
        assert ONLY_NEW.unwrap(NEW.key_id, part.encryption_params["wrapped_key"],
                               context) == DATA[part.part_number]
    # A part's key bound to another blob does not open: the binding is kept.
    with pytest.raises(UnwrapError):
        ONLY_NEW.unwrap(NEW.key_id, new_parts[0].encryption_params["wrapped_key"],
                        part_context("b", "k", "v1", "p2"))


def test_left_alone() -> None:
    sse_c = version(encryption_algorithm="SSE-C", encryption_key_id=None,
                    encryption_params={"format": FORMAT, "sealed": "x", "salt": "y"})
    unknown = version(encryption_params={"format": "other", "wrapped_key": "w"})
    half = version(parts=(PartRef(1, "p1", 5, "e"),),
                   encryption_params={"format": FORMAT, "keys": "per-part"})
    assert rewrapped(BOTH, sse_c) is None and rewrapped(BOTH, unknown) is None
    assert rewrapped(BOTH, half) is None


def test_an_open_uploads_part() -> None:
    upload = UploadRecord("u1", "b", "k", 1.0)
    context = part_context("b", "k", "u1", "p1")
    part = PartRecord("u1", 1, "p1", 5, "e", 1.0, encryption_params={
        "format": FORMAT, "wrapped_key": OLD.wrap(DATA[0], context), "key_id": OLD.key_id})
    fresh = rewrapped_part(BOTH, upload, part)
    assert fresh is not None and fresh["key_id"] == NEW.key_id
    assert ONLY_NEW.unwrap(NEW.key_id, fresh["wrapped_key"], context) == DATA[0]
    assert rewrapped_part(BOTH, upload, replace(part, encryption_params=fresh)) is None
    assert rewrapped_part(BOTH, upload, replace(part, encryption_params={
        "format": FORMAT, "sealed": "x", "key_id": None})) is None
