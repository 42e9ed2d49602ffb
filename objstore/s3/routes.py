"""The S3 route table and the parsing of a request line into the key it is routed by.

A route is chosen by (method, target, sub-resource). Targets are "service" (no bucket),
"bucket" and "object". The sub-resource is the first known S3 query flag present, in a
fixed priority order (uploadId before everything, so UploadPart/UploadPartCopy are never
mistaken for PutObject/CopyObject).

Every route says whether it mutates (`_read`, `_write`): the S3 dispatcher asks the cluster
write gate before the handler of every route that does (tests/unit/test_s3_route_gate.py
checks the table). Every route names its operation (GetObject, CompleteMultipartUpload,
...): the name the audit log and the request metrics record, and the name an event would
carry. Operations S3 defines but this version does not serve are in the table without a
handler, so their requests are named too and answer 501 NotImplemented. The set of names
is bounded whatever a client sends: a request no route knows is named `UNKNOWN`.

`parse_request_line` reads the path and the query once per request, before anything else
runs, and never raises: a request refused before routing (rate limit, authentication) is
named like any other, and a path or query that can not be decoded (percent-encoding that
is not UTF-8) is kept as an error, InvalidURI, to raise in its turn (after authentication).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote

from objstore.audit.context import note_operation
from objstore.audit.operations import UNKNOWN
from objstore.errors import S3Error
from objstore.http.site import ObjstoreRequest
from objstore.s3 import (
    acl,
    attributes,
    bucket_encryption,
    buckets,
    copy,
    delete_objects,
    lifecycle,
    listing,
    multipart,
    object_lock,
    objects,
    replication,
    tagging,
    versioning,
)
from objstore.s3.call import S3Call, S3Response

Handler = Callable[[S3Call], Awaitable[S3Response]]
RouteKey = tuple[str, str, "str | None"]

# Priority order matters: see the module docstring.
SUBRESOURCES = (
    "uploadId", "uploads", "delete", "versioning", "versions", "tagging", "location",
    "lifecycle", "encryption", "object-lock", "retention", "legal-hold", "notification",
    "replication", "attributes", "acl", "cors", "policy", "policyStatus", "website",
    "logging", "accelerate", "requestPayment", "ownershipControls", "publicAccessBlock",
    "analytics", "inventory", "metrics", "intelligent-tiering", "restore", "select",
    "torrent",
)


@dataclass(frozen=True, slots=True)
class Route:
    handler: Handler | None  # None: an S3 operation this version does not serve (501)
    action: str | None  # None: the handler authorizes (per key, or more than one action)
    operation: str
    # The operation's name when the request names a copy source (CopyObject,
    # UploadPartCopy), as AWS names them.
    copy_operation: str | None = None
    # Whether the operation changes anything (data, a bucket, its configuration, tags,
    # locks, an upload). Required of every route: the dispatcher asks the cluster write
    # gate before the handler of each one that does (s3/api.py), and only of those.
    mutates: bool = field(kw_only=True)


def _read(handler: Handler, action: str | None, operation: str,
          copy_operation: str | None = None) -> Route:
    return Route(handler, action, operation, copy_operation, mutates=False)


def _write(handler: Handler, action: str | None, operation: str,
           copy_operation: str | None = None) -> Route:
    return Route(handler, action, operation, copy_operation, mutates=True)


async def put_object_or_copy(call: S3Call) -> S3Response:
    """PUT /b/k is CopyObject when it names a copy source (UploadPartCopy, which also has
    an uploadId, was routed to multipart by its sub-resource)."""
    if call.header("x-amz-copy-source") is not None:
        return await copy.copy_object(call)
    return await objects.put_object(call)


_CRUD = {"GET": "Get", "PUT": "Put", "DELETE": "Delete"}


def _not_served(target: str, sub: str, noun: str, methods: str = "GET PUT DELETE"
                ) -> dict[RouteKey, Route]:
    return {(m, target, sub): Route(None, None, f"{_CRUD[m]}{noun}", mutates=m != "GET")
            for m in methods.split()}


ROUTES: dict[RouteKey, Route] = {
    ("GET", "service", None): _read(buckets.list_buckets, "s3:ListAllMyBuckets", "ListBuckets"),
    ("PUT", "bucket", None): _write(buckets.create_bucket, "s3:CreateBucket", "CreateBucket"),
    ("HEAD", "bucket", None): _read(buckets.head_bucket, "s3:ListBucket", "HeadBucket"),
    ("DELETE", "bucket", None): _write(buckets.delete_bucket, "s3:DeleteBucket", "DeleteBucket"),
    ("GET", "bucket", "location"): _read(buckets.get_location, "s3:GetBucketLocation",
                                         "GetBucketLocation"),
    ("GET", "bucket", None): _read(listing.list_objects, "s3:ListBucket", "ListObjects"),
    ("PUT", "object", None): _write(put_object_or_copy, "s3:PutObject", "PutObject",
                                   copy_operation="CopyObject"),
    ("GET", "object", None): _read(objects.get_object, "s3:GetObject", "GetObject"),
    ("HEAD", "object", None): _read(objects.head_object, "s3:GetObject", "HeadObject"),
    ("DELETE", "object", None): _write(objects.delete_object, "s3:DeleteObject", "DeleteObject"),
    ("POST", "bucket", "delete"): _write(delete_objects.delete_objects, None, "DeleteObjects"),
    ("GET", "object", "attributes"): _read(attributes.get_object_attributes, None,
                                           "GetObjectAttributes"),
    ("GET", "bucket", "acl"): _read(acl.get_bucket_acl, "s3:GetBucketAcl", "GetBucketAcl"),
    ("PUT", "bucket", "acl"): _write(acl.put_bucket_acl, "s3:PutBucketAcl", "PutBucketAcl"),
    ("GET", "object", "acl"): _read(acl.get_object_acl, "s3:GetObjectAcl", "GetObjectAcl"),
    ("PUT", "object", "acl"): _write(acl.put_object_acl, "s3:PutObjectAcl", "PutObjectAcl"),
    ("POST", "object", "uploads"): _write(multipart.create_upload, "s3:PutObject",
                                         "CreateMultipartUpload"),
    ("PUT", "object", "uploadId"): _write(multipart.upload_part, "s3:PutObject", "UploadPart",
                                         copy_operation="UploadPartCopy"),
    ("POST", "object", "uploadId"): _write(multipart.complete_upload, "s3:PutObject",
                                          "CompleteMultipartUpload"),
    ("DELETE", "object", "uploadId"): _write(multipart.abort_upload, "s3:AbortMultipartUpload",
                                            "AbortMultipartUpload"),
    ("GET", "object", "uploadId"): _read(multipart.list_parts, "s3:ListMultipartUploadParts",
                                         "ListParts"),
    ("GET", "bucket", "uploads"): _read(multipart.list_uploads, "s3:ListBucketMultipartUploads",
                                        "ListMultipartUploads"),
    ("GET", "bucket", "versioning"): _read(versioning.get_versioning, "s3:GetBucketVersioning",
                                           "GetBucketVersioning"),
    ("PUT", "bucket", "versioning"): _write(versioning.put_versioning, "s3:PutBucketVersioning",
                                           "PutBucketVersioning"),
    ("GET", "bucket", "versions"): _read(versioning.list_object_versions,
                                         "s3:ListBucketVersions", "ListObjectVersions"),
    ("GET", "bucket", "object-lock"): _read(object_lock.get_lock_configuration,
                                            "s3:GetBucketObjectLockConfiguration",
                                            "GetObjectLockConfiguration"),
    ("PUT", "bucket", "object-lock"): _write(object_lock.put_lock_configuration,
                                            "s3:PutBucketObjectLockConfiguration",
                                            "PutObjectLockConfiguration"),
    ("GET", "object", "retention"): _read(object_lock.get_retention, "s3:GetObjectRetention",
                                          "GetObjectRetention"),
    ("PUT", "object", "retention"): _write(object_lock.put_retention, "s3:PutObjectRetention",
                                          "PutObjectRetention"),
    ("GET", "object", "legal-hold"): _read(object_lock.get_legal_hold, "s3:GetObjectLegalHold",
                                           "GetObjectLegalHold"),
    ("PUT", "object", "legal-hold"): _write(object_lock.put_legal_hold, "s3:PutObjectLegalHold",
                                           "PutObjectLegalHold"),
    ("GET", "object", "tagging"): _read(tagging.get_object_tagging, "s3:GetObjectTagging",
                                        "GetObjectTagging"),
    ("PUT", "object", "tagging"): _write(tagging.put_object_tagging, "s3:PutObjectTagging",
                                        "PutObjectTagging"),
    ("DELETE", "object", "tagging"): _write(tagging.delete_object_tagging,
                                           "s3:DeleteObjectTagging", "DeleteObjectTagging"),
    ("GET", "bucket", "tagging"): _read(tagging.get_bucket_tagging, "s3:GetBucketTagging",
                                        "GetBucketTagging"),
    ("PUT", "bucket", "tagging"): _write(tagging.put_bucket_tagging, "s3:PutBucketTagging",
                                        "PutBucketTagging"),
    ("DELETE", "bucket", "tagging"): _write(tagging.delete_bucket_tagging, "s3:PutBucketTagging",
                                           "DeleteBucketTagging"),
    ("PUT", "bucket", "lifecycle"): _write(lifecycle.put_lifecycle, "s3:PutLifecycleConfiguration",
                                          "PutBucketLifecycleConfiguration"),
    ("GET", "bucket", "lifecycle"): _read(lifecycle.get_lifecycle, "s3:GetLifecycleConfiguration",
                                          "GetBucketLifecycleConfiguration"),
    ("DELETE", "bucket", "lifecycle"): _write(lifecycle.delete_lifecycle,
                                             "s3:PutLifecycleConfiguration",
                                             "DeleteBucketLifecycle"),
    ("PUT", "bucket", "encryption"): _write(bucket_encryption.put_bucket_encryption,
                                           "s3:PutBucketEncryption",
                                           "PutBucketEncryption"),
    ("GET", "bucket", "encryption"): _read(bucket_encryption.get_bucket_encryption,
                                           "s3:GetBucketEncryption",
                                           "GetBucketEncryption"),
    ("DELETE", "bucket", "encryption"): _write(bucket_encryption.delete_bucket_encryption,
                                              "s3:DeleteBucketEncryption",
                                              "DeleteBucketEncryption"),
    ("PUT", "bucket", "replication"): _write(replication.put_replication,
                                            "s3:PutReplicationConfiguration",
                                            "PutBucketReplication"),
    ("GET", "bucket", "replication"): _read(replication.get_replication,
                                            "s3:GetReplicationConfiguration",
                                            "GetBucketReplication"),
    ("DELETE", "bucket", "replication"): _write(replication.delete_replication,
                                               "s3:PutReplicationConfiguration",
                                               "DeleteBucketReplication"),
    # Known to S3, not served by this version: named, answered 501.
    ("GET", "bucket", "policyStatus"): Route(None, None, "GetBucketPolicyStatus",
                                             mutates=False),
    ("POST", "object", "restore"): Route(None, None, "RestoreObject", mutates=True),
    ("POST", "object", "select"): Route(None, None, "SelectObjectContent", mutates=False),
    ("GET", "object", "torrent"): Route(None, None, "GetObjectTorrent", mutates=False),
    **_not_served("bucket", "notification", "BucketNotificationConfiguration", "GET PUT"),
    **_not_served("bucket", "cors", "BucketCors"),
    **_not_served("bucket", "policy", "BucketPolicy"),
    **_not_served("bucket", "website", "BucketWebsite"),
    **_not_served("bucket", "logging", "BucketLogging", "GET PUT"),
    **_not_served("bucket", "accelerate", "BucketAccelerateConfiguration", "GET PUT"),
    **_not_served("bucket", "requestPayment", "BucketRequestPayment", "GET PUT"),
    **_not_served("bucket", "ownershipControls", "BucketOwnershipControls"),
    **_not_served("bucket", "publicAccessBlock", "PublicAccessBlock"),
    **_not_served("bucket", "analytics", "BucketAnalyticsConfiguration"),
    **_not_served("bucket", "inventory", "BucketInventoryConfiguration"),
    **_not_served("bucket", "metrics", "BucketMetricsConfiguration"),
    **_not_served("bucket", "intelligent-tiering", "BucketIntelligentTieringConfiguration"),
}


@dataclass(slots=True)
class RequestLine:
    """What the request line and the query say, parsed once: the target, the query, the
    route (None: no route for this key) and the operation's name."""

    method: str
    bucket: str
    key: str
    query: dict[str, str]
    sub: str | None
    route: Route | None
    operation: str
    error: S3Error | None = None  # the path could not be decoded (raised after auth)

    @property
    def target(self) -> str:
        return target_of(self.bucket, self.key)

    def refusal(self) -> S3Error:
        """Why no handler serves this request: 501 for a known sub-resource, else 405."""
        if self.sub is not None:
            return S3Error("NotImplemented", f"The {self.sub} sub-resource is not implemented.")
        return S3Error("MethodNotAllowed", Method=self.method, ResourceType=self.target.upper())


def target_of(bucket: str, key: str) -> str:
    return "object" if key else ("bucket" if bucket else "service")


def parse_request_line(request: ObjstoreRequest) -> RequestLine:
    """The request line of `request`, noted for the audit log and the metrics."""
    line = read_request_line(request)
    note_operation(request, line.operation, line.bucket, line.key, audited_ids(line.query))
    return line


def read_request_line(request: ObjstoreRequest) -> RequestLine:
    method = request.method.decode("ascii", "replace")
    error = None
    try:
        bucket, key = split_target(request)
    except S3Error as refused:  # an undecodable key: name the request by what can be read
        error = refused
        bucket, _, key = unquote(request.path.decode("latin-1")[1:]).partition("/")
    try:
        query = parse_query(request)
    except S3Error as refused:  # route it by what can be read, refuse it in its turn
        error = error or refused
        query = parse_query(request, errors="replace")
    sub = next((name for name in SUBRESOURCES if name in query), None)
    route = ROUTES.get((method, target_of(bucket, key), sub))
    operation = UNKNOWN if route is None else operation_name(route, query, request)
    return RequestLine(method, bucket, key, query, sub, route, operation, error)


def audited_ids(query: Mapping[str, str]) -> dict[str, str] | None:
    """The ids a request names that the audit log keeps (never the rest of the query)."""
    version_id, upload_id = query.get("versionId"), query.get("uploadId")
    if not (version_id or upload_id):
        return None
    ids = {}
    if version_id:
        ids["version_id"] = version_id
    if upload_id:
        ids["upload_id"] = upload_id
    return ids


def operation_name(route: Route, query: Mapping[str, str], request: ObjstoreRequest) -> str:
    """The route's operation, refined as AWS names it by a copy source or list-type=2."""
    if (route.copy_operation is not None
            and request.requestHeaders.hasHeader(b"x-amz-copy-source")):
        return route.copy_operation
    if route.operation == "ListObjects" and query.get("list-type") == "2":
        return "ListObjectsV2"
    return route.operation


def split_target(request: ObjstoreRequest) -> tuple[str, str]:
    """(bucket, key) from the path, after any virtual-host rewrite (request.vhost_bucket);
    S3Error InvalidURI when its percent-encoding is not UTF-8."""
    raw_path = request.path.decode("utf-8", "surrogateescape")
    vhost_bucket = getattr(request, "vhost_bucket", None)
    if vhost_bucket:
        return vhost_bucket, _decoded(raw_path[1:])
    bucket, _, key = raw_path[1:].partition("/")
    return _decoded(bucket), _decoded(key)


def _decoded(raw: str) -> str:
    try:
        return unquote(raw, errors="strict")
    except UnicodeError:
        raise S3Error("InvalidURI") from None


def parse_query(request: ObjstoreRequest, errors: str = "strict") -> dict[str, str]:
    """The query's parameters, the first value of each; S3Error InvalidURI when a name or
    value is not UTF-8 (unless `errors` says how to replace what is not)."""
    _, mark, raw = request.uri.partition(b"?")
    if not mark:
        return {}
    query: dict[str, str] = {}
    try:
        pairs = parse_qsl(raw.decode("utf-8", errors), keep_blank_values=True, errors=errors)
    except UnicodeError:
        raise S3Error("InvalidURI") from None
    for name, value in pairs:
        query.setdefault(name, value)
    return query
