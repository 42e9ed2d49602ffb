"""Authentication of S3 and admin requests, in two steps: SigV4 (header or presigned) of
the request line and headers against the stored credential (`authenticate_headers`), then
the integrity of the body the client claimed (`verify_body`: payload hash, chunk
signatures, Content-MD5, x-amz-checksum-*).

The first step runs before any byte of a body is read (the site asks the API when the
headers are complete); its result, `VerifiedHeaders`, is carried to the second, which runs
once the body has arrived: the signature is verified once. Nothing has been stored when
either runs, so a refusal changes nothing.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime
import hashlib
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qs

from objstore.audit.context import note_access_key, note_user
from objstore.blobs.plan import IDENTITY, StagePlan
from objstore.crypto.customer_key import CustomerKey
from objstore.errors import S3Error
from objstore.http import post_policy, sigv2, sigv4
from objstore.http.checksum_headers import PREFIX, claimed_algorithm, is_checksum_claim
from objstore.http.client_bytes import decimal
from objstore.http.form_data import FormDecoder
from objstore.http.site import ObjstoreRequest
from objstore.http.spool import BodySpool
from objstore.iam.identity import ANONYMOUS, IdentityResolver, Principal, ResolvedCredential

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


@dataclass(frozen=True, slots=True)
class VerifiedHeaders:
    """What authenticating a request's line and headers established: the caller, the
    claims, the request as signed and, once the signature has been checked, the context
    its chunk signatures are checked in. `context` is None only for a request whose
    signature covers the SHA-256 of its body (a generic signer without
    x-amz-content-sha256, admin API only): that one is checked with the body."""

    principal: Principal
    auth: sigv4.AuthRequest
    view: sigv4.RequestView
    context: sigv4.SigningContext | None
    credential: ResolvedCredential = field(repr=False)  # holds the secret: never printed
    # The stages of the body (blobs/plan.py), decided by the API's admission.
    stage_plan: StagePlan = IDENTITY
    # "AWS4-HMAC-SHA256" or "AWS" (SigV2), as the s3:signatureversion condition key reads.
    signature_version: str = sigv4.ALGORITHM
    # Checksums the body's sink computes although the client claimed none (a staged
    # multipart part's upload checksum: a staged body can not be read back).
    body_checksums: tuple[str, ...] = ()
    # An SSE-C request's key (crypto/customer_key.py): memory only, never printed.
    customer_key: CustomerKey | None = field(default=None, repr=False)

    @property
    def hash_body(self) -> bool:
        """The body's SHA-256 is needed although the client did not claim one."""
        return self.context is None


def request_view(request: ObjstoreRequest) -> sigv4.RequestView:
    uri = request.uri.decode("utf-8", "surrogateescape")
    raw_path, _, raw_query = uri.partition("?")
    headers: dict[str, str] = {}
    for name, values in request.requestHeaders.getAllRawHeaders():
        key = name.decode("latin-1").lower()
        headers[key] = ",".join(v.decode("utf-8", "surrogateescape") for v in values)
    return sigv4.RequestView(
        method=request.method.decode("ascii", "replace"),
        raw_path=raw_path,
        raw_query=raw_query,
        headers=headers,
    )


class Authenticator:
    def __init__(
        self,
        identities: IdentityResolver,
        *,
        regions: Collection[str] | Callable[[], Collection[str]],
        now: Callable[[], datetime.datetime],
        signature_v2: bool = True,
    ) -> None:
        self._identities = identities
        fixed = frozenset(regions) if not callable(regions) else frozenset()
        # The regions a credential scope may name, read per request (the region setting
        # changes without a restart).
        self._regions_of: Callable[[], Collection[str]] = (
            regions if callable(regions) else (lambda: fixed))
        self._now = now
        self._signature_v2 = signature_v2

    async def authenticate_headers(
        self, request: ObjstoreRequest, *, payload_header_required: bool = True,
        signature_v2: bool = True,
        anonymous: bool = False,
    ) -> VerifiedHeaders:
        """The verified caller of `request`, from its line and headers alone. Without
        `payload_header_required`, a header-signed request may omit x-amz-content-sha256:
        its signature is then checked by `verify_body`, with the body's SHA-256.
        SigV2 is accepted when both the node's setting and `signature_v2` allow it (the
        admin API never does: SigV2 does not sign the body). With `anonymous` (the S3 API),
        an unsigned request is the ANONYMOUS caller, whom only bucket policies and ACLs may
        allow anything; otherwise it is refused."""
        view = request_view(request)
        if signature_v2 and self._signature_v2 and sigv2.is_v2(view):
            return await self._authenticate_v2(request, view)
        try:
            auth = sigv4.parse_auth(view, payload_header_required=payload_header_required)
        except sigv4.SigV4Error as exc:
            raise S3Error(exc.code, exc.message) from None
        if auth is None:
            if anonymous:
                return anonymous_headers(view, self._now())
            raise S3Error("AccessDenied", "Anonymous access is not allowed.")
        note_access_key(request, auth.access_key)
        resolved = await self._identities.resolve(auth.access_key)
        if resolved is None:
            raise S3Error("InvalidAccessKeyId", AWSAccessKeyId=auth.access_key)
        try:
            sigv4.check_claims(auth, view, self._now(), self._regions_of())
            context = (None if auth.payload_from_body
                       else sigv4.verify_signature(auth, view, resolved.secret_key))
        except sigv4.SigV4Error as exc:
            raise S3Error(exc.code, exc.message) from None
        if context is not None:
            note_user(request, resolved.principal.user_id, resolved.principal.username)
        return VerifiedHeaders(resolved.principal, auth, view, context, resolved)

    async def _authenticate_v2(self, request: ObjstoreRequest, view: sigv4.RequestView
                               ) -> VerifiedHeaders:
        """A SigV2 request (header or presigned): its signature covers no body, so the body
        is checked only against what the client claimed (Content-MD5, a hex
        x-amz-content-sha256, x-amz-checksum-*); an aws-chunked body is SigV4's alone."""
        try:
            auth = sigv2.parse_auth_v2(view)
            claimed = view.headers.get("x-amz-content-sha256", "").strip()
            if claimed in sigv4.STREAMING_PAYLOADS:
                raise sigv4.SigV4Error("InvalidRequest", "aws-chunked bodies need SigV4.")
        except sigv4.SigV4Error as exc:
            raise S3Error(exc.code, exc.message) from None
        note_access_key(request, auth.access_key)
        resolved = await self._identities.resolve(auth.access_key)
        if resolved is None:
            raise S3Error("InvalidAccessKeyId", AWSAccessKeyId=auth.access_key)
        now = self._now()
        try:
            sigv2.verify_v2(auth, view, resolved.secret_key, now,
                            getattr(request, "vhost_bucket", None))
        except sigv4.SigV4Error as exc:
            raise S3Error(exc.code, exc.message) from None
        note_user(request, resolved.principal.user_id, resolved.principal.username)
        # The SigV4 vocabulary the body checks read: no scope, no chunk signatures (the
        # context's empty key verifies none), the claimed payload hash if any.
        shape = sigv4.AuthRequest(
            access_key=auth.access_key, amz_date=now, amz_date_str="", scope_date="",
            region="", service=sigv4.SERVICE, signed_headers=(), signature="",
            payload_hash=claimed if sigv4.payload_hash_is_hex(claimed)
            else sigv4.UNSIGNED_PAYLOAD,
            presigned=auth.presigned, expires_seconds=None)
        context = sigv4.SigningContext(b"", "", "", "")
        return VerifiedHeaders(resolved.principal, shape, view, context, resolved,
                               signature_version=sigv2.SCHEME)

    async def authenticate_form(self, request: ObjstoreRequest, fields: Mapping[str, str],
                                bucket: str, file_length: int) -> Principal:
        """The caller of a form upload (POST Object), from its fields once the body has
        arrived: the signature of its POST policy (SigV4, or SigV2 where the node accepts
        it), then every condition of the policy. An unsigned form (no signature fields) is
        the ANONYMOUS caller: only a bucket policy or ACL allowing anyone s3:PutObject
        lets it write (the S3 API's decision, as for any anonymous request)."""
        auth = post_policy.parse_form_auth(fields)
        if auth is None:
            return ANONYMOUS
        if auth.version == post_policy.SIGV2 and not self._signature_v2:
            raise S3Error("InvalidRequest", "The authorization mechanism you have provided is "
                                            "not supported. Please use AWS4-HMAC-SHA256.")
        post_policy.check_form_scope(auth, self._regions_of())
        note_access_key(request, auth.access_key)
        resolved = await self._identities.resolve(auth.access_key)
        if resolved is None:
            raise S3Error("InvalidAccessKeyId", AWSAccessKeyId=auth.access_key)
        post_policy.verify_form_signature(auth, resolved.secret_key)
        note_user(request, resolved.principal.user_id, resolved.principal.username)
        policy = post_policy.parse_policy(auth.policy_b64)
        post_policy.check_policy(policy, fields, bucket, file_length, self._now())
        return resolved.principal

    async def verify_body(
        self, request: ObjstoreRequest, verified: VerifiedHeaders, *,
        body_describes_object: bool | None = None,
    ) -> Principal:
        """Check what the client claimed about the body it sent (and the signature, when it
        covers the body's hash); the caller is then proven. `body_describes_object`: the
        request's x-amz-checksum-* headers describe the object being assembled, not the body
        (the S3 API knows from its route; None: decided from the request here)."""
        view, auth, context = verified.view, verified.auth, verified.context
        if body_describes_object is None:
            body_describes_object = checksums_describe_object(view)
        if request.spool is not None:
            await request.spool.digests_ready()  # a large body is hashed off-thread
        try:
            if context is None:  # the signature is over the body's hash: checks the body
                hashed = dataclasses.replace(auth, payload_hash=_body_sha256(request.spool))
                context = sigv4.verify_signature(hashed, view, verified.credential.secret_key)
                note_user(request, verified.principal.user_id, verified.principal.username)
            verify_payload(request.spool, auth, context, view.headers,
                           body_checksums=not body_describes_object)
        except sigv4.SigV4Error as exc:
            raise S3Error(exc.code, exc.message) from None
        return verified.principal


def anonymous_headers(view: sigv4.RequestView, now: datetime.datetime) -> VerifiedHeaders:
    """What an unsigned request establishes: the anonymous caller and its body claims
    (x-amz-content-sha256, Content-MD5, checksums are still checked; nothing is signed)."""
    claimed = view.headers.get("x-amz-content-sha256", sigv4.UNSIGNED_PAYLOAD).strip()
    auth = sigv4.AuthRequest(
        access_key="", amz_date=now, amz_date_str="", scope_date="", region="",
        service="s3", signed_headers=(), signature="", payload_hash=claimed or
        sigv4.UNSIGNED_PAYLOAD, presigned=False, expires_seconds=None)
    context = sigv4.SigningContext(b"", "", "", "")
    credential = ResolvedCredential(ANONYMOUS, "")
    return VerifiedHeaders(ANONYMOUS, auth, view, context, credential)


def _body_sha256(spool: BodySpool | None) -> str:
    if spool is None or spool.length == 0:
        return EMPTY_SHA256
    if spool.too_large:
        raise S3Error("EntityTooLarge")
    if spool.sha256_hex is None:  # the site hashes every body whose signature covers it
        raise S3Error("InternalError")
    return spool.sha256_hex


def verify_payload(
    spool: BodySpool | None,
    auth: sigv4.AuthRequest,
    context: sigv4.SigningContext,
    headers: Mapping[str, str],
    *,
    body_checksums: bool = True,
) -> None:
    """Check every claim the client made about the body; raise S3Error on the first lie.
    `body_checksums` False: the x-amz-checksum-* headers describe something else."""
    if spool is None:
        if sigv4.payload_hash_is_hex(auth.payload_hash) and auth.payload_hash != EMPTY_SHA256:
            raise S3Error("XAmzContentSHA256Mismatch")
        return
    if spool.too_large:
        raise S3Error("EntityTooLarge")
    if spool.error is not None:
        raise S3Error(spool.error.code, spool.error.message)
    claimed = headers.get("x-amz-content-sha256", auth.payload_hash)
    if sigv4.payload_hash_is_hex(claimed) and claimed != spool.sha256_hex:
        raise S3Error("XAmzContentSHA256Mismatch", ClientComputedContentSHA256=claimed,
                      S3ComputedContentSHA256=spool.sha256_hex or "")
    if isinstance(spool.decoder, FormDecoder):  # a form upload is verified by its policy
        raise S3Error("InternalError")
    if spool.decoder is not None:
        sigv4.verify_chunk_signatures(context, spool.decoder)
        _verify_announced_trailers(spool.decoder, headers.get("x-amz-trailer"))
        declared = decimal(headers.get("x-amz-decoded-content-length", "").strip())
        if declared is not None and declared != spool.length:
            raise S3Error("IncompleteBody")
    _verify_content_md5(spool, headers.get("content-md5"))
    if body_checksums:
        _verify_checksums(spool, headers)


def checksums_describe_object(view: sigv4.RequestView) -> bool:
    """CompleteMultipartUpload (POST ?uploadId) carries x-amz-checksum-* of the whole
    object being assembled, not of its XML body; the multipart engine checks them."""
    query = parse_qs(view.raw_query, keep_blank_values=True)
    return view.method == "POST" and "uploadId" in query


def _verify_announced_trailers(decoder: sigv4.AwsChunkedDecoder, announced: str | None) -> None:
    """Unsigned trailers are protected by nothing but this: every trailer the headers
    announced must have arrived."""
    for name in (announced or "").split(","):
        name = name.strip().lower()
        if name and name not in decoder.trailers:
            raise S3Error("MalformedTrailerError", f"The announced trailer {name} is missing.")


def _verify_content_md5(spool: BodySpool, claimed: str | None) -> None:
    if claimed is None:
        return
    try:
        digest = base64.b64decode(claimed.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise S3Error("InvalidDigest") from None
    if len(digest) != 16:
        raise S3Error("InvalidDigest")
    if digest != spool.md5_digest:
        raise S3Error("BadDigest")


def _verify_checksums(spool: BodySpool, headers: Mapping[str, str]) -> None:
    trailers = spool.decoder.trailers if spool.decoder is not None else {}
    check_checksum_claims(spool, list(headers.items()) + list(trailers.items()), "header")


def check_checksum_claims(spool: BodySpool, fields: Iterable[tuple[str, str]],
                          noun: str) -> None:
    """The x-amz-checksum-* claims among `fields` (request headers and trailers, or a
    form's fields: `noun` names them in the message) against what the spool computed:
    at most one, of an algorithm the spool knows, equal to its value (else BadDigest)."""
    claims = {name: value for name, value in fields if is_checksum_claim(name)}
    if len(claims) > 1:
        raise S3Error("InvalidRequest", f"Expecting a single x-amz-checksum- {noun}.")
    for name, value in claims.items():
        algorithm = name[len(PREFIX):]
        computed = spool.checksum_b64(algorithm)
        if computed is None:
            raise S3Error("InvalidRequest", f"Unsupported checksum algorithm {algorithm}.")
        if value.strip() != computed:
            raise S3Error("BadDigest", f"The {algorithm.upper()} you specified did not match "
                                       "the calculated checksum.")


def claimed_checksums(spool: BodySpool | None, headers: Mapping[str, str]) -> dict[str, str]:
    """The verified checksums to store with the object, by algorithm name."""
    if spool is None:
        return {}
    trailers = spool.decoder.trailers if spool.decoder is not None else {}
    found: dict[str, str] = {}
    for name in list(headers) + list(trailers):
        algorithm = claimed_algorithm(name)
        value = spool.checksum_b64(algorithm) if algorithm else None
        if algorithm and value is not None:
            found[algorithm] = value
    return found
