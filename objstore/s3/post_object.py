"""POST Object: a browser's form upload (POST /bucket, multipart/form-data).

The body is decoded as it streams in (http/form_data.py: the file part goes to the spool,
the other fields are kept, bounded); the S3 API admits such a request without
authentication (the signature is in the body), and once the body is complete the
authenticator verifies the form's signed POST policy (http/post_policy.py, every
condition) and the authorizer is asked for s3:PutObject on the key the form names, before
`post_object` stores anything. The key may hold `${filename}` (the file part's name).

The form's fields stand for a PutObject's headers: Content-Type, Cache-Control,
Content-Disposition, Content-Encoding, Expires, x-amz-meta-*, x-amz-storage-class,
x-amz-checksum-* (checked against the file), x-amz-object-lock-*, acl (owner-only canned
ACLs, as PutObject), tagging (a Tagging XML document). Server-side encryption fields are
refused (501): the body's stages are chosen before it arrives (a bucket's default
encryption applies). The answer is AWS's: 204 by default,
success_action_status 200 or 201 (201 with a PostResponse document), or a 303 to
success_action_redirect with bucket, key and etag in its query.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

from objstore.blobs.plan import IDENTITY, StagePlan
from objstore.checksums import CHECKSUM_ALGORITHMS
from objstore.errors import S3Error
from objstore.http.authn import check_checksum_claims
from objstore.http.checksum_headers import is_checksum_claim
from objstore.http.error_xml import serialize, sub_element
from objstore.http.form_data import FormDecoder
from objstore.http.spool import BodySpool
from objstore.s3.acl_headers import written_acl
from objstore.s3.call import S3Call, S3Response
from objstore.s3.lifecycle import expiration_headers
from objstore.s3.objects import object_attrs, version_header
from objstore.s3.versioning_xml import parse_tagging
from objstore.s3.xml import s3_root

OPERATION = "PostObject"


def form_header(fields: Mapping[str, str]) -> Callable[[str], str | None]:
    """The form's fields read as the request headers they stand for (the decision's view
    of a form: its tagging, lock and acl fields add their actions as their headers do)."""
    names = {"x-amz-tagging": "tagging", "x-amz-acl": "acl"}

    def header(name: str) -> str | None:
        return fields.get(names.get(name, name))

    return header
MAX_OBJECT_TAGS = 10
# Form fields that become the PutObject header of the same name.
_HEADER_FIELDS = frozenset({"content-type", "cache-control", "content-disposition",
                            "content-encoding", "content-language", "expires",
                            "x-amz-storage-class"})


@dataclass(frozen=True, slots=True)
class FormAdmission:
    """The admission of a form upload: no caller yet (the signature is in the body), how
    to decode the body, and its stages (a bucket's default encryption applies)."""

    boundary: bytes
    stage_plan: StagePlan = IDENTITY
    hash_body: bool = False
    checksum_algorithms: tuple[str, ...] = CHECKSUM_ALGORITHMS

    def body_decoder(self) -> FormDecoder:
        return FormDecoder(self.boundary)


def form_key(fields: Mapping[str, str], filename: str | None) -> str:
    key = fields.get("key")
    if not key:
        raise S3Error("UserKeyMustBeSpecified", ArgumentName="key")
    return key.replace("${filename}", filename or "")


def form_headers(fields: Mapping[str, str]) -> dict[str, str]:
    """The PutObject headers the form's fields stand for."""
    for name in fields:
        if name.startswith("x-amz-server-side-encryption"):
            # The stages of the body were chosen before it arrived (the bucket's default):
            # a form can not ask for encryption of its own, and is never told it got it.
            raise S3Error("NotImplemented", "Server-side encryption fields are not "
                                            "available on form uploads; the upload was "
                                            "refused and nothing was stored.", Header=name)
    headers = {name: value for name, value in fields.items()
               if name in _HEADER_FIELDS or name.startswith(("x-amz-meta-", "x-amz-object-lock-"))
               or is_checksum_claim(name)}
    if "acl" in fields:
        headers["x-amz-acl"] = fields["acl"]
    if fields.get("tagging"):
        tags = parse_tagging(fields["tagging"].encode("utf-8", "surrogateescape"),
                             MAX_OBJECT_TAGS, "Object tags")
        headers["x-amz-tagging"] = urlencode(sorted(tags.items()))
    return headers


def _check_claimed_checksums(call: S3Call, headers: Mapping[str, str]) -> None:
    spool = call.request.spool
    assert spool is not None
    check_checksum_claims(spool, headers.items(), "field")


def form_of(spool: BodySpool | None) -> FormDecoder:
    """The decoded form of a form upload's body, once it is complete and well-formed."""
    decoder = spool.decoder if spool is not None else None
    if spool is None or not isinstance(decoder, FormDecoder):  # an empty body
        raise S3Error("MalformedPOSTRequest")
    if spool.too_large:
        raise S3Error("EntityTooLarge")
    if spool.error is not None:
        raise S3Error(spool.error.code, spool.error.message)
    return decoder


async def post_object(call: S3Call) -> S3Response:
    """Store the form's file under `call.key` (the API has verified the policy and asked
    the authorizer for s3:PutObject on that key)."""
    spool = call.request.spool
    fields = form_of(spool).fields
    assert spool is not None
    headers = form_headers(fields)
    acl = await written_acl(call, headers)
    _check_claimed_checksums(call, headers)
    attrs = object_attrs(call, headers, acl)
    record = await call.services.objects.put(call.caller, call.bucket, call.key, spool, attrs,
                                             integrity=bool(attrs.checksums))
    etag = f'"{record.etag}"'
    location = _location(call)
    response_headers = {"ETag": etag, "Location": location}
    response_headers.update(version_header(record))
    response_headers.update(await expiration_headers(call, record))
    redirect = fields.get("success_action_redirect") or fields.get("redirect")
    if redirect and urlsplit(redirect).scheme in ("http", "https"):
        response_headers["Location"] = _redirect(redirect, call.bucket, call.key, etag)
        return S3Response(status=303, headers=response_headers)
    status = fields.get("success_action_status", "204")
    if status == "201":
        return S3Response(status=201, headers=response_headers,
                          body=_post_response(location, call.bucket, call.key, etag),
                          content_type="application/xml")
    return S3Response(status=200 if status == "200" else 204, headers=response_headers)


def _location(call: S3Call) -> str:
    host = call.header("host") or "localhost"
    scheme = "https" if call.request.isSecure() else "http"
    return f"{scheme}://{host}/{quote(call.bucket)}/{quote(call.key, safe='/')}"


def _redirect(url: str, bucket: str, key: str, etag: str) -> str:
    parts = urlsplit(url)
    query = urlencode({"bucket": bucket, "key": key, "etag": etag})
    joined = f"{parts.query}&{query}" if parts.query else query
    return urlunsplit((parts.scheme, parts.netloc, parts.path, joined, parts.fragment))


def _post_response(location: str, bucket: str, key: str, etag: str) -> bytes:
    root = s3_root("PostResponse")
    sub_element(root, "Location", location)
    sub_element(root, "Bucket", bucket)
    sub_element(root, "Key", key)
    sub_element(root, "ETag", etag)
    return serialize(root)
