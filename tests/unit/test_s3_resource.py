"""The S3 API in memory (StubTreq against the real root resource, site and SigV4
authenticator; fake services): routing, errors and authorization decisions, and the
operation name each request is recorded under, refused or not."""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree

import pytest

from objstore.config import ServerLimits
from objstore.engine.changes import Origin
from tests.unit.resource_fixtures import ALICE, ROOT, Answer, Node

URL = "http://s3.test"


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)


def error_code(answer: Answer) -> str:
    document = ElementTree.fromstring(answer.body)
    request_id = document.findtext("RequestId")
    assert request_id == answer.headers["x-amz-request-id"]
    return document.findtext("Code") or ""


def test_signed_list_buckets_answers_xml(node: Node) -> None:
    node.buckets.records.clear()
    assert node.send("PUT", f"{URL}/photos").status == 200
    answer = node.send("GET", f"{URL}/")
    assert answer.status == 200
    assert answer.headers["content-type"] == "application/xml"
    assert b"<Name>photos</Name>" in answer.body
    assert [r.operation for r in node.records()] == ["CreateBucket", "ListBuckets"]


def test_an_engine_write_names_its_caller(node: Node) -> None:
    node.buckets.records.clear()
    created = node.send("PUT", f"{URL}/photos")
    deleted = node.send("DELETE", f"{URL}/photos")
    assert (created.status, deleted.status) == (200, 204)
    first, second = node.buckets.callers
    assert first.principal.user_id == ROOT.user_id and first.origin is Origin.CLIENT
    assert first.request_id == created.headers["x-amz-request-id"]
    assert second.request_id == deleted.headers["x-amz-request-id"]
    assert (first.operation, second.operation) == ("CreateBucket", "DeleteBucket")
    assert first.source_address  # the client's address, as the audit records it
    assert first.source_address == node.records()[0].source_ip


def test_unsigned_request_is_refused_and_still_named(node: Node) -> None:
    answer = node.send("PUT", f"{URL}/b/k", who=None, body=b"data")
    assert (answer.status, error_code(answer)) == (403, "AccessDenied")
    (record,) = node.records()
    assert (record.operation, record.bucket, record.key) == ("PutObject", "b", "k")
    assert (record.status, record.error_code, record.user_id) == (403, "AccessDenied", "")


def test_wrong_signature_and_unknown_key_are_refused(node: Node) -> None:
    added = node.send("GET", f"{URL}/", unsigned={"x-amz-meta-late": "1"})
    assert (added.status, error_code(added)) == (403, "AccessDenied")
    changed = node.send("GET", f"{URL}/", headers={"range": "bytes=0-1"},
                        unsigned={"range": "bytes=0-2"})
    assert (changed.status, error_code(changed)) == (403, "SignatureDoesNotMatch")
    tampered = node.send("GET", f"{URL}/?versions", who=None, headers={
        "authorization": "AWS4-HMAC-SHA256 Credential=AKIANOBODY/20231114/us-east-1/s3/"
                         "aws4_request, SignedHeaders=host, Signature=" + "0" * 64,
        "x-amz-content-sha256": "UNSIGNED-PAYLOAD", "x-amz-date": "20231114T221320Z"})
    assert (tampered.status, error_code(tampered)) == (403, "InvalidAccessKeyId")


def test_head_of_a_missing_bucket_is_404_without_body(node: Node) -> None:
    answer = node.send("HEAD", f"{URL}/nothing")
    assert (answer.status, answer.body) == (404, b"")
    assert node.records()[0].operation == "HeadBucket"


def test_known_sub_resource_without_handler_is_501(node: Node) -> None:
    answer = node.send("PUT", f"{URL}/b?website", body=b"<WebsiteConfiguration/>")
    assert (answer.status, error_code(answer)) == (501, "NotImplemented")
    assert node.records()[0].operation == "PutBucketWebsite"


def test_unknown_method_is_405_and_unknown(node: Node) -> None:
    answer = node.send("PATCH", f"{URL}/b")
    assert (answer.status, error_code(answer)) == (405, "MethodNotAllowed")
    assert node.records()[0].operation == "Unknown"


def test_path_klein_refuses_is_still_named(node: Node) -> None:
    answer = node.send("GET", f"{URL}/b/%ff")
    assert answer.status == 400  # Klein's own answer: the path is not UTF-8
    (record,) = node.records()
    assert (record.operation, record.bucket, record.status) == ("GetObject", "b", 400)


def test_the_route_action_is_checked_on_the_bucket(node: Node) -> None:
    node.send("PUT", f"{URL}/b")
    denied = node.send("GET", f"{URL}/b?location", who=ALICE)
    assert (denied.status, error_code(denied)) == (403, "AccessDenied")
    assert ("alice", "s3:GetBucketLocation", "arn:aws:s3:::b") in node.authorizer.checked
    node.authorizer.grants.add(("s3:GetBucketLocation", "arn:aws:s3:::b"))
    assert node.send("GET", f"{URL}/b?location", who=ALICE).status == 200
    records = node.records()
    assert [(r.operation, r.username) for r in records[1:]] == [
        ("GetBucketLocation", "alice"), ("GetBucketLocation", "alice")]


def test_virtual_host_names_the_bucket(node: Node) -> None:
    node.send("PUT", f"{URL}/b")
    answer = node.send("GET", "http://b.s3.test/?location")
    assert answer.status == 200 and b"LocationConstraint" in answer.body
    assert node.records()[-1].bucket == "b"


def test_version_and_upload_ids_are_recorded_nothing_else_of_the_query(node: Node) -> None:
    node.send("GET", f"{URL}/b?list-type=2&prefix=secret-ish")
    node.send("HEAD", f"{URL}/b/k?versionId=v1&uploadId=u1&X-Amz-Signature=abc")
    listed, head = node.records()
    assert (listed.operation, listed.details) == ("ListObjectsV2", {})
    # HEAD ?uploadId has no route; a half presigned query is refused before that.
    assert (head.operation, head.status) == ("Unknown", 400)
    assert head.details == {"version_id": "v1", "upload_id": "u1"}
    assert "abc" not in repr(head)


def test_per_address_rate_limit_answers_slow_down(tmp_path: Path) -> None:
    node = Node(tmp_path, limits=ServerLimits(rate_limit_per_ip_per_second=1.0,
                                              rate_limit_per_ip_burst=1))
    assert node.send("GET", f"{URL}/").status == 200
    answer = node.send("GET", f"{URL}/")
    assert (answer.status, error_code(answer)) == (503, "SlowDown")
    assert answer.headers["retry-after"] == "5"
    assert [r.operation for r in node.records()] == ["ListBuckets", "ListBuckets"]


@pytest.mark.parametrize("key", ["a%0Ab", "a%0Db", "%0A", "a%01b%7F"])
def test_keys_with_line_breaks_and_control_characters_reach_the_s3_api(node: Node,
                                                                         key: str) -> None:
    # werkzeug matched no rule for a newline in the path: Klein answered 500.
    answer = node.send("POST", f"{URL}/photos/{key}?restore")
    assert (answer.status, error_code(answer)) == (501, "NotImplemented")
    (record,) = node.records()
    assert record.operation == "RestoreObject"


@pytest.mark.parametrize("target", ["/photos/k%FF", "/photos%FF/k", "/photos/k?prefix=%FF"])
def test_percent_encoding_that_is_not_utf8_is_invalid_uri_in_s3_xml(node: Node,
                                                                     target: str) -> None:
    # Klein answered a text/plain 400 "Non-UTF-8 encoding in URL." for the path.
    answer = node.send("GET", URL + target)
    assert answer.headers["content-type"] == "application/xml"
    assert (answer.status, error_code(answer)) == (400, "InvalidURI")


@pytest.mark.parametrize(("method", "headers"), [
    ("GET", {"x-amz-server-side-encryption-customer-algorithm": "AES256"}),
    ("PUT", {"x-amz-copy-source": "photos/src",
             "x-amz-copy-source-server-side-encryption-customer-key": "AES256"}),
])
def test_sse_c_over_plain_http_is_refused_before_anything(node: Node, method: str,
                                                          headers: dict[str, str]) -> None:
    """SSE-C headers on a plain-HTTP request: 400 InvalidRequest, as AWS, whatever their
    values (the key would have crossed the network in clear)."""
    answer = node.send(method, f"{URL}/photos/k", headers=headers)
    assert answer.status == 400 and error_code(answer) == "InvalidRequest"
    assert b"secure connection" in answer.body
