"""Bucket names, keys and the request line: checked by their one rule without raising
anything but an S3 error; any key renders in every listing and error document (as AWS
writes it, or percent-encoded with encoding-type=url) and reads back as itself."""

from __future__ import annotations

import re
from types import SimpleNamespace
from urllib.parse import quote, unquote
from xml.etree import ElementTree

from hypothesis import given
from hypothesis import strategies as st
from twisted.web.http_headers import Headers

from objstore.engine.names import bucket_name_problem, key_problem
from objstore.errors import S3Error
from objstore.http.error_xml import error_document
from objstore.meta.records import ObjectRecord
from objstore.s3.listing_xml import list_objects_document
from objstore.s3.routes import parse_request_line
from tests.fuzz.outcomes import check_code
from tests.fuzz.strategies import any_text

S3_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"
# Characters XML 1.0 can not carry, which the renderer writes as character references.
FORBIDDEN = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
keys = st.one_of(any_text, st.text(min_size=1, max_size=60)).filter(
    lambda k: key_problem(k) is None)


@given(any_text)
def test_bucket_names(name: str) -> None:
    problem = bucket_name_problem(name)
    assert problem is None or isinstance(problem, str)


@given(st.one_of(any_text, st.text(max_size=1100)))
def test_keys(key: str) -> None:
    problem = key_problem(key)
    if problem is not None:
        check_code(problem[0])
    else:
        assert "\x00" not in key and len(key.encode("utf-8")) <= 1024


def listing(key: str, encoding: str | None) -> bytes:
    record = ObjectRecord(bucket="b", key=key, version_id="null", blob_id="x", size=1,
                          etag="e", last_modified=1.0)
    return list_objects_document(
        bucket="b", version=2, prefix=key, delimiter="", max_keys=1000,
        encoding_type=encoding, contents=[record], common_prefixes=[key],
        is_truncated=False, fields={"KeyCount": "2", "StartAfter": key}, fetch_owner=False)


@given(keys)
def test_any_stored_key_is_listed_as_itself(key: str) -> None:
    encoded = ElementTree.fromstring(listing(key, "url"))
    assert unquote(encoded.findtext(f"{S3_NS}Contents/{S3_NS}Key") or "") == key
    assert quote(key, safe="/") == encoded.findtext(f"{S3_NS}Prefix")
    plain = listing(key, None)
    readable = re.sub(rb"&#x[0-9A-F]+;", b"", plain)  # the references XML 1.0 forbids
    found = ElementTree.fromstring(readable).findtext(f"{S3_NS}Contents/{S3_NS}Key") or ""
    assert found == FORBIDDEN.sub("", key)
    for char in set(FORBIDDEN.findall(key)):
        assert f"&#x{ord(char):X};".encode() in plain


@given(any_text, any_text, st.dictionaries(st.sampled_from(["Key", "ArgumentValue",
                                                            "BucketName"]), any_text))
def test_error_documents_render_any_text(code: str, message: str,
                                         fields: dict[str, str]) -> None:
    body = error_document(code, message, "RID", "HID", fields)
    ElementTree.fromstring(re.sub(rb"&#x[0-9A-F]+;", b"", body))


path_bytes = st.one_of(
    st.binary(max_size=40),
    st.lists(st.sampled_from([b"/", b"b", b"%", b"%FF", b"%0A", b"%00", b"%C2%B2", b"k",
                              b"?", b"&", b"=", b"uploads", b"versionId=", b"%2F", b"+"]),
             max_size=10).map(b"".join),
).map(lambda raw: b"/" + raw)


@given(st.sampled_from([b"GET", b"PUT", b"POST", b"DELETE", b"HEAD", b"PATCH"]), path_bytes,
       st.booleans())
def test_request_lines(method: bytes, uri: bytes, copy_source: bool) -> None:
    headers = Headers()
    if copy_source:
        headers.setRawHeaders(b"x-amz-copy-source", [b"/b/\xff"])
    request = SimpleNamespace(method=method, uri=uri, path=uri.partition(b"?")[0],
                              requestHeaders=headers)
    line = parse_request_line(request)  # type: ignore[arg-type]
    assert line.operation
    if line.error is not None:
        assert isinstance(line.error, S3Error) and line.error.code == "InvalidURI"
    if line.route is None or line.route.handler is None:
        check_code(line.refusal().code)
