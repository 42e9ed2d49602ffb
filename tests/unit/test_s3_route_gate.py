"""Every S3 route says whether it mutates, and the dispatcher asks the cluster write gate
before the handler of each one that does (issue 26, item 2). The tests enumerate the
route table (objstore/s3/routes.py), so a route added later is checked the day it is
added: declared as its method says, refused with 503 + Retry-After: 5 while the gate is
closed, and, for a read, served without asking the gate. The S3 API runs in memory
(tests/unit/resource_fixtures.py) with a gate the test closes."""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree

import pytest

from objstore.errors import S3Error
from objstore.s3.routes import ROUTES, Route, RouteKey
from tests.unit.resource_fixtures import ALICE, Node

URL = "http://s3.test"
# POST is a write in S3 but for these: the request body is a query, nothing is changed.
POST_READS = {"SelectObjectContent"}


class ClosedGate:
    """The cluster write gate of a node without its quorum: every write refused."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    def check_write(self, size_bytes: int, *, held_bytes: int = 0) -> None:
        self.asked.append(size_bytes)
        raise S3Error("ServiceUnavailable", "The cluster cannot reach its write quorum.")


def served(mutates: bool) -> list[RouteKey]:
    return [key for key, route in ROUTES.items()
            if route.handler is not None and route.mutates is mutates]


def url_of(key: RouteKey) -> str:
    _, target, sub = key
    path = {"service": "/", "bucket": "/bkt", "object": "/bkt/some/key"}[target]
    if sub is None:
        return URL + path
    return f"{URL}{path}?{sub}=u-1" if sub == "uploadId" else f"{URL}{path}?{sub}"


def test_every_route_declares_whether_it_mutates_as_its_method_says() -> None:
    for (method, _, _), route in ROUTES.items():
        assert isinstance(route, Route)
        reads = method in ("GET", "HEAD") or (method == "POST"
                                               and route.operation in POST_READS)
        if reads:
            assert not route.mutates, route.operation
        else:
            assert method in ("PUT", "POST", "DELETE"), route.operation
            assert route.mutates, route.operation


def test_the_families_the_gate_once_missed_are_declared_mutations() -> None:
    operations = {route.operation for route in ROUTES.values() if route.mutates}
    assert operations >= {
        "PutObject", "DeleteObject", "DeleteObjects", "PutObjectTagging",
        "DeleteObjectTagging", "PutBucketTagging", "DeleteBucketTagging",
        "PutObjectRetention", "PutObjectLegalHold", "CreateMultipartUpload", "UploadPart",
        "CompleteMultipartUpload", "AbortMultipartUpload", "CreateBucket", "DeleteBucket",
        "PutBucketVersioning", "PutBucketLifecycleConfiguration", "DeleteBucketLifecycle",
        "PutObjectLockConfiguration", "PutBucketAcl", "PutObjectAcl"}
    assert {route.copy_operation for route in ROUTES.values() if route.mutates} >= {
        "CopyObject", "UploadPartCopy"}


@pytest.mark.parametrize("key", served(mutates=True), ids=lambda k: " ".join(map(str, k)))
def test_a_closed_gate_refuses_every_mutating_route_before_its_handler(
        tmp_path: Path, key: RouteKey) -> None:
    gate = ClosedGate()
    node = Node(tmp_path, gate=gate)
    node.buckets.records.clear()
    method = key[0]
    answer = node.send(method, url_of(key), body=b"<x/>" if method != "DELETE" else b"")
    assert answer.status == 503, (key, answer.body)
    assert answer.headers["retry-after"] == "5"
    assert ElementTree.fromstring(answer.body).findtext("Code") == "ServiceUnavailable"
    assert gate.asked == [0]
    assert node.buckets.records == {} and node.buckets.callers == []  # no handler ran


def test_the_gate_is_asked_after_authorization(tmp_path: Path) -> None:
    """An unauthorized write is refused for what it is, not for the cluster's state."""
    gate = ClosedGate()
    node = Node(tmp_path, gate=gate)
    answer = node.send("PUT", f"{URL}/bkt/k", who=ALICE, body=b"data")
    assert answer.status == 403
    assert gate.asked == []


@pytest.mark.parametrize("key", served(mutates=False), ids=lambda k: " ".join(map(str, k)))
def test_a_read_never_asks_the_gate(tmp_path: Path, key: RouteKey) -> None:
    gate = ClosedGate()
    node = Node(tmp_path, gate=gate)
    answer = node.send(key[0], url_of(key))
    assert answer.status != 503, (key, answer.body)
    assert gate.asked == []
