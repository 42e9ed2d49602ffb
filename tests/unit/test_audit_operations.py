"""Operation names: S3 names from the dispatch key, admin names from the path, and a
bounded set of names whatever a client sends."""

from __future__ import annotations

import pytest

from objstore.audit.operations import (
    ADMIN_UNKNOWN,
    S3_OPERATIONS,
    UNKNOWN,
    admin_operation,
    s3_operation,
)
from objstore.s3.api import ROUTES, SUBRESOURCES


def s3(method: str, path: str, query: str = "", copy: bool = False) -> str:
    bucket, _, key = path.lstrip("/").partition("/")
    pairs = [item.partition("=") for item in query.split("&") if item]
    return s3_operation(method, bucket, key, {k: v for k, _, v in pairs}, SUBRESOURCES,
                        copy_source=copy)


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
    assert set(ROUTES) <= set(S3_OPERATIONS)


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
