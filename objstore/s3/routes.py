"""The S3 route table and the parsing of a request line into the key it is routed by.

A route is chosen by (method, target, sub-resource). Targets are "service" (no bucket),
"bucket" and "object". The sub-resource is the first known S3 query flag present, in a
fixed priority order (uploadId before everything, so UploadPart/UploadPartCopy are never
mistaken for PutObject/CopyObject).

Every route declares the action it needs (`action`, on the request's bucket or object ARN,
its version variant with a versionId) and, where the request's headers add actions as on
AWS, an `extra` rule (`route_needs.py`): the S3 API authorizes exactly these before the
handler runs, through the one decision (`iam/decision.py`), so no handler authorizes by
hand. DeleteObjects is `per_key`: its keys are in the body, each checked as DeleteObject
(tests/unit/test_s3_route_needs.py enumerates the table).

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
    bucket_policy,
    buckets,
    copy,
    cors,
    delete_objects,
    lifecycle,
    listing,
    multipart,
    notification,
    object_lock,
    objects,
    post_object,
    replication,
    tagging,
    versioning,
)
from objstore.s3.call import S3Call, S3Response
from objstore.s3.route_needs import (
    ExtraNeeds,
    attributes_needs,
    create_bucket_needs,
    create_upload_needs,
    put_object_needs,
    upload_part_needs,
)

Handler = Callable[[S3Call], Awaitable[S3Response]]
RouteKey = tuple[str, str, "str | None"]

# Priority order matters: see the module docstring.
SUBRESOURCES = (
    "uploadId", "uploads", "delete", "versioning", "versions", "tagging", "location",
    "lifecycle", "encryption", "object-lock", "retention", "legal-hold", "notification",
    "replication", "attributes", "acl", "cors", "policy", "policyStatus", "website",
    "logging", "accelerate", "requestPayment", "ownershipControls", "publicAccessBlock",
    "analytics", "inventory", "metrics", "intelligent-tiering", "restore", "select",
    "torrent", "metadataTable", "metadataConfiguration", "session", "renameObject",
)


@dataclass(frozen=True, slots=True)
class Route:
    handler: Handler | None  # None: an S3 operation this version does not serve (501)
    action: str  # the AWS action the request needs on its bucket or object
    operation: str
    # The operation's name when the request names a copy source (CopyObject,
    # UploadPartCopy), as AWS names them.
    copy_operation: str | None = None
    # Whether the operation changes anything (data, a bucket, its configuration, tags,
    # locks, an upload). Required of every route: the dispatcher asks the cluster write
    # gate before the handler of each one that does (s3/api.py), and only of those.
    mutates: bool = field(kw_only=True)
    # Further actions the request's headers imply (tags, lock, ACL, copy source, ...).
    extra: ExtraNeeds | None = field(default=None, kw_only=True)
    # The action is checked per key of the body (DeleteObjects), not at admission.
    per_key: bool = field(default=False, kw_only=True)


def _read(handler: Handler, action: str, operation: str,
          copy_operation: str | None = None, *, extra: ExtraNeeds | None = None) -> Route:
    return Route(handler, action, operation, copy_operation, mutates=False, extra=extra)


def _write(handler: Handler, action: str, operation: str,
           copy_operation: str | None = None, *, extra: ExtraNeeds | None = None) -> Route:
    return Route(handler, action, operation, copy_operation, mutates=True, extra=extra)


async def put_object_or_copy(call: S3Call) -> S3Response:
    """PUT /b/k is CopyObject when it names a copy source (UploadPartCopy, which also has
    an uploadId, was routed to multipart by its sub-resource)."""
    if call.header("x-amz-copy-source") is not None:
        return await copy.copy_object(call)
    return await objects.put_object(call)


_CRUD = {"GET": "Get", "PUT": "Put", "DELETE": "Delete"}


def _not_served(target: str, sub: str, noun: str, get: str, put: str,
                delete: str | None = None, methods: str = "GET PUT DELETE"
                ) -> dict[RouteKey, Route]:
    """Routes of an S3 operation this version does not serve, with the actions AWS checks
    (a DELETE usually needs the Put action)."""
    actions = {"GET": get, "PUT": put, "DELETE": delete or put}
    return {(m, target, sub): Route(None, actions[m], f"{_CRUD[m]}{noun}",
                                    mutates=m != "GET")
            for m in methods.split()}


ROUTES: dict[RouteKey, Route] = {
    ("GET", "service", None): _read(buckets.list_buckets, "s3:ListAllMyBuckets", "ListBuckets"),
    ("PUT", "bucket", None): _write(buckets.create_bucket, "s3:CreateBucket", "CreateBucket",
                                    extra=create_bucket_needs),
    ("HEAD", "bucket", None): _read(buckets.head_bucket, "s3:ListBucket", "HeadBucket"),
    ("DELETE", "bucket", None): _write(buckets.delete_bucket, "s3:DeleteBucket", "DeleteBucket"),
    ("GET", "bucket", "location"): _read(buckets.get_location, "s3:GetBucketLocation",
                                         "GetBucketLocation"),
    ("GET", "bucket", None): _read(listing.list_objects, "s3:ListBucket", "ListObjects"),
    ("PUT", "object", None): _write(put_object_or_copy, "s3:PutObject", "PutObject",
                                   copy_operation="CopyObject", extra=put_object_needs),
    ("GET", "object", None): _read(objects.get_object, "s3:GetObject", "GetObject"),
    ("HEAD", "object", None): _read(objects.head_object, "s3:GetObject", "HeadObject"),
    ("DELETE", "object", None): _write(objects.delete_object, "s3:DeleteObject", "DeleteObject"),
    # A browser's form upload: authenticated by the policy in its body, then authorized
    # for s3:PutObject (and what its tagging and lock fields add) on the key the form
    # names (s3/api.py, `_form_caller`): its action is never checked at admission.
    ("POST", "bucket", None): _write(post_object.post_object, "s3:PutObject", "PostObject"),
    ("POST", "bucket", "delete"): Route(delete_objects.delete_objects, "s3:DeleteObject",
                                        "DeleteObjects", mutates=True, per_key=True),
    ("GET", "object", "attributes"): _read(attributes.get_object_attributes,
                                           "s3:GetObjectAttributes", "GetObjectAttributes",
                                           extra=attributes_needs),
    ("GET", "bucket", "acl"): _read(acl.get_bucket_acl, "s3:GetBucketAcl", "GetBucketAcl"),
    ("PUT", "bucket", "acl"): _write(acl.put_bucket_acl, "s3:PutBucketAcl", "PutBucketAcl"),
    ("GET", "object", "acl"): _read(acl.get_object_acl, "s3:GetObjectAcl", "GetObjectAcl"),
    ("PUT", "object", "acl"): _write(acl.put_object_acl, "s3:PutObjectAcl", "PutObjectAcl"),
    ("POST", "object", "uploads"): _write(multipart.create_upload, "s3:PutObject",
                                         "CreateMultipartUpload", extra=create_upload_needs),
    ("PUT", "object", "uploadId"): _write(multipart.upload_part, "s3:PutObject", "UploadPart",
                                         copy_operation="UploadPartCopy",
                                         extra=upload_part_needs),
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
    ("PUT", "bucket", "cors"): _write(cors.put_bucket_cors, "s3:PutBucketCORS", "PutBucketCors"),
    ("GET", "bucket", "cors"): _read(cors.get_bucket_cors, "s3:GetBucketCORS", "GetBucketCors"),
    ("DELETE", "bucket", "cors"): _write(cors.delete_bucket_cors, "s3:PutBucketCORS",
                                        "DeleteBucketCors"),
    ("PUT", "bucket", "notification"): _write(notification.put_bucket_notification,
                                             "s3:PutBucketNotification",
                                             "PutBucketNotificationConfiguration"),
    ("GET", "bucket", "notification"): _read(notification.get_bucket_notification,
                                             "s3:GetBucketNotification",
                                             "GetBucketNotificationConfiguration"),
    ("PUT", "bucket", "policy"): _write(bucket_policy.put_bucket_policy, "s3:PutBucketPolicy",
                                       "PutBucketPolicy"),
    ("GET", "bucket", "policy"): _read(bucket_policy.get_bucket_policy, "s3:GetBucketPolicy",
                                       "GetBucketPolicy"),
    ("DELETE", "bucket", "policy"): _write(bucket_policy.delete_bucket_policy,
                                          "s3:DeleteBucketPolicy", "DeleteBucketPolicy"),
    ("GET", "bucket", "policyStatus"): _read(bucket_policy.get_bucket_policy_status,
                                             "s3:GetBucketPolicyStatus",
                                             "GetBucketPolicyStatus"),
    ("PUT", "bucket", "publicAccessBlock"): _write(bucket_policy.put_public_access_block,
                                                  "s3:PutBucketPublicAccessBlock",
                                                  "PutPublicAccessBlock"),
    ("GET", "bucket", "publicAccessBlock"): _read(bucket_policy.get_public_access_block,
                                                  "s3:GetBucketPublicAccessBlock",
                                                  "GetPublicAccessBlock"),
    ("DELETE", "bucket", "publicAccessBlock"): _write(
        bucket_policy.delete_public_access_block, "s3:PutBucketPublicAccessBlock",
        "DeletePublicAccessBlock"),
    ("PUT", "bucket", "ownershipControls"): _write(bucket_policy.put_ownership_controls,
                                                  "s3:PutBucketOwnershipControls",
                                                  "PutBucketOwnershipControls"),
    ("GET", "bucket", "ownershipControls"): _read(bucket_policy.get_ownership_controls,
                                                  "s3:GetBucketOwnershipControls",
                                                  "GetBucketOwnershipControls"),
    ("DELETE", "bucket", "ownershipControls"): _write(
        bucket_policy.delete_ownership_controls, "s3:PutBucketOwnershipControls",
        "DeleteBucketOwnershipControls"),
    # Known to S3, not served by this version: named, answered 501.
    ("POST", "object", "restore"): Route(None, "s3:RestoreObject", "RestoreObject",
                                         mutates=True),
    ("POST", "object", "select"): Route(None, "s3:GetObject", "SelectObjectContent",
                                        mutates=False),
    ("GET", "object", "torrent"): Route(None, "s3:GetObjectTorrent", "GetObjectTorrent",
                                        mutates=False),
    **_not_served("bucket", "website", "BucketWebsite", "s3:GetBucketWebsite",
                  "s3:PutBucketWebsite", "s3:DeleteBucketWebsite"),
    **_not_served("bucket", "logging", "BucketLogging", "s3:GetBucketLogging",
                  "s3:PutBucketLogging", methods="GET PUT"),
    **_not_served("bucket", "accelerate", "BucketAccelerateConfiguration",
                  "s3:GetAccelerateConfiguration", "s3:PutAccelerateConfiguration",
                  methods="GET PUT"),
    **_not_served("bucket", "requestPayment", "BucketRequestPayment",
                  "s3:GetBucketRequestPayment", "s3:PutBucketRequestPayment",
                  methods="GET PUT"),
    **_not_served("bucket", "analytics", "BucketAnalyticsConfiguration",
                  "s3:GetAnalyticsConfiguration", "s3:PutAnalyticsConfiguration"),
    **_not_served("bucket", "inventory", "BucketInventoryConfiguration",
                  "s3:GetInventoryConfiguration", "s3:PutInventoryConfiguration"),
    **_not_served("bucket", "metrics", "BucketMetricsConfiguration",
                  "s3:GetMetricsConfiguration", "s3:PutMetricsConfiguration"),
    **_not_served("bucket", "intelligent-tiering", "BucketIntelligentTieringConfiguration",
                  "s3:GetIntelligentTieringConfiguration",
                  "s3:PutIntelligentTieringConfiguration"),
    **_not_served("bucket", "metadataTable", "BucketMetadataTableConfiguration",
                  "s3:GetBucketMetadataTableConfiguration",
                  "s3:CreateBucketMetadataTableConfiguration",
                  "s3:DeleteBucketMetadataTableConfiguration", methods="GET DELETE"),
    ("POST", "bucket", "metadataTable"): Route(
        None, "s3:CreateBucketMetadataTableConfiguration",
        "CreateBucketMetadataTableConfiguration", mutates=True),
    **_not_served("bucket", "metadataConfiguration", "BucketMetadataConfiguration",
                  "s3:GetBucketMetadataTableConfiguration",
                  "s3:CreateBucketMetadataTableConfiguration",
                  "s3:DeleteBucketMetadataTableConfiguration", methods="GET DELETE"),
    ("POST", "bucket", "metadataConfiguration"): Route(
        None, "s3:CreateBucketMetadataTableConfiguration",
        "CreateBucketMetadataConfiguration", mutates=True),
    ("GET", "bucket", "session"): Route(None, "s3express:CreateSession", "CreateSession",
                                        mutates=False),
    ("PUT", "object", "renameObject"): Route(None, "s3express:RenameObject", "RenameObject",
                                            mutates=True),
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
