"""Request headers as a hostile client sends them (any bytes), read by the one rule for
header bytes and parsed by each handler's parser: Range and copy-source ranges, copy
sources, conditional headers, object lock, tagging, checksums, attribute and paging
headers, directives. A value or a 4xx S3 error, never another exception; ranges found are
inside the object."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from objstore.http.client_bytes import HeaderValues
from objstore.s3 import (
    acl_headers,
    attributes,
    conditions,
    copy,
    lock_headers,
    multipart,
    objects,
)
from objstore.s3.copy_source import parse_copy_range, parse_copy_source
from objstore.s3.ranges import parse_range
from objstore.s3.tagging_header import parse_tagging_header
from objstore.s3.unsupported import refuse_unsupported_headers
from tests.fuzz.outcomes import Refused, outcome
from tests.fuzz.strategies import any_text, header_bytes, numbers

sizes = st.one_of(st.integers(min_value=0, max_value=10), st.integers(min_value=0))
range_text = st.one_of(
    st.tuples(st.sampled_from(["bytes=", "bytes =", "items=", "bytes=-", ""]),
              st.one_of(numbers, st.just("")), st.sampled_from(["-", "", "--", ","]),
              st.one_of(numbers, st.just(""))).map("".join),
    any_text,
)


@given(range_text, sizes)
def test_range(header: str, size: int) -> None:
    found = outcome(parse_range, header, size)
    if isinstance(found, tuple):
        start, end = found
        assert 0 <= start <= end < size


@given(range_text, sizes)
def test_copy_source_range(header: str, size: int) -> None:
    found = outcome(parse_copy_range, header, size)
    if isinstance(found, tuple):
        start, length = found
        assert start >= 0 and length >= 1 and start + length <= size


@given(st.one_of(any_text, st.tuples(any_text, any_text, any_text).map(
    lambda p: f"/{p[0]}/{p[1]}?versionId={p[2]}")))
def test_copy_source(header: str) -> None:
    outcome(parse_copy_source, header)


HEADER_NAMES = [
    "if-match", "if-none-match", "if-modified-since", "if-unmodified-since",
    "x-amz-copy-source-if-match", "x-amz-copy-source-if-modified-since",
    "x-amz-object-lock-mode", "x-amz-object-lock-retain-until-date",
    "x-amz-object-lock-legal-hold", "x-amz-bypass-governance-retention", "x-amz-tagging",
    "x-amz-checksum-crc32", "x-amz-checksum-type", "x-amz-checksum-algorithm",
    "x-amz-mp-object-size", "x-amz-object-attributes", "x-amz-max-parts",
    "x-amz-part-number-marker", "x-amz-storage-class", "x-amz-acl", "x-amz-grant-read",
    "x-amz-metadata-directive", "x-amz-tagging-directive", "content-encoding",
    "content-md5", "x-amz-meta-a", "x-amz-server-side-encryption",
]
PLAUSIBLE = st.sampled_from([
    b"*", b'"etag"', b"Wed, 21 Oct 2015 07:28:00 GMT", b"GOVERNANCE", b"COMPLIANCE",
    b"2030-01-01T00:00:00Z", b"0001-01-01T00:00:00+14:00", b"9999-12-31T23:59:59-14:00",
    b"ON", b"OFF", b"true", b"a=b&c=d", b"%FF=1", b"AAAAAA==", b"COMPOSITE", b"FULL_OBJECT",
    b"CRC32", b"CRC64NVME", b"ETag,ObjectParts", b"STANDARD", b"private", b"COPY",
    b"REPLACE", b"aws-chunked,gzip",
])
headers = st.dictionaries(st.sampled_from(HEADER_NAMES), st.one_of(PLAUSIBLE, header_bytes),
                          max_size=6).map(
    lambda found: HeaderValues((name.encode(), [value]) for name, value in found.items()))


@given(headers, st.sampled_from(["e", "etag"]), st.floats(min_value=0, max_value=4e9),
       st.sampled_from(["if-", "x-amz-copy-source-if-"]))
def test_conditional_headers(found: HeaderValues, etag: str, modified: float,
                             prefix: str) -> None:
    outcome(conditions.evaluate, found, etag, modified, prefix=prefix)


@given(headers)
def test_write_headers(found: HeaderValues) -> None:
    for parse in (lock_headers.lock_request, lock_headers.bypass_requested,
                  lock_headers.has_integrity_header, objects.storage_class,
                  acl_headers.check_acl_headers, objects.write_precondition,
                  objects.system_headers, multipart.completion_claims, copy.parse_directives,
                  attributes.parts_page):
        outcome(parse, found)
    outcome(lambda: multipart.checksum_mode(found.get("x-amz-checksum-algorithm"),
                                            found.get("x-amz-checksum-type")))
    outcome(lambda: attributes.parse_object_attributes(found.get("x-amz-object-attributes")))
    outcome(lambda: parse_tagging_header(found.get("x-amz-tagging")))
    outcome(lambda: refuse_unsupported_headers(found.items()))


@given(st.lists(st.tuples(st.binary(min_size=1, max_size=20), st.lists(header_bytes,
                                                                       max_size=2)),
                max_size=5))
def test_any_header_bytes_are_read_by_one_rule(raw: list[tuple[bytes, list[bytes]]]) -> None:
    found = HeaderValues(raw)
    for name in found:
        value = outcome(found.__getitem__, name)
        if isinstance(value, Refused):
            assert value.code == "InvalidArgument"
        else:
            value.encode("utf-8")  # what a handler gets is always text it can store
