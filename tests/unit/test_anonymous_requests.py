"""Unsigned requests in memory (issue 29): an anonymous caller reaches the one decision
and nothing more. Refused before the body unless allowed; when allowed, what it claims
about the body is still checked (no signed chunks can be forged without a key); the admin
API never serves it; nothing answers 500."""

from __future__ import annotations

import hashlib
from pathlib import Path
from xml.etree import ElementTree

import pytest

from tests.unit.resource_fixtures import Answer, Node

URL = "http://s3.test"


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)


def code(answer: Answer) -> str:
    return ElementTree.fromstring(answer.body).findtext("Code") or ""


def test_anonymous_reads_and_writes_are_denied_by_default(node: Node) -> None:
    for method, url in (("GET", "/"), ("GET", "/b"), ("GET", "/b/k"), ("PUT", "/b"),
                        ("DELETE", "/b/k"), ("GET", "/b?policy"), ("PUT", "/b?acl")):
        answer = node.send(method, URL + url, who=None)
        assert (answer.status, code(answer)) == (403, "AccessDenied"), (method, url)


def test_the_admin_api_refuses_anonymous_callers(node: Node) -> None:
    node.authorizer.anonymous.add("*")
    answer = node.send("GET", f"{URL}/admin/info", who=None)
    assert answer.status == 403


def test_an_allowed_anonymous_write_still_proves_its_body(node: Node) -> None:
    # PutBucketTagging: a body checked before its handler runs (the fake node has no
    # engine behind the handlers)
    node.authorizer.anonymous.add("s3:PutBucketTagging")
    wrong = node.send("PUT", f"{URL}/b?tagging", who=None, body=b"data",
                      headers={"x-amz-content-sha256": hashlib.sha256(b"other").hexdigest()})
    assert (wrong.status, code(wrong)) == (400, "XAmzContentSHA256Mismatch")
    chunked = node.send("PUT", f"{URL}/b?tagging", who=None,
                        body=b"4;chunk-signature=" + b"0" * 64 + b"\r\ndata\r\n"
                             b"0;chunk-signature=" + b"0" * 64 + b"\r\n\r\n",
                        headers={"x-amz-content-sha256": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
                                 "content-encoding": "aws-chunked",
                                 "x-amz-decoded-content-length": "4"})
    assert 400 <= chunked.status < 500, chunked.body
    md5 = node.send("PUT", f"{URL}/b?tagging", who=None, body=b"data",
                    headers={"content-md5": "AAAAAAAAAAAAAAAAAAAAAA=="})
    assert (md5.status, code(md5)) == (400, "BadDigest")


def test_garbage_auth_shapes_are_4xx(node: Node) -> None:
    for headers in ({"authorization": "AWS4-HMAC-SHA256"},
                    {"authorization": "Bearer x"},
                    {"x-amz-expected-bucket-owner": "\u00e9"}):
        answer = node.send("GET", f"{URL}/b/k", who=None, headers=headers)
        assert 400 <= answer.status < 500, (headers, answer.status)
    query = node.send("GET", f"{URL}/b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=0",
                      who=None)
    assert 400 <= query.status < 500
