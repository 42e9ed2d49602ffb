"""Authorization of S3 requests: the route's declared needs, the request's condition
values and the one decision (`Authorizer.authorize` -> `iam/decision.py`).

`authorize_request` runs at admission, before any body is read: it checks
`x-amz-expected-bucket-owner` (and `x-amz-source-expected-bucket-owner` of a copy), then
asks the decision for every need of the route (`route_needs.route_needs`) and refuses with
AccessDenied. A root caller skips the decision (the spec: root bypasses evaluation)
before anything is computed, so the hot path of root is what it was. `permits` asks the
same decision for one need from inside a handler, for what only the body or the stored
object names: each key of DeleteObjects, the lock headers a GET may show.

`RequestValues` reads condition keys from the request lazily: only a bucket policy
statement with a Condition asks.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl

from objstore.errors import S3Error
from objstore.http.ratelimit import peer_address
from objstore.http.site import ObjstoreRequest
from objstore.iam.acl_rules import Acl
from objstore.iam.bucket_policy import EXISTING_TAG_PREFIX
from objstore.iam.decision import Need
from objstore.iam.identity import Principal
from objstore.s3.copy_source import parse_copy_source
from objstore.s3.route_needs import route_needs

if TYPE_CHECKING:
    from objstore.s3.api import S3Services
    from objstore.s3.call import S3Call
    from objstore.s3.routes import RequestLine

EXPECTED_OWNER = "x-amz-expected-bucket-owner"
SOURCE_EXPECTED_OWNER = "x-amz-source-expected-bucket-owner"
_HEADER_KEYS = {
    "aws:referer": "referer", "aws:useragent": "user-agent",
    "s3:x-amz-acl": "x-amz-acl",
    "s3:x-amz-server-side-encryption": "x-amz-server-side-encryption",
    "s3:x-amz-server-side-encryption-aws-kms-key-id":
        "x-amz-server-side-encryption-aws-kms-key-id",
    "s3:x-amz-content-sha256": "x-amz-content-sha256",
    "s3:x-amz-copy-source": "x-amz-copy-source",
    "s3:x-amz-metadata-directive": "x-amz-metadata-directive",
    "s3:x-amz-storage-class": "x-amz-storage-class",
    "s3:x-amz-grant-read": "x-amz-grant-read", "s3:x-amz-grant-write": "x-amz-grant-write",
    "s3:x-amz-grant-read-acp": "x-amz-grant-read-acp",
    "s3:x-amz-grant-write-acp": "x-amz-grant-write-acp",
    "s3:x-amz-grant-full-control": "x-amz-grant-full-control",
    "s3:object-lock-mode": "x-amz-object-lock-mode",
    "s3:object-lock-retain-until-date": "x-amz-object-lock-retain-until-date",
    "s3:object-lock-legal-hold": "x-amz-object-lock-legal-hold",
}
_QUERY_KEYS = {"s3:prefix": "prefix", "s3:delimiter": "delimiter",
               "s3:max-keys": "max-keys", "s3:versionid": "versionId"}
EXISTING_TAG = EXISTING_TAG_PREFIX
REQUEST_TAG = "s3:requestobjecttag/"


class RequestValues:
    """The condition values of one request (`ConditionValues`), read when asked."""

    def __init__(self, request: ObjstoreRequest, query: Mapping[str, str],
                 principal: Principal, *, existing_tags: Mapping[str, str] | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        self._clock = clock or _now
        self._request = request
        self._query = query
        self._principal = principal
        self.existing_tags = existing_tags

    def get(self, key: str) -> tuple[str, ...] | None:
        key = key.lower()
        header = _HEADER_KEYS.get(key)
        if header is not None:
            value = self._request.header(header)
            return None if value is None else (value,)
        parameter = _QUERY_KEYS.get(key)
        if parameter is not None:
            found = self._query.get(parameter)
            return None if found is None else (found,)
        return self._special(key)

    def _special(self, key: str) -> tuple[str, ...] | None:
        principal = self._principal
        if key == "aws:sourceip":
            return (peer_address(self._request),)
        if key == "aws:securetransport":
            return ("true" if self._request.isSecure() else "false",)
        if key in ("aws:currenttime", "aws:epochtime"):
            now = self._clock()
            if key == "aws:epochtime":
                return (str(int(now)),)
            stamp = datetime.datetime.fromtimestamp(now, datetime.UTC)
            return (stamp.strftime("%Y-%m-%dT%H:%M:%SZ"),)
        if key == "aws:principaltype":
            return ("Anonymous" if principal.anonymous else "User",)
        if key in ("aws:username", "aws:userid", "aws:principalarn"):
            if principal.anonymous:
                return None
            if key == "aws:username":
                return (principal.username,)
            if key == "aws:userid":
                return (principal.user_id,)
            return (f"arn:aws:iam::000000000000:user/{principal.username}",)
        if key in ("s3:signatureversion", "s3:authtype"):
            return self._auth(key)
        if key.startswith(REQUEST_TAG) or key == "s3:requestobjecttagkeys":
            tags = dict(parse_qsl(self._request.header("x-amz-tagging") or "",
                                  keep_blank_values=True))
            if key == "s3:requestobjecttagkeys":
                return tuple(tags) or None
            value = tags.get(key[len(REQUEST_TAG):])
            return None if value is None else (value,)
        if key.startswith(EXISTING_TAG):
            if self.existing_tags is None:
                return None
            found = self.existing_tags.get(key[len(EXISTING_TAG):])
            return None if found is None else (found,)
        return None

    def _auth(self, key: str) -> tuple[str, ...] | None:
        if self._principal.anonymous:
            return None
        presigned = "X-Amz-Signature" in self._query or "Signature" in self._query
        if key == "s3:authtype":
            return ("REST-QUERY-STRING" if presigned else "REST-HEADER",)
        v2 = "Signature" in self._query or (
            (self._request.header("authorization") or "").startswith("AWS "))
        return ("AWS" if v2 else "AWS4-HMAC-SHA256",)


def _now() -> float:
    return datetime.datetime.now(datetime.UTC).timestamp()


async def authorize_request(services: S3Services, request: ObjstoreRequest,
                            line: RequestLine, principal: Principal) -> None:
    """Refuse (AccessDenied) the request unless its caller may do what its route needs."""
    route = line.route
    assert route is not None
    await check_expected_owners(services, request, line)
    if principal.is_root or route.per_key:
        return
    needs = route_needs(route.action, line.bucket, line.key, line.query, request.header,
                        route.extra)
    if not await _decide(services, request, line.query, principal, needs):
        raise S3Error("AccessDenied")


async def permits_needs(services: S3Services, request: ObjstoreRequest,
                        principal: Principal, needs: tuple[Need, ...]) -> bool:
    """The decision for needs known only after admission, before the call exists (a form
    upload's key, read from its body)."""
    if principal.is_root:
        return True
    return await _decide(services, request, {}, principal, needs)


async def permits(call: S3Call, need: Need) -> bool:
    """The decision for one need of a request already admitted (per key, per header)."""
    if call.principal.is_root:
        return True
    return await _decide(call.services, call.request, call.query, call.principal, (need,))


async def _decide(services: S3Services, request: ObjstoreRequest, query: Mapping[str, str],
                  principal: Principal, needs: tuple[Need, ...]) -> bool:
    authorizer = services.authorizer
    values = RequestValues(request, query, principal)
    first = needs[0]
    if first.key:
        hit, access = authorizer.cached_bucket_access(first.bucket)
        if not hit:
            access = await authorizer.bucket_access(first.bucket)
        if access is not None and access.policy is not None \
                and access.policy.reads_existing_tags:
            values.existing_tags = await _existing_tags(services, first, query)
    caller = None if principal.anonymous else principal
    decision = await authorizer.authorize(caller, needs, values)
    if decision.allowed:
        return True
    wanted = await authorizer.object_acl_wanted(decision)
    if wanted is None:
        return False
    acl = await _object_acl(services, request, query, first, *wanted)
    if acl is None:
        return False
    return (await authorizer.authorize(caller, needs, values, {wanted: acl})).allowed


async def _object_acl(services: S3Services, request: ObjstoreRequest,
                      query: Mapping[str, str], first: Need, bucket: str, key: str
                      ) -> Acl | None:
    """The stored ACL of the version a need names (the request's `versionId` for its
    own key, a copy source's version for the source, else the latest); None without one."""
    version_id = None
    if (bucket, key) == (first.bucket, first.key):
        version_id = query.get("versionId")
    else:
        try:
            source = parse_copy_source(request.header("x-amz-copy-source") or "")
        except S3Error:
            source = None
        if source is not None and (source.bucket, source.key) == (bucket, key):
            version_id = source.version_id
    try:
        record = await services.objects.head(bucket, key, version_id or None)
    except S3Error:
        return None
    return Acl.from_json(record.acl) if record.acl else None


async def _existing_tags(services: S3Services, need: Need, query: Mapping[str, str]
                         ) -> Mapping[str, str] | None:
    try:
        record = await services.objects.head(need.bucket, need.key, query.get("versionId"))
    except S3Error:
        return None
    return record.tags


async def check_expected_owners(services: S3Services, request: ObjstoreRequest,
                                line: RequestLine) -> None:
    """`x-amz-expected-bucket-owner` (and the copy source's) must name the bucket's owner:
    403 AccessDenied otherwise, as AWS answers. A missing bucket is left to the handler."""
    expected = request.header(EXPECTED_OWNER)
    if expected is not None and line.bucket:
        await _owner_is(services, line.bucket, expected)
    source_expected = request.header(SOURCE_EXPECTED_OWNER)
    copy_source = request.header("x-amz-copy-source")
    if source_expected is not None and copy_source:
        try:
            source = parse_copy_source(copy_source)
        except S3Error:
            return
        await _owner_is(services, source.bucket, source_expected)


async def _owner_is(services: S3Services, bucket: str, expected: str) -> None:
    access = await services.authorizer.bucket_access(bucket)
    if access is not None and access.owner_id != expected.strip():
        raise S3Error("AccessDenied")
