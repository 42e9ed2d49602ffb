"""Operation names of admin requests (admin:CreateUser, ...), by table from the method and
the path pattern below /admin, and the fallback names. S3 requests are named by their
route (`objstore.s3.routes`), which the S3 API notes on the request before anything can
refuse it.

The names label audit entries and metric series, so the set of names must stay bounded
whatever a client sends: a request no table knows gets a fixed fallback name, never a
client-chosen string. Pure functions; no Twisted.
"""

from __future__ import annotations

from collections.abc import Sequence

UNKNOWN = "Unknown"
ADMIN_UNKNOWN = "admin:Unknown"
ADMIN_HEALTH = "admin:Health"
ADMIN_METRICS = "admin:GetMetrics"

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
