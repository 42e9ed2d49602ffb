"""Operation names of requests, by table: S3 names (GetObject, ListObjectsV2,
CompleteMultipartUpload, ...) from the route key the S3 API dispatches on, (method, target,
sub-resource), and admin names (admin:CreateUser, ...) from the method and the path pattern
below /admin.

The names label audit entries and metric series, so the set of names must stay bounded
whatever a client sends: a request no table knows gets a fixed fallback name, never a
client-chosen string. Pure functions; no Twisted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

UNKNOWN = "Unknown"
ADMIN_UNKNOWN = "admin:Unknown"
ADMIN_HEALTH = "admin:Health"
ADMIN_METRICS = "admin:GetMetrics"

_CRUD = {"GET": "Get", "PUT": "Put", "DELETE": "Delete"}


def _crud(target: str, sub: str, noun: str, methods: str = "GET PUT DELETE"
          ) -> dict[tuple[str, str, str | None], str]:
    return {(m, target, sub): f"{_CRUD[m]}{noun}" for m in methods.split()}


S3_OPERATIONS: dict[tuple[str, str, str | None], str] = {
    ("GET", "service", None): "ListBuckets",
    ("PUT", "bucket", None): "CreateBucket",
    ("HEAD", "bucket", None): "HeadBucket",
    ("DELETE", "bucket", None): "DeleteBucket",
    ("GET", "bucket", None): "ListObjects",
    ("GET", "bucket", "location"): "GetBucketLocation",
    ("POST", "bucket", "delete"): "DeleteObjects",
    ("GET", "bucket", "uploads"): "ListMultipartUploads",
    ("GET", "bucket", "versions"): "ListObjectVersions",
    ("GET", "bucket", "policyStatus"): "GetBucketPolicyStatus",
    ("PUT", "object", None): "PutObject",
    ("GET", "object", None): "GetObject",
    ("HEAD", "object", None): "HeadObject",
    ("DELETE", "object", None): "DeleteObject",
    ("GET", "object", "attributes"): "GetObjectAttributes",
    ("POST", "object", "uploads"): "CreateMultipartUpload",
    ("PUT", "object", "uploadId"): "UploadPart",
    ("POST", "object", "uploadId"): "CompleteMultipartUpload",
    ("DELETE", "object", "uploadId"): "AbortMultipartUpload",
    ("GET", "object", "uploadId"): "ListParts",
    ("POST", "object", "restore"): "RestoreObject",
    ("POST", "object", "select"): "SelectObjectContent",
    ("GET", "object", "torrent"): "GetObjectTorrent",
    **_crud("bucket", "versioning", "BucketVersioning", "GET PUT"),
    **_crud("bucket", "tagging", "BucketTagging"),
    **_crud("bucket", "lifecycle", "BucketLifecycleConfiguration", "GET PUT"),
    ("DELETE", "bucket", "lifecycle"): "DeleteBucketLifecycle",
    **_crud("bucket", "encryption", "BucketEncryption"),
    **_crud("bucket", "object-lock", "ObjectLockConfiguration", "GET PUT"),
    **_crud("bucket", "notification", "BucketNotificationConfiguration", "GET PUT"),
    **_crud("bucket", "replication", "BucketReplication"),
    **_crud("bucket", "acl", "BucketAcl", "GET PUT"),
    **_crud("bucket", "cors", "BucketCors"),
    **_crud("bucket", "policy", "BucketPolicy"),
    **_crud("bucket", "website", "BucketWebsite"),
    **_crud("bucket", "logging", "BucketLogging", "GET PUT"),
    **_crud("bucket", "accelerate", "BucketAccelerateConfiguration", "GET PUT"),
    **_crud("bucket", "requestPayment", "BucketRequestPayment", "GET PUT"),
    **_crud("bucket", "ownershipControls", "BucketOwnershipControls"),
    **_crud("bucket", "publicAccessBlock", "PublicAccessBlock"),
    **_crud("bucket", "analytics", "BucketAnalyticsConfiguration"),
    **_crud("bucket", "inventory", "BucketInventoryConfiguration"),
    **_crud("bucket", "metrics", "BucketMetricsConfiguration"),
    **_crud("bucket", "intelligent-tiering", "BucketIntelligentTieringConfiguration"),
    **_crud("object", "tagging", "ObjectTagging"),
    **_crud("object", "acl", "ObjectAcl", "GET PUT"),
    **_crud("object", "retention", "ObjectRetention", "GET PUT"),
    **_crud("object", "legal-hold", "ObjectLegalHold", "GET PUT"),
}

# Refinements of a route by a header or query flag, as AWS names them.
_COPY_VARIANTS = {"PutObject": "CopyObject", "UploadPart": "UploadPartCopy"}


def s3_target(bucket: str, key: str) -> str:
    return "object" if key else ("bucket" if bucket else "service")


def s3_operation(
    method: str,
    bucket: str,
    key: str,
    query: Mapping[str, str],
    subresources: Sequence[str],
    *,
    copy_source: bool = False,
) -> str:
    """The S3 operation name of a request. `subresources` is the S3 API's priority list
    of sub-resource query flags (the first present one selects the route)."""
    sub = next((name for name in subresources if name in query), None)
    name = S3_OPERATIONS.get((method, s3_target(bucket, key), sub), UNKNOWN)
    if copy_source:
        name = _COPY_VARIANTS.get(name, name)
    if name == "ListObjects" and query.get("list-type") == "2":
        name = "ListObjectsV2"
    return name


# (method, path pattern below /admin) -> name; "*" matches one path segment.
_ADMIN_TABLE: tuple[tuple[str, str, str], ...] = (
    ("GET", "health", "Health"),
    ("HEAD", "health", "Health"),
    ("GET", "info", "GetServerInfo"),
    ("GET", "stats", "GetStorageStats"),
    ("GET", "me", "GetCallerIdentity"),
    ("POST", "presign", "CreatePresignedUrl"),
    ("POST", "archive", "CreateArchive"),
    ("GET", "credentials", "ListCredentials"),
    ("POST", "credentials", "CreateCredential"),
    ("PUT", "credentials/*", "UpdateCredential"),
    ("DELETE", "credentials/*", "DeleteCredential"),
    ("GET", "users", "ListUsers"),
    ("POST", "users", "CreateUser"),
    ("GET", "users/*", "GetUser"),
    ("PUT", "users/*", "UpdateUser"),
    ("DELETE", "users/*", "DeleteUser"),
    ("GET", "users/*/credentials", "ListUserCredentials"),
    ("POST", "users/*/credentials", "CreateUserCredential"),
    ("GET", "users/*/grants", "ListUserGrants"),
    ("PUT", "users/*/grants/*", "AttachUserGrant"),
    ("DELETE", "users/*/grants/*", "DetachUserGrant"),
    ("GET", "users/*/teams", "ListUserTeams"),
    ("GET", "users/*/effective-grants", "ListEffectiveGrants"),
    ("GET", "teams", "ListTeams"),
    ("POST", "teams", "CreateTeam"),
    ("GET", "teams/*", "GetTeam"),
    ("PUT", "teams/*", "UpdateTeam"),
    ("DELETE", "teams/*", "DeleteTeam"),
    ("GET", "teams/*/members", "ListTeamMembers"),
    ("PUT", "teams/*/members/*", "AddTeamMember"),
    ("DELETE", "teams/*/members/*", "RemoveTeamMember"),
    ("GET", "teams/*/grants", "ListTeamGrants"),
    ("PUT", "teams/*/grants/*", "AttachTeamGrant"),
    ("DELETE", "teams/*/grants/*", "DetachTeamGrant"),
    ("GET", "grants", "ListGrants"),
    ("POST", "grants", "CreateGrant"),
    ("GET", "grants/*", "GetGrant"),
    ("PUT", "grants/*", "UpdateGrant"),
    ("DELETE", "grants/*", "DeleteGrant"),
    ("GET", "maintenance/jobs", "ListJobs"),
    ("POST", "maintenance/jobs", "CreateJob"),
    ("GET", "maintenance/jobs/*", "GetJob"),
    ("DELETE", "maintenance/jobs/*", "CancelJob"),
    ("POST", "maintenance/jobs/*/pause", "PauseJob"),
    ("POST", "maintenance/jobs/*/resume", "ResumeJob"),
    ("GET", "cluster", "GetClusterStatus"),
    ("GET", "audit", "GetAuditLog"),
    ("GET", "metrics", "GetMetrics"),
    ("GET", "metrics/history", "GetMetricsHistory"),
    ("GET", "notifications/events", "ListNotificationEvents"),
    ("POST", "notifications/test-webhook", "TestWebhook"),
    ("GET", "replication/journal", "ListReplicationJournal"),
    ("POST", "replication/credentials/*", "PutReplicationCredential"),
    ("DELETE", "replication/credentials/*", "DeleteReplicationCredential"),
    ("POST", "replication/retry/*", "RetryReplication"),
    ("GET", "settings", "ListSettings"),
    ("GET", "settings/*", "GetSetting"),
    ("PUT", "settings/*", "PutSetting"),
    ("DELETE", "settings/*", "DeleteSetting"),
    ("GET", "export", "ExportConfiguration"),
    ("POST", "import", "ImportConfiguration"),
    ("GET", "buckets/*/quota", "GetBucketQuota"),
    ("PUT", "buckets/*/quota", "PutBucketQuota"),
    ("DELETE", "buckets/*/quota", "DeleteBucketQuota"),
)

ADMIN_OPERATIONS: dict[tuple[str, tuple[str, ...]], str] = {
    (method, tuple(pattern.split("/"))): f"admin:{name}" for method, pattern, name in _ADMIN_TABLE
}


def admin_operation(method: str, segments: Sequence[str]) -> str:
    """The admin operation name of `method` on /admin/<segments...>."""
    parts = [s for s in segments if s]
    for candidate in _patterns(parts):
        name = ADMIN_OPERATIONS.get((method, candidate))
        if name is not None:
            return name
    return ADMIN_UNKNOWN


def _patterns(parts: list[str]) -> list[tuple[str, ...]]:
    """Literal segments first, then with ids wildcarded: the tables' paths alternate a
    word and an id (users/*/grants/*), after a one-word or a two-word family
    (maintenance/jobs/*/pause)."""
    one_word = tuple("*" if i % 2 == 1 else p for i, p in enumerate(parts))
    two_word = tuple("*" if i >= 2 and i % 2 == 0 else p for i, p in enumerate(parts))
    return [tuple(parts), one_word, two_word]
