"""Operation names: S3 names from the route table (the request line parsed once), admin
names from the path, and a bounded set of names whatever a client sends."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.web.http_headers import Headers

from objstore.audit.operations import ADMIN_UNKNOWN, UNKNOWN, admin_operation
from objstore.s3.routes import ROUTES, parse_request_line


class RequestLine:
    """What `parse_request_line` reads of a request."""

    def __init__(self, method: str, path: str, query: str, headers: dict[str, str]) -> None:
        self.method = method.encode()
        self.path = path.encode()
        self.uri = self.path + (b"?" + query.encode() if query else b"")
        self.requestHeaders = Headers({name.encode(): [value.encode()]
                                       for name, value in headers.items()})


def s3(method: str, path: str, query: str = "", copy: bool = False) -> str:
    headers = {"x-amz-copy-source": "src/k"} if copy else {}
    request: Any = RequestLine(method, path, query, headers)
    return parse_request_line(request).operation


@pytest.mark.parametrize(("method", "path", "query", "copy", "name"), [
    ("GET", "/", "", False, "ListBuckets"),
    ("PUT", "/b", "", False, "CreateBucket"),
    ("HEAD", "/b", "", False, "HeadBucket"),
    ("GET", "/b", "", False, "ListObjects"),
    ("GET", "/b", "list-type=2&prefix=a", False, "ListObjectsV2"),
    ("GET", "/b", "versions", False, "ListObjectVersions"),
    ("GET", "/b", "uploads", False, "ListMultipartUploads"),
    ("POST", "/b", "delete", False, "DeleteObjects"),
    ("GET", "/b", "location", False, "GetBucketLocation"),
    ("PUT", "/b", "versioning", False, "PutBucketVersioning"),
    ("PUT", "/b", "lifecycle", False, "PutBucketLifecycleConfiguration"),
    ("DELETE", "/b", "lifecycle", False, "DeleteBucketLifecycle"),
    ("DELETE", "/b", "tagging", False, "DeleteBucketTagging"),
    ("PUT", "/b/k", "", False, "PutObject"),
    ("PUT", "/b/k", "", True, "CopyObject"),
    ("GET", "/b/k", "versionId=v1", False, "GetObject"),
    ("HEAD", "/b/k", "", False, "HeadObject"),
    ("DELETE", "/b/k", "", False, "DeleteObject"),
    ("POST", "/b/k", "uploads", False, "CreateMultipartUpload"),
    ("PUT", "/b/k", "uploadId=u&partNumber=1", False, "UploadPart"),
    ("PUT", "/b/k", "uploadId=u&partNumber=1", True, "UploadPartCopy"),
    ("POST", "/b/k", "uploadId=u", False, "CompleteMultipartUpload"),
    ("DELETE", "/b/k", "uploadId=u", False, "AbortMultipartUpload"),
    ("GET", "/b/k", "uploadId=u", False, "ListParts"),
    ("GET", "/b/k", "tagging", False, "GetObjectTagging"),
    ("PUT", "/b/k", "retention", False, "PutObjectRetention"),
    ("GET", "/b/k", "legal-hold", False, "GetObjectLegalHold"),
    ("GET", "/b/k", "attributes", False, "GetObjectAttributes"),
    ("PATCH", "/b/k", "", False, UNKNOWN),
    ("BREW", "/b", "", False, UNKNOWN),
])
def test_s3_names(method: str, path: str, query: str, copy: bool, name: str) -> None:
    assert s3(method, path, query, copy) == name


def test_every_s3_route_has_a_name() -> None:
    assert all(route.operation for route in ROUTES.values())
    assert len({route.operation for route in ROUTES.values()}) == len(ROUTES)


def test_undecodable_key_is_named_and_refused_later() -> None:
    request: Any = RequestLine("GET", "/b/%ff", "versionId=v1", {})
    line = parse_request_line(request)
    assert (line.operation, line.bucket) == ("GetObject", "b")
    assert line.error is not None and line.error.code == "InvalidURI"


def test_unserved_sub_resource_is_named_and_refused_with_501() -> None:
    request: Any = RequestLine("PUT", "/b", "website", {})
    line = parse_request_line(request)
    assert line.operation == "PutBucketWebsite"
    assert line.route is not None and line.route.handler is None
    assert line.refusal().code == "NotImplemented"
    unknown: Any = RequestLine("PATCH", "/b", "", {})
    assert parse_request_line(unknown).refusal().code == "MethodNotAllowed"


@pytest.mark.parametrize(("method", "path", "name"), [
    ("GET", "users", "admin:ListUsers"),
    ("POST", "users", "admin:CreateUser"),
    ("GET", "users/u-1", "admin:GetUser"),
    ("DELETE", "users/u-1", "admin:DeleteUser"),
    ("POST", "users/u-1/credentials", "admin:CreateUserCredential"),
    ("PUT", "users/u-1/grants/g-1", "admin:AttachUserGrant"),
    ("GET", "users/u-1/effective-grants", "admin:ListEffectiveGrants"),
    ("PUT", "teams/t/members/u", "admin:AddTeamMember"),
    ("DELETE", "teams/t/grants/g", "admin:DetachTeamGrant"),
    ("PUT", "credentials/AKIA", "admin:UpdateCredential"),
    ("GET", "me", "admin:GetCallerIdentity"),
    ("GET", "info", "admin:GetServerInfo"),
    ("GET", "stats", "admin:GetStorageStats"),
    ("POST", "presign", "admin:CreatePresignedUrl"),
    ("GET", "audit", "admin:GetAuditLog"),
    ("GET", "metrics", "admin:GetMetrics"),
    ("GET", "metrics/history", "admin:GetMetricsHistory"),
    ("GET", "health", "admin:Health"),
    ("POST", "maintenance/jobs", "admin:CreateJob"),
    ("GET", "maintenance/jobs/j-1", "admin:GetJob"),
    ("POST", "maintenance/jobs/j-1/pause", "admin:PauseJob"),
    ("DELETE", "replication/credentials/remote", "admin:DeleteReplicationCredential"),
    ("PUT", "settings/region", "admin:PutSetting"),
    ("GET", "users/", "admin:ListUsers"),
    ("GET", "nonsense/1/2/3", ADMIN_UNKNOWN),
    ("BREW", "users", ADMIN_UNKNOWN),
])
def test_admin_names(method: str, path: str, name: str) -> None:
    assert admin_operation(method, path.split("/")) == name
