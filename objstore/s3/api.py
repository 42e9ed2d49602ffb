"""The S3 REST API: one Klein app whose single branch route authenticates the caller and
dispatches by table on (method, target, sub-resource).

Targets are "service" (no bucket), "bucket" and "object". The sub-resource is the first
known S3 query flag present, in a fixed priority order (uploadId before everything, so
UploadPart/UploadPartCopy are never mistaken for PutObject/CopyObject). Known
sub-resources without a handler answer 501 NotImplemented; an unknown combination of
method and target answers 405 MethodNotAllowed. Every error is S3 XML whose RequestId
equals the x-amz-request-id header; nothing else ever reaches the client.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote

from klein import Klein
from twisted.internet.defer import CancelledError
from twisted.logger import Logger
from twisted.python.failure import Failure

from objstore.audit.context import note_error
from objstore.engine.bucket_config import BucketConfigService
from objstore.engine.buckets import BucketService
from objstore.engine.lifecycle import LifecycleService
from objstore.engine.multipart import MultipartService
from objstore.engine.objects import ObjectService
from objstore.engine.versions import VersionService
from objstore.errors import RETRY_AFTER_SECONDS, S3Error
from objstore.http.authn import Authenticator
from objstore.http.ratelimit import RequestRateLimits, peer_address
from objstore.http.shield import client_gone, shielded
from objstore.http.site import ObjstoreRequest
from objstore.iam.authorizer import Authorizer, bucket_arn, object_arn
from objstore.s3 import (
    acl,
    attributes,
    buckets,
    copy,
    delete_objects,
    lifecycle,
    listing,
    multipart,
    object_lock,
    objects,
    tagging,
    versioning,
)
from objstore.s3.call import S3Call, S3Response
from objstore.s3.unsupported import refuse_unsupported_headers
from objstore.s3.xml import error_document

log = Logger()

Handler = Callable[[S3Call], Awaitable[S3Response]]

# Priority order matters: see the module docstring.
SUBRESOURCES = (
    "uploadId", "uploads", "delete", "versioning", "versions", "tagging", "location",
    "lifecycle", "encryption", "object-lock", "retention", "legal-hold", "notification",
    "replication", "attributes", "acl", "cors", "policy", "policyStatus", "website",
    "logging", "accelerate", "requestPayment", "ownershipControls", "publicAccessBlock",
    "analytics", "inventory", "metrics", "intelligent-tiering", "restore", "select",
    "torrent",
)


@dataclass(frozen=True)
class Route:
    handler: Handler
    action: str | None  # None: the handler authorizes (per key, or more than one action)


async def put_object_or_copy(call: S3Call) -> S3Response:
    """PUT /b/k is CopyObject when it names a copy source (UploadPartCopy, which also has
    an uploadId, was routed to multipart by its sub-resource)."""
    if call.header("x-amz-copy-source") is not None:
        return await copy.copy_object(call)
    return await objects.put_object(call)


ROUTES: dict[tuple[str, str, str | None], Route] = {
    ("GET", "service", None): Route(buckets.list_buckets, "s3:ListAllMyBuckets"),
    ("PUT", "bucket", None): Route(buckets.create_bucket, "s3:CreateBucket"),
    ("HEAD", "bucket", None): Route(buckets.head_bucket, "s3:ListBucket"),
    ("DELETE", "bucket", None): Route(buckets.delete_bucket, "s3:DeleteBucket"),
    ("GET", "bucket", "location"): Route(buckets.get_location, "s3:GetBucketLocation"),
    ("GET", "bucket", None): Route(listing.list_objects, "s3:ListBucket"),
    ("PUT", "object", None): Route(put_object_or_copy, "s3:PutObject"),
    ("GET", "object", None): Route(objects.get_object, "s3:GetObject"),
    ("HEAD", "object", None): Route(objects.head_object, "s3:GetObject"),
    ("DELETE", "object", None): Route(objects.delete_object, "s3:DeleteObject"),
    ("POST", "bucket", "delete"): Route(delete_objects.delete_objects, None),
    ("GET", "object", "attributes"): Route(attributes.get_object_attributes, None),
    ("GET", "bucket", "acl"): Route(acl.get_bucket_acl, "s3:GetBucketAcl"),
    ("PUT", "bucket", "acl"): Route(acl.put_bucket_acl, "s3:PutBucketAcl"),
    ("GET", "object", "acl"): Route(acl.get_object_acl, "s3:GetObjectAcl"),
    ("PUT", "object", "acl"): Route(acl.put_object_acl, "s3:PutObjectAcl"),
    ("POST", "object", "uploads"): Route(multipart.create_upload, "s3:PutObject"),
    ("PUT", "object", "uploadId"): Route(multipart.upload_part, "s3:PutObject"),
    ("POST", "object", "uploadId"): Route(multipart.complete_upload, "s3:PutObject"),
    ("DELETE", "object", "uploadId"): Route(multipart.abort_upload, "s3:AbortMultipartUpload"),
    ("GET", "object", "uploadId"): Route(multipart.list_parts, "s3:ListMultipartUploadParts"),
    ("GET", "bucket", "uploads"): Route(multipart.list_uploads, "s3:ListBucketMultipartUploads"),
    ("GET", "bucket", "versioning"): Route(versioning.get_versioning, "s3:GetBucketVersioning"),
    ("PUT", "bucket", "versioning"): Route(versioning.put_versioning, "s3:PutBucketVersioning"),
    ("GET", "bucket", "versions"): Route(versioning.list_object_versions,
                                         "s3:ListBucketVersions"),
    ("GET", "bucket", "object-lock"): Route(object_lock.get_lock_configuration,
                                            "s3:GetBucketObjectLockConfiguration"),
    ("PUT", "bucket", "object-lock"): Route(object_lock.put_lock_configuration,
                                            "s3:PutBucketObjectLockConfiguration"),
    ("GET", "object", "retention"): Route(object_lock.get_retention, "s3:GetObjectRetention"),
    ("PUT", "object", "retention"): Route(object_lock.put_retention, "s3:PutObjectRetention"),
    ("GET", "object", "legal-hold"): Route(object_lock.get_legal_hold, "s3:GetObjectLegalHold"),
    ("PUT", "object", "legal-hold"): Route(object_lock.put_legal_hold, "s3:PutObjectLegalHold"),
    ("GET", "object", "tagging"): Route(tagging.get_object_tagging, "s3:GetObjectTagging"),
    ("PUT", "object", "tagging"): Route(tagging.put_object_tagging, "s3:PutObjectTagging"),
    ("DELETE", "object", "tagging"): Route(tagging.delete_object_tagging,
                                           "s3:DeleteObjectTagging"),
    ("GET", "bucket", "tagging"): Route(tagging.get_bucket_tagging, "s3:GetBucketTagging"),
    ("PUT", "bucket", "tagging"): Route(tagging.put_bucket_tagging, "s3:PutBucketTagging"),
    ("DELETE", "bucket", "tagging"): Route(tagging.delete_bucket_tagging, "s3:PutBucketTagging"),
    ("PUT", "bucket", "lifecycle"): Route(lifecycle.put_lifecycle, "s3:PutLifecycleConfiguration"),
    ("GET", "bucket", "lifecycle"): Route(lifecycle.get_lifecycle, "s3:GetLifecycleConfiguration"),
    ("DELETE", "bucket", "lifecycle"): Route(lifecycle.delete_lifecycle,
                                             "s3:PutLifecycleConfiguration"),
}


@dataclass(frozen=True)
class S3Services:
    buckets: BucketService
    objects: ObjectService
    multipart: MultipartService
    authorizer: Authorizer
    bucket_config: BucketConfigService
    versions: VersionService
    lifecycle: LifecycleService


def split_target(request: ObjstoreRequest) -> tuple[str, str]:
    """(bucket, key) from the path, after any virtual-host rewrite (request.vhost_bucket)."""
    raw_path = request.path.decode("utf-8", "surrogateescape")
    vhost_bucket = getattr(request, "vhost_bucket", None)
    if vhost_bucket:
        return vhost_bucket, _decode_key(raw_path[1:])
    bucket, _, key = raw_path[1:].partition("/")
    return unquote(bucket), _decode_key(key)


def _decode_key(raw: str) -> str:
    try:
        return unquote(raw, errors="strict")
    except UnicodeDecodeError:
        raise S3Error("InvalidURI") from None


def parse_query(request: ObjstoreRequest) -> dict[str, str]:
    raw = request.uri.partition(b"?")[2].decode("utf-8", "surrogateescape")
    query: dict[str, str] = {}
    for name, value in parse_qsl(raw, keep_blank_values=True):
        query.setdefault(name, value)
    return query


def select_route(method: str, bucket: str, key: str, query: dict[str, str]) -> Route:
    target = "object" if key else ("bucket" if bucket else "service")
    sub = next((name for name in SUBRESOURCES if name in query), None)
    route = ROUTES.get((method, target, sub))
    if route is not None:
        return route
    if sub is not None:
        raise S3Error("NotImplemented", f"The {sub} sub-resource is not implemented.")
    raise S3Error("MethodNotAllowed", Method=method, ResourceType=target.upper())


class S3Api:
    app = Klein()

    def __init__(
        self,
        services: S3Services,
        authenticator: Authenticator,
        rate_limits: RequestRateLimits | None = None,
    ) -> None:
        self._services = services
        self._authenticator = authenticator
        self._rate_limits = rate_limits or RequestRateLimits.disabled()

    def resource(self) -> object:
        return self.app.resource()

    @app.route("/", branch=True)  # every method: unknown ones get S3 MethodNotAllowed
    async def dispatch(self, request: ObjstoreRequest) -> bytes:
        try:
            response = await shielded(self._serve(request), request.objstore_site.hold)
        except S3Error as error:
            return render_error(request, error)
        except CancelledError:
            return b""  # the client left; the work itself ran to its end
        except Exception:
            log.failure("unhandled error serving {uri}", uri=request.uri)
            return render_error(request, S3Error("InternalError"))
        if client_gone(request):
            return b""
        return await self._send(request, response)

    async def _serve(self, request: ObjstoreRequest) -> S3Response:
        if not self._rate_limits.allow_address(peer_address(request)):
            raise S3Error("SlowDown")
        if request.early_error is not None:
            raise request.early_error
        principal = await self._authenticator.authenticate(request)
        if not self._rate_limits.allow_credential(principal.access_key):
            raise S3Error("SlowDown")
        method = request.method.decode("ascii", "replace")
        bucket, key = split_target(request)
        query = parse_query(request)
        route = select_route(method, bucket, key, query)
        refuse_unsupported_headers(
            name.decode("latin-1") for name, _ in request.requestHeaders.getAllRawHeaders())
        resource = object_arn(bucket, key) if key else (bucket_arn(bucket) if bucket else "*")
        if route.action is not None:
            await self._services.authorizer.check(principal, route.action, resource, query=query)
        call = S3Call(request, principal, self._services, bucket, key, query)
        return await route.handler(call)

    async def _send(self, request: ObjstoreRequest, response: S3Response) -> bytes:
        request.setResponseCode(response.status)
        for name, value in response.headers.items():
            request.setHeader(name, value)
        if response.stream is not None:
            await response.stream.start()
            return b""
        if response.content_type:
            request.setHeader("Content-Type", response.content_type)
        if "Content-Length" not in response.headers:
            request.setHeader("Content-Length", str(len(response.body)))
        return response.body

    @app.handle_errors(Exception)
    def unexpected(self, request: ObjstoreRequest, failure: Failure) -> bytes:
        log.failure("unhandled error in S3 routing", failure)
        return render_error(request, S3Error("InternalError"))


def render_error(request: ObjstoreRequest, error: S3Error) -> bytes:
    request.setResponseCode(error.status)
    note_error(request, error.code)
    for name, value in error.headers.items():
        request.setHeader(name, value)
    if error.status == 503:
        request.setHeader("Retry-After", str(RETRY_AFTER_SECONDS))
    if error.status == 304 or request.method == b"HEAD":
        request.setHeader("Content-Length", "0")
        return b""
    body = error_document(error.code, error.message, request.request_id, request.host_id,
                          error.fields)
    request.setHeader("Content-Type", "application/xml")
    request.setHeader("Content-Length", str(len(body)))
    return body
