"""The pure rules of multipart uploads: part lists of a completion, whole-object checksums
and their claims, the composite record, the upload's checksum headers, query parameters."""

from __future__ import annotations

import base64
import hashlib
import zlib

import pytest

from objstore.blobs.checksum_combine import composite_etag
from objstore.engine.multipart import (
    COMPOSITE,
    FULL_OBJECT,
    MIN_PART_BYTES,
    ChecksumMode,
    CompletionClaims,
    RequestedPart,
    check_claims,
    check_part_order,
    composite_record,
    group_of,
    new_upload_id,
    object_checksums,
    part_checksum_mismatch,
    part_sidecar,
    select_parts,
)
from objstore.errors import S3Error
from objstore.http.authn import checksums_describe_object
from objstore.http.sigv4 import RequestView
from objstore.meta.records import PartRecord, UploadRecord
from objstore.s3.multipart import checksum_mode, completion_claims, count_param
from objstore.s3.params import part_number

MIB = 1024 * 1024
NONE = ChecksumMode()
CRC32_COMPOSITE = ChecksumMode("crc32", COMPOSITE)
CRC32_FULL = ChecksumMode("crc32", FULL_OBJECT)


def crc32_b64(data: bytes) -> str:
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def part(number: int, size: int = 5 * MIB, data: bytes | None = None) -> PartRecord:
    body = data if data is not None else bytes([number]) * 16
    return PartRecord("up", number, f"blob-{number}", size, hashlib.md5(body).hexdigest(),
                      1.0, {"crc32": crc32_b64(body)})


def asked(p: PartRecord, *, etag: str | None = None, **checksums: str) -> RequestedPart:
    return RequestedPart(p.part_number, etag if etag is not None else f'"{p.etag}"', checksums)


def code(excinfo: pytest.ExceptionInfo[S3Error]) -> str:
    return excinfo.value.code


# -- the part list of a completion ------------------------------------------------------


@pytest.mark.parametrize("numbers", [[2, 1], [1, 1], [1, 3, 2]])
def test_parts_out_of_order(numbers: list[int]) -> None:
    with pytest.raises(S3Error) as caught:
        check_part_order([RequestedPart(n, "e") for n in numbers])
    assert code(caught) == "InvalidPartOrder"


def test_an_empty_part_list_is_malformed() -> None:
    with pytest.raises(S3Error) as caught:
        check_part_order([])
    assert code(caught) == "MalformedXML"


def test_select_parts_picks_the_named_parts_in_order() -> None:
    stored = [part(1), part(2), part(3, size=10)]
    chosen = select_parts("up", NONE, [asked(stored[0]), asked(stored[2])], stored)
    assert chosen == [stored[0], stored[2]]


@pytest.mark.parametrize(("template", "upper"), [
    ('"{}"', False), ("{}", False), ('  "{}" ', False), ('"{}"', True),
])
def test_etag_quotes_spaces_and_case_do_not_matter(template: str, upper: bool) -> None:
    stored = [part(1)]
    etag = stored[0].etag.upper() if upper else stored[0].etag
    assert select_parts("up", NONE, [asked(stored[0], etag=template.format(etag))],
                        stored) == stored


@pytest.mark.parametrize("which", ["unknown_number", "wrong_etag", "wrong_checksum"])
def test_invalid_part(which: str) -> None:
    stored = [part(1), part(2)]
    entry = asked(stored[1])
    if which == "unknown_number":
        entry = RequestedPart(3, entry.etag)
    elif which == "wrong_etag":
        entry = asked(stored[1], etag='"00000000000000000000000000000000"')
    else:
        entry = asked(stored[1], crc32=crc32_b64(b"other"))
    with pytest.raises(S3Error) as caught:
        select_parts("up", NONE, [asked(stored[0]), entry], stored)
    assert code(caught) == "InvalidPart"
    assert caught.value.fields["PartNumber"] == str(entry.part_number)


def test_small_non_last_part_is_entity_too_small() -> None:
    stored = [part(1), part(2, size=MIN_PART_BYTES - 1), part(3, size=1)]
    with pytest.raises(S3Error) as caught:
        select_parts("up", NONE, [asked(p) for p in stored], stored)
    assert code(caught) == "EntityTooSmall"
    assert caught.value.fields["PartNumber"] == "2"
    assert caught.value.fields["MinSizeAllowed"] == str(5 * 1024 * 1024)


def test_only_the_last_part_may_be_small() -> None:
    stored = [part(1, size=MIN_PART_BYTES), part(2, size=0)]
    assert select_parts("up", NONE, [asked(p) for p in stored], stored) == stored
    single = [part(1, size=3)]
    assert select_parts("up", NONE, [asked(single[0])], single) == single


def test_composite_upload_needs_each_parts_checksum_in_the_list() -> None:
    stored = [part(1), part(2)]
    entries = [asked(stored[0], crc32=stored[0].checksums["crc32"]), asked(stored[1])]
    with pytest.raises(S3Error) as caught:
        select_parts("up", CRC32_COMPOSITE, entries, stored)
    assert code(caught) == "InvalidRequest"
    assert "missing for part 2" in caught.value.message
    # FULL_OBJECT uploads do not need them
    assert select_parts("up", CRC32_FULL, entries, stored) == stored


# -- whole-object checksums -------------------------------------------------------------


def test_object_checksums_by_mode() -> None:
    data = [b"x" * 100, b"y" * 7]
    parts = [part(1, len(data[0]), data[0]), part(2, len(data[1]), data[1])]
    assert object_checksums(NONE, parts) == {}
    full = object_checksums(CRC32_FULL, parts)
    assert full == {"crc32": crc32_b64(b"".join(data))}
    composite = object_checksums(CRC32_COMPOSITE, parts)["crc32"]
    raw = b"".join(base64.b64decode(crc32_b64(d)) for d in data)
    assert composite == f"{crc32_b64(raw)}-2"


def test_object_checksum_needs_every_parts_value() -> None:
    parts = [part(1), PartRecord("up", 2, "b", 1, "e" * 32, 1.0, {})]
    with pytest.raises(S3Error) as caught:
        object_checksums(CRC32_COMPOSITE, parts)
    assert code(caught) == "InvalidRequest"


@pytest.mark.parametrize(("claims", "error"), [
    (CompletionClaims(), None),
    (CompletionClaims(checksums={"crc32": "AAAAAQ=="}), None),
    (CompletionClaims(checksums={"crc32": "AAAAAQ==-2"}), None),
    (CompletionClaims(checksums={"crc32": "AAAAAg=="}), "BadDigest"),
    (CompletionClaims(checksums={"sha256": "AAAAAQ=="}), "InvalidRequest"),
    (CompletionClaims(checksum_type="COMPOSITE"), None),
    (CompletionClaims(checksum_type="FULL_OBJECT"), "BadDigest"),
    (CompletionClaims(object_size=12), None),
    (CompletionClaims(object_size=13), "InvalidRequest"),
])
def test_claims_of_the_complete_request(claims: CompletionClaims, error: str | None) -> None:
    def verify() -> None:
        check_claims(claims, CRC32_COMPOSITE, {"crc32": "AAAAAQ==-2"}, 12)

    if error is None:
        verify()
    else:
        with pytest.raises(S3Error) as caught:
            verify()
        assert code(caught) == error


def test_part_checksum_of_another_algorithm() -> None:
    assert part_checksum_mismatch(NONE, {"sha256": "x"}) is None
    assert part_checksum_mismatch(CRC32_COMPOSITE, {"crc32": "x"}) is None
    assert part_checksum_mismatch(CRC32_COMPOSITE, {}) is None
    assert part_checksum_mismatch(CRC32_COMPOSITE, {"sha256": "x"}) == "sha256"


# -- the composite record ---------------------------------------------------------------


def test_composite_record_references_the_parts() -> None:
    upload = UploadRecord("up", "b", "k", 1.0, owner_id="u1", owner_name="alice",
                          content_type="video/mp4", user_metadata={"a": "1"},
                          system_headers={"cache-control": "no"}, storage_class="STANDARD_IA",
                          tags={"t": "v"})
    parts = [part(1), part(3, size=9)]
    record = composite_record(upload, parts, version_id="null", blob_id="sidecar-only",
                              now=9.0, checksums={"crc32": "x-2"}, checksum_type=COMPOSITE)
    assert record.size == 5 * MIB + 9
    assert record.etag == composite_etag([p.etag for p in parts])
    assert [(r.part_number, r.blob_id, r.size) for r in record.parts] == [
        (1, "blob-1", 5 * MIB), (3, "blob-3", 9)]
    assert record.blob_id == "sidecar-only"
    assert (record.owner_name, record.content_type, record.storage_class) == (
        "alice", "video/mp4", "STANDARD_IA")
    assert (record.user_metadata, record.tags) == ({"a": "1"}, {"t": "v"})
    assert (record.checksum_type, record.last_modified) == (COMPOSITE, 9.0)
    bare = composite_record(upload, parts, version_id="null", blob_id="s", now=9.0,
                            checksums={}, checksum_type=None)
    assert bare.checksum_type is None


def test_part_sidecar_names_its_upload() -> None:
    upload = UploadRecord("up", "b", "k", 1.0)
    sidecar = part_sidecar(upload, part(2))
    assert sidecar["kind"] == "part"
    assert (sidecar["upload_id"], sidecar["part_number"], sidecar["bucket"]) == ("up", 2, "b")
    assert sidecar["etag"] == part(2).etag and sidecar["checksums"] == part(2).checksums


def test_group_of() -> None:
    assert group_of("a/b/c", "", "/") == "a/"
    assert group_of("a/b/c", "a/", "/") == "a/b/"
    assert group_of("a/b", "a/", "/") is None
    assert group_of("a/b", "", "") is None


def test_upload_ids_sort_by_creation() -> None:
    ids = [new_upload_id() for _ in range(50)]
    assert ids == sorted(ids) and len(set(ids)) == 50


# -- request headers and parameters -----------------------------------------------------


@pytest.mark.parametrize(("algorithm", "kind", "expected"), [
    (None, None, ChecksumMode()),
    ("CRC32", None, ChecksumMode("crc32", COMPOSITE)),
    ("crc32c", "FULL_OBJECT", ChecksumMode("crc32c", FULL_OBJECT)),
    ("SHA256", "COMPOSITE", ChecksumMode("sha256", COMPOSITE)),
    ("CRC64NVME", None, ChecksumMode("crc64nvme", FULL_OBJECT)),
    ("SHA1", None, ChecksumMode("sha1", COMPOSITE)),
])
def test_checksum_mode(algorithm: str | None, kind: str | None, expected: ChecksumMode) -> None:
    assert checksum_mode(algorithm, kind) == expected


@pytest.mark.parametrize(("algorithm", "kind"), [
    (None, "COMPOSITE"),
    ("MD5", None),
    ("CRC32", "PARTIAL"),
    ("SHA256", "FULL_OBJECT"),
    ("SHA1", "FULL_OBJECT"),
    ("CRC64NVME", "COMPOSITE"),
])
def test_checksum_mode_refusals(algorithm: str | None, kind: str | None) -> None:
    with pytest.raises(S3Error) as caught:
        checksum_mode(algorithm, kind)
    assert code(caught) == "InvalidRequest"


@pytest.mark.parametrize("raw", [None, "", "0", "10001", "-1", "1.5", "abc", "²", "٣",
                                 "1_0", "9" * 5000])
def test_bad_part_numbers(raw: str | None) -> None:
    with pytest.raises(S3Error) as caught:
        part_number(raw)
    assert code(caught) == "InvalidArgument"


@pytest.mark.parametrize("raw", ["1", "10000", "42"])
def test_good_part_numbers(raw: str) -> None:
    assert part_number(raw) == int(raw)


def test_count_params() -> None:
    assert count_param({}, "max-parts", 1000) == 1000
    assert count_param({"max-parts": "7"}, "max-parts", 1000) == 7
    with pytest.raises(S3Error) as caught:
        count_param({"max-parts": "-3"}, "max-parts", 1000)
    assert code(caught) == "InvalidArgument"


def test_completion_claims_from_headers() -> None:
    claims = completion_claims({"x-amz-checksum-crc32": "AAAAAQ==", "x-amz-checksum-type":
                                "FULL_OBJECT", "x-amz-mp-object-size": "12",
                                "x-amz-checksum-algorithm": "CRC32"})
    assert claims == CompletionClaims({"crc32": "AAAAAQ=="}, "FULL_OBJECT", 12)
    for size in ("big", "²", "9" * 5000):
        with pytest.raises(S3Error) as caught:
            completion_claims({"x-amz-mp-object-size": size})
        assert code(caught) == "InvalidArgument"


@pytest.mark.parametrize(("method", "query", "expected"), [
    ("POST", "uploadId=abc", True),
    ("POST", "x=1&uploadId=", True),
    ("POST", "uploads", False),
    ("PUT", "partNumber=1&uploadId=abc", False),
    ("PUT", "", False),
])
def test_only_complete_carries_whole_object_checksum_headers(
    method: str, query: str, expected: bool
) -> None:
    view = RequestView(method=method, raw_path="/b/k", raw_query=query, headers={})
    assert checksums_describe_object(view) is expected
