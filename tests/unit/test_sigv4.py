"""SigV4 verification and signing (objstore.http.sigv4): AWS's published examples, a
cross-check against botocore, the refusals, aws-chunked decoding and the S3 checksums."""

from __future__ import annotations

import base64
import hashlib
import io
import zlib
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, urlsplit

import boto3
import botocore.auth
import botocore.crt.auth
import pytest
from awscrt import checksums
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.httpchecksum import AwsChunkedWrapper, Crc32Checksum

from objstore.checksums import CHECKSUM_ALGORITHMS, Checksummer
from objstore.http import sigv4
from objstore.http.sigv4 import RequestView, SigV4Error
from tests.sigv4_helpers import aws_chunked_body, canonical_request, make_signing_context

# The credentials, time and region of every example in the S3 API reference.
AK = "AKIAIOSFODNN7EXAMPLE"
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
NOW = datetime(2013, 5, 24, tzinfo=UTC)
REGIONS = ("us-east-1",)
EMPTY = hashlib.sha256(b"").hexdigest()
HOST = "examplebucket.s3.amazonaws.com"


def authorization(signed_headers: str, signature: str, credential_date: str = "20130524",
                  region: str = "us-east-1", separator: str = ", ") -> str:
    credential = f"{AK}/{credential_date}/{region}/s3/aws4_request"
    return (f"AWS4-HMAC-SHA256 Credential={credential}{separator}"
            f"SignedHeaders={signed_headers}{separator}Signature={signature}")


def check(req: RequestView, secret: str = SECRET, now: datetime = NOW,
          regions: tuple[str, ...] = REGIONS) -> sigv4.SigningContext:
    auth = sigv4.parse_auth(req)
    assert auth is not None
    return sigv4.verify(auth, req, secret, now, regions)


def refused(req: RequestView, code: str, **kwargs: Any) -> SigV4Error:
    with pytest.raises(SigV4Error) as info:
        check(req, **kwargs)
    assert info.value.code == code, info.value
    return info.value


def replace_header(req: RequestView, name: str, value: str) -> RequestView:
    return RequestView(req.method, req.raw_path, req.raw_query, {**req.headers, name: value})


# --------------------------------------------------------------------------------------
# AWS's published examples ("Examples of how to calculate signature", S3 API reference)
# --------------------------------------------------------------------------------------

GET_OBJECT = RequestView("GET", "/test.txt", "", {
    "host": HOST,
    "range": "bytes=0-9",
    "x-amz-content-sha256": EMPTY,
    "x-amz-date": "20130524T000000Z",
    "authorization": authorization(
        "host;range;x-amz-content-sha256;x-amz-date",
        "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"),
})
PUT_OBJECT = RequestView("PUT", "/test%24file.text", "", {
    "host": HOST,
    "date": "Fri, 24 May 2013 00:00:00 GMT",
    "x-amz-date": "20130524T000000Z",
    "x-amz-storage-class": "REDUCED_REDUNDANCY",
    "x-amz-content-sha256": hashlib.sha256(b"Welcome to Amazon S3.").hexdigest(),
    "authorization": authorization(
        "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class",
        "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"),
})
GET_LIFECYCLE = RequestView("GET", "/", "lifecycle", {
    "host": HOST,
    "x-amz-content-sha256": EMPTY,
    "x-amz-date": "20130524T000000Z",
    "authorization": authorization(
        "host;x-amz-content-sha256;x-amz-date",
        "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"),
})
LIST_OBJECTS = RequestView("GET", "/", "max-keys=2&prefix=J", {
    "host": HOST,
    "x-amz-content-sha256": EMPTY,
    "x-amz-date": "20130524T000000Z",
    "authorization": authorization(
        "host;x-amz-content-sha256;x-amz-date",
        "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"),
})
PRESIGNED_URL = (
    "https://examplebucket.s3.amazonaws.com/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256"
    "&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request"
    "&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host"
    "&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"
)
AWS_EXAMPLES = [GET_OBJECT, PUT_OBJECT, GET_LIFECYCLE, LIST_OBJECTS]


def view_of_url(method: str, url: str, headers: Mapping[str, str] | None = None) -> RequestView:
    parts = urlsplit(url)
    return RequestView(method, parts.path, parts.query, {"host": parts.netloc, **(headers or {})})


@pytest.mark.parametrize("req", AWS_EXAMPLES, ids=["get-object", "put-object", "lifecycle",
                                                    "list-objects"])
def test_aws_header_examples_verify(req: RequestView) -> None:
    ctx = check(req)
    assert ctx.scope == "20130524/us-east-1/s3/aws4_request"
    assert ctx.seed_signature == sigv4.parse_auth(req).signature  # type: ignore[union-attr]


@pytest.mark.parametrize("req", AWS_EXAMPLES, ids=["get-object", "put-object", "lifecycle",
                                                    "list-objects"])
def test_aws_header_examples_fail_with_another_secret(req: RequestView) -> None:
    refused(req, "SignatureDoesNotMatch", secret=SECRET.replace("K7", "K8"))


def test_canonical_request_of_the_get_object_example() -> None:
    auth = sigv4.parse_auth(GET_OBJECT)
    assert auth is not None
    assert canonical_request(auth, GET_OBJECT) == (
        "GET\n/test.txt\n\n"
        "host:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
        f"x-amz-content-sha256:{EMPTY}\nx-amz-date:20130524T000000Z\n\n"
        f"host;range;x-amz-content-sha256;x-amz-date\n{EMPTY}"
    )


def test_aws_presigned_example_verifies_and_presign_url_reproduces_it() -> None:
    ctx = check(view_of_url("GET", PRESIGNED_URL), now=NOW + timedelta(hours=23))
    assert ctx.seed_signature.startswith("aeeed9bb")
    url = sigv4.presign_url("GET", "https://examplebucket.s3.amazonaws.com/test.txt", AK, SECRET,
                            "us-east-1", NOW, 86400)
    assert url == PRESIGNED_URL


# The aws-chunked examples: 65 KiB of "a" in chunks of 64 KiB and 1 KiB.
CHUNK_DATA = [b"a" * 65536, b"a" * 1024]
CHUNKED_HEADERS = {
    "host": "s3.amazonaws.com",
    "x-amz-date": "20130524T000000Z",
    "x-amz-storage-class": "REDUCED_REDUNDANCY",
    "content-encoding": "aws-chunked",
    "x-amz-decoded-content-length": "66560",
}
CHUNKED_PUT = RequestView("PUT", "/examplebucket/chunkObject.txt", "", {
    **CHUNKED_HEADERS,
    "content-length": "66824",
    "x-amz-content-sha256": sigv4.STREAMING_SIGNED,
    "authorization": authorization(
        "content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;"
        "x-amz-decoded-content-length;x-amz-storage-class",
        "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"),
})
CHUNK_SIGNATURES = [
    "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
    "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
    "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9",
]
# The trailing-header example (sigv4-streaming-trailers): same payload, crc32c trailer.
TRAILER_PUT = RequestView("PUT", "/examplebucket/chunkObject.txt", "", {
    **CHUNKED_HEADERS,
    "x-amz-content-sha256": sigv4.STREAMING_SIGNED_TRAILER,
    "x-amz-trailer": "x-amz-checksum-crc32c",
    "authorization": authorization(
        "content-encoding;host;x-amz-content-sha256;x-amz-date;"
        "x-amz-decoded-content-length;x-amz-storage-class;x-amz-trailer",
        "106e2a8a18243abcf37539882f36619c00e2dfc72633413f02d3b74544bfeb8e"),
})
TRAILER_CHUNK_SIGNATURES = [
    "b474d8862b1487a5145d686f57f013e54db672cee1c953b3010fb58501ef5aa2",
    "1c1344b170168f8e65b41376b44b20fe354e373826ccbbe2c1d40a8cae51e5c7",
    "2ca2aba2005185cf7159c6277faf83795951dd77a3a99e6e65d5c9f85863f992",
]
TRAILER_SIGNATURE = "d81f82fc3505edab99d459891051a732e8730629a2e4a59689829ca17fe2e435"


def published_chunked_body(signatures: list[str], trailer: bytes = b"\r\n") -> bytes:
    """The body exactly as the AWS documentation writes it out."""
    return (f"10000;chunk-signature={signatures[0]}\r\n".encode() + CHUNK_DATA[0] + b"\r\n"
            + f"400;chunk-signature={signatures[1]}\r\n".encode() + CHUNK_DATA[1] + b"\r\n"
            + f"0;chunk-signature={signatures[2]}\r\n".encode() + trailer)


def decode(content_sha256: str, body: bytes, step: int | None = None,
           **kwargs: Any) -> tuple[sigv4.AwsChunkedDecoder, bytes]:
    decoder = sigv4.AwsChunkedDecoder(content_sha256, **kwargs)
    step = step or len(body)
    out = b"".join(decoder.feed(body[i:i + step]) for i in range(0, len(body), step))
    decoder.finish()
    return decoder, out


def test_aws_chunked_example() -> None:
    ctx = check(CHUNKED_PUT)
    body = published_chunked_body(CHUNK_SIGNATURES)
    assert len(body) == 66824  # the example's Content-Length
    decoder, payload = decode(sigv4.STREAMING_SIGNED, body)
    assert payload == b"".join(CHUNK_DATA)
    assert decoder.decoded_length == 66560
    assert [sig for sig, _ in decoder.chunks] == CHUNK_SIGNATURES
    assert [digest for _, digest in decoder.chunks] == [
        hashlib.sha256(c).hexdigest() for c in [*CHUNK_DATA, b""]]
    sigv4.verify_chunk_signatures(ctx, decoder)
    assert aws_chunked_body(CHUNK_DATA, ctx) == body


def test_aws_chunked_trailer_example() -> None:
    ctx = check(TRAILER_PUT)
    trailer = (f"x-amz-checksum-crc32c:sOO8/Q==\r\n"
               f"x-amz-trailer-signature:{TRAILER_SIGNATURE}\r\n\r\n")
    body = published_chunked_body(TRAILER_CHUNK_SIGNATURES, trailer.encode())
    decoder, payload = decode(sigv4.STREAMING_SIGNED_TRAILER, body)
    assert payload == b"".join(CHUNK_DATA)
    assert decoder.trailers == {"x-amz-checksum-crc32c": "sOO8/Q=="}
    assert decoder.trailer_signature == TRAILER_SIGNATURE
    sigv4.verify_chunk_signatures(ctx, decoder)
    summer = Checksummer("crc32c")
    summer.update(payload)
    assert summer.digest_b64() == "sOO8/Q=="
    assert aws_chunked_body(CHUNK_DATA, ctx, {"x-amz-checksum-crc32c": "sOO8/Q=="}) == body


# --------------------------------------------------------------------------------------
# Cross-check with botocore
# --------------------------------------------------------------------------------------

BOTO_NOW = datetime(2024, 2, 29, 23, 59, 30, tzinfo=UTC)
KEYS = ["plain.txt", "with space", "a+b", "100%", "ünïcödé/ключ/键", "~tilde~", "trailing/",
        "dir//double", "dir/../dots/./x", "q?x=1&y#frag", "!'()*[]$,;:@=", "tab\there"]


@pytest.fixture
def frozen_botocore(monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore signs with its own clock: give it ours. (With awscrt installed, boto3
    clients sign with the CRT signer, an independent implementation.)"""

    def fixed(remove_tzinfo: bool = True) -> datetime:
        return BOTO_NOW.replace(tzinfo=None) if remove_tzinfo else BOTO_NOW

    monkeypatch.setattr(botocore.auth, "get_current_datetime", fixed)
    monkeypatch.setattr(botocore.crt.auth, "get_current_datetime", fixed)


def wire_view(method: str, url: str, headers: Mapping[str, str | bytes]) -> RequestView:
    """The request as our HTTP layer sees it: the bytes http.client puts on the wire (a str
    header is sent as Latin-1), decoded as objstore.http.authn does (UTF-8 +
    surrogateescape)."""
    parts = urlsplit(url)
    seen = {"host": parts.netloc}
    for name, value in headers.items():
        raw = value if isinstance(value, bytes) else value.encode("latin-1")
        seen[name.lower()] = raw.decode("utf-8", "surrogateescape")
    return RequestView(method, parts.path, parts.query, seen)


def botocore_signed(method: str, url: str, headers: Mapping[str, str] | None = None,
                    data: bytes = b"") -> RequestView:
    request = AWSRequest(method, url, headers=dict(headers or {}), data=data)
    botocore.auth.S3SigV4Auth(Credentials(AK, SECRET), "s3", "us-east-1").add_auth(request)
    prepared = request.prepare()
    return wire_view(method, prepared.url, dict(prepared.headers))


class Captured(Exception):
    def __init__(self, request: Any) -> None:
        super().__init__("captured")
        self.request = request


def boto3_request(call: Callable[[Any], object], *, presign: bool = False) -> Any:
    """Run one boto3 call against a fake endpoint and return the request it would send."""
    client = boto3.client(
        "s3", endpoint_url="https://s3.example.test", region_name="us-east-1",
        aws_access_key_id=AK, aws_secret_access_key=SECRET,
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"},
                      retries={"max_attempts": 0}))

    def capture(request: Any, **_: object) -> None:
        raise Captured(request)

    client.meta.events.register("before-send.s3", capture)
    if presign:
        return call(client)
    with pytest.raises(Captured) as info:
        call(client)
    return info.value.request


@pytest.mark.usefixtures("frozen_botocore")
@pytest.mark.parametrize("key", KEYS)
def test_boto3_requests_verify(key: str) -> None:
    request = boto3_request(lambda c: c.get_object(Bucket="bucket", Key=key, Range="bytes=1-"))
    req = wire_view(request.method, request.url, dict(request.headers))
    check(req, now=BOTO_NOW)
    tampered = RequestView(req.method, req.raw_path + "x", req.raw_query, req.headers)
    refused(tampered, "SignatureDoesNotMatch", now=BOTO_NOW)


@pytest.mark.usefixtures("frozen_botocore")
@pytest.mark.parametrize("key", KEYS)
def test_boto3_presigned_urls_verify(key: str) -> None:
    url = boto3_request(lambda c: c.generate_presigned_url(
        "put_object", Params={"Bucket": "bucket", "Key": key}, ExpiresIn=300), presign=True)
    assert "X-Amz-Signature=" in url
    check(view_of_url("PUT", url), now=BOTO_NOW + timedelta(seconds=299))
    refused(view_of_url("PUT", url), "AccessDenied", now=BOTO_NOW + timedelta(seconds=301))
    refused(view_of_url("GET", url), "SignatureDoesNotMatch", now=BOTO_NOW)


@pytest.mark.usefixtures("frozen_botocore")
@pytest.mark.parametrize("call", [
    lambda c: c.list_objects_v2(Bucket="b", Prefix="a b", Delimiter="/"),
    lambda c: c.create_multipart_upload(Bucket="b", Key="k"),
    lambda c: c.list_object_versions(Bucket="b", KeyMarker="x+y", Prefix="ü"),
    lambda c: c.put_object_tagging(Bucket="b", Key="k", Tagging={"TagSet": []}),
    lambda c: c.upload_part_copy(Bucket="b", Key="k", UploadId="u/1+2", PartNumber=2,
                                 CopySource={"Bucket": "src", "Key": "a b/ü"}),
], ids=["list-v2", "uploads", "versions", "tagging", "part-copy"])
def test_boto3_queries_verify(call: Callable[[Any], object]) -> None:
    request = boto3_request(call)
    check(wire_view(request.method, request.url, dict(request.headers)), now=BOTO_NOW)


@pytest.mark.usefixtures("frozen_botocore")
@pytest.mark.parametrize("query", ["uploads", "uploads=", "list-type=2&prefix=a%20b",
                                   "a=2&a=1&b=&a=10", "prefix=%2F~%2B", "x=%C3%BC&%C3%BC=x"])
def test_botocore_raw_queries_verify(query: str) -> None:
    check(botocore_signed("GET", f"https://s3.example.test/bucket/key?{query}"), now=BOTO_NOW)


@pytest.mark.usefixtures("frozen_botocore")
def test_botocore_non_ascii_header_sent_as_latin1() -> None:
    req = botocore_signed("PUT", "https://s3.example.test/b/k",
                          {"x-amz-meta-name": "café", "content-disposition": "a   b "}, b"xyz")
    assert req.headers["x-amz-meta-name"] == "caf\udce9"  # the raw Latin-1 byte
    check(req, now=BOTO_NOW)


@pytest.mark.usefixtures("frozen_botocore")
def test_botocore_presigned_query_auth_keeps_other_params() -> None:
    request = AWSRequest("GET", "https://s3.example.test/b/k?list-type=2&prefix=a%20b")
    botocore.auth.S3SigV4QueryAuth(Credentials(AK, SECRET), "s3", "us-east-1",
                                   expires=60).add_auth(request)
    check(view_of_url("GET", request.prepare().url), now=BOTO_NOW)


@pytest.mark.parametrize("key", KEYS)
def test_sign_headers_round_trip(key: str) -> None:
    url = f"http://127.0.0.1:9000/bucket/{quote(key, safe='/~')}?list-type=2&prefix=a%20b"
    headers = {"X-Amz-Meta-Name": "naïve  value", "Content-Type": "text/plain",
               "User-Agent": "not signed"}
    added = sigv4.sign_headers("PUT", url, headers, sigv4.UNSIGNED_PAYLOAD, AK, SECRET,
                               "us-east-1", NOW)
    assert added["host"] == "127.0.0.1:9000"
    assert added["x-amz-content-sha256"] == sigv4.UNSIGNED_PAYLOAD
    assert "user-agent" not in added["Authorization"]
    on_wire = {name: value.encode("utf-8") for name, value in {**headers, **added}.items()}
    req = wire_view("PUT", url, on_wire)
    check(req)
    refused(replace_header(req, "content-type", "text/html"), "SignatureDoesNotMatch")


@pytest.mark.parametrize("key", KEYS)
def test_presign_url_round_trip(key: str) -> None:
    url = sigv4.presign_url("GET", f"https://s3.example.test:8443/b/{quote(key, safe='/~')}"
                            "?versionId=3", AK, SECRET, "us-east-1", NOW, 60)
    req = view_of_url("GET", url)
    assert req.headers["host"] == "s3.example.test:8443"
    check(req, now=NOW + timedelta(seconds=60))
    refused(req, "AccessDenied", now=NOW + timedelta(seconds=61))


def signed_by_us(url: str) -> dict[str, str]:
    added = sigv4.sign_headers("GET", url, {}, EMPTY, AK, SECRET, "us-east-1", NOW)
    return {name.lower(): value for name, value in added.items()}


def test_equivalent_path_and_query_encodings_are_accepted() -> None:
    """A client may send another, equivalent encoding than the AWS one it signed."""
    signed = signed_by_us("http://h/b/%7Etilde%21?prefix=%2f%7e%2b")
    for sent in ["/b/~tilde%21", "/b/%7etilde!", "/b/%7Etilde%21"]:
        check(RequestView("GET", sent, "prefix=%2F~%2B", signed))
        check(RequestView("GET", sent, "prefix=/~%2b", signed))
    refused(RequestView("GET", "/b/~tilde%22", "prefix=/~%2b", signed), "SignatureDoesNotMatch")
    refused(RequestView("GET", "/b/~tilde!", "prefix=/~+", signed), "SignatureDoesNotMatch")


def test_path_is_not_normalised() -> None:
    signed = signed_by_us("http://h/b/x/../y//z")
    check(RequestView("GET", "/b/x/../y//z", "", signed))
    refused(RequestView("GET", "/b/y//z", "", signed), "SignatureDoesNotMatch")
    refused(RequestView("GET", "/b/x/../y/z", "", signed), "SignatureDoesNotMatch")


# --------------------------------------------------------------------------------------
# Refusals
# --------------------------------------------------------------------------------------


def test_anonymous_request_has_no_auth() -> None:
    assert sigv4.parse_auth(RequestView("GET", "/b/k", "a=1", {"host": HOST})) is None


def test_tampered_header_path_and_query() -> None:
    refused(replace_header(GET_OBJECT, "range", "bytes=0-10"), "SignatureDoesNotMatch")
    refused(RequestView("GET", "/test.txt2", "", GET_OBJECT.headers), "SignatureDoesNotMatch")
    refused(RequestView("GET", "/test.txt", "x=1", GET_OBJECT.headers), "SignatureDoesNotMatch")
    refused(RequestView("HEAD", "/test.txt", "", GET_OBJECT.headers), "SignatureDoesNotMatch")


def test_header_values_are_trimmed_and_collapsed() -> None:
    check(replace_header(GET_OBJECT, "range", "  bytes=0-9 \t"))
    check(replace_header(PUT_OBJECT, "date", "Fri,   24 May 2013  00:00:00 GMT"))


def test_header_signed_request_time_window() -> None:
    check(GET_OBJECT, now=NOW + timedelta(minutes=15))
    check(GET_OBJECT, now=NOW - timedelta(minutes=15))
    refused(GET_OBJECT, "RequestTimeTooSkewed", now=NOW + timedelta(minutes=16))
    refused(GET_OBJECT, "RequestTimeTooSkewed", now=NOW - timedelta(minutes=16))


def test_presigned_expiry_limits() -> None:
    req = view_of_url("GET", PRESIGNED_URL)
    check(req, now=NOW + timedelta(seconds=86400))
    assert refused(req, "AccessDenied", now=NOW + timedelta(seconds=86401)).message == (
        "Request has expired")
    refused(req, "AccessDenied", now=NOW - timedelta(minutes=16))  # not valid yet
    for expires in ["604801", "0"]:
        too_long = view_of_url("GET", PRESIGNED_URL.replace("Expires=86400",
                                                            f"Expires={expires}"))
        refused(too_long, "AuthorizationQueryParametersError")
    for expires in ["-1", "1e3", "", "%C2%B2", "%D9%A3", "9" * 5000]:
        bad = view_of_url("GET", PRESIGNED_URL.replace("Expires=86400", f"Expires={expires}"))
        with pytest.raises(SigV4Error, match="AuthorizationQueryParametersError"):
            sigv4.parse_auth(bad)
    with pytest.raises(ValueError):
        sigv4.presign_url("GET", "https://h/b/k", AK, SECRET, "us-east-1", NOW, 604801)


def test_presigned_tampering() -> None:
    refused(view_of_url("GET", PRESIGNED_URL.replace("test.txt", "test.txu")),
            "SignatureDoesNotMatch", now=NOW)
    refused(view_of_url("GET", PRESIGNED_URL + "&x-id=GetObject"), "SignatureDoesNotMatch")
    with pytest.raises(SigV4Error, match="AuthorizationQueryParametersError"):
        sigv4.parse_auth(view_of_url("GET", PRESIGNED_URL.replace("&X-Amz-SignedHeaders=host",
                                                                  "")))


def test_region_service_and_scope_date() -> None:
    error = refused(GET_OBJECT, "AuthorizationHeaderMalformed", regions=("eu-west-1",))
    assert "'us-east-1' is wrong; expecting 'eu-west-1'" in error.message
    assert error.region == "eu-west-1"
    refused(view_of_url("GET", PRESIGNED_URL), "AuthorizationQueryParametersError",
            regions=("eu-west-1",))
    other_service = replace_header(GET_OBJECT, "authorization", GET_OBJECT.headers[
        "authorization"].replace("/s3/", "/ec2/"))
    refused(other_service, "AuthorizationHeaderMalformed")
    other_date = replace_header(GET_OBJECT, "authorization", authorization(
        "host;range;x-amz-content-sha256;x-amz-date", "0" * 64, credential_date="20130523"))
    refused(other_date, "AuthorizationHeaderMalformed")


@pytest.mark.parametrize("header", [
    "AWS4-HMAC-SHA256",
    "AWS4-HMAC-SHA256 Credential=garbage, SignedHeaders=host, Signature=" + "0" * 64,
    f"AWS4-HMAC-SHA256 Credential={AK}/20130524/us-east-1/s3/aws4_request, SignedHeaders=host",
    f"AWS4-HMAC-SHA256 Credential={AK}/20130524/us-east-1/s3/aws4_request, SignedHeaders=host, "
    "Signature=xyz",
    f"AWS4-HMAC-SHA256 Credential={AK}/2013052/us-east-1/s3/aws4_request, SignedHeaders=host, "
    "Signature=" + "0" * 64,
    f"AWS4-HMAC-SHA256 Credential={AK}/20130524/us-east-1/s3/aws5_request, SignedHeaders=host, "
    "Signature=" + "0" * 64,
    f"AWS4-HMAC-SHA256 Credential={AK}/20130524/us-east-1/s3/aws4_request, SignedHeaders=, "
    "Signature=" + "0" * 64,
])
def test_malformed_authorization(header: str) -> None:
    with pytest.raises(SigV4Error) as info:
        sigv4.parse_auth(replace_header(GET_OBJECT, "authorization", header))
    assert info.value.code == "AuthorizationHeaderMalformed"


@pytest.mark.parametrize("access_key", ["AK\udcffID", "AK\x01ID", "AK ID", "AKé"])
def test_an_access_key_no_credential_can_have_is_refused_unread(access_key: str) -> None:
    header = (f"AWS4-HMAC-SHA256 Credential={access_key}/20130524/us-east-1/s3/aws4_request, "
              "SignedHeaders=host, Signature=" + "0" * 64)
    with pytest.raises(SigV4Error) as info:
        sigv4.parse_auth(replace_header(GET_OBJECT, "authorization", header))
    assert info.value.code == "InvalidAccessKeyId"


@pytest.mark.parametrize("date", ["２０１３０５２４T000000Z", "20130524T00000٣Z"])
def test_dates_in_other_digits_are_refused(date: str) -> None:
    assert sigv4.canonical.parse_amz_date(date) is None
    refused(replace_header(GET_OBJECT, "x-amz-date", date), "AccessDenied")


def test_authorization_without_spaces_after_commas() -> None:
    compact = authorization("host;range;x-amz-content-sha256;x-amz-date",
                            "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
                            separator=",")
    check(replace_header(GET_OBJECT, "authorization", compact))


def test_sigv2_is_refused() -> None:
    with pytest.raises(SigV4Error, match="AWS4-HMAC-SHA256") as info:
        sigv4.parse_auth(replace_header(GET_OBJECT, "authorization", f"AWS {AK}:c2lnbmF0dXJl"))
    assert info.value.code == "InvalidRequest"
    v2_query = RequestView("GET", "/b/k", f"AWSAccessKeyId={AK}&Expires=1&Signature=abc%3D",
                           {"host": HOST})
    with pytest.raises(SigV4Error) as info:
        sigv4.parse_auth(v2_query)
    assert info.value.code == "InvalidRequest"


def test_two_auth_mechanisms_are_refused() -> None:
    both = view_of_url("GET", PRESIGNED_URL, {"authorization": GET_OBJECT.headers[
        "authorization"]})
    with pytest.raises(SigV4Error) as info:
        sigv4.parse_auth(both)
    assert info.value.code == "InvalidArgument"


def test_payload_hash_header_is_required_and_checked() -> None:
    headers = {k: v for k, v in GET_OBJECT.headers.items() if k != "x-amz-content-sha256"}
    with pytest.raises(SigV4Error) as info:
        sigv4.parse_auth(RequestView("GET", "/test.txt", "", headers))
    assert info.value.code == "InvalidRequest"
    for bad in [EMPTY.upper(), "abc", "STREAMING-AWS4-HMAC-SHA256-PAYLOADX"]:
        with pytest.raises(SigV4Error) as info:
            sigv4.parse_auth(replace_header(GET_OBJECT, "x-amz-content-sha256", bad))
        assert info.value.code == "InvalidArgument"


def test_presigned_payload_hash_defaults_to_unsigned() -> None:
    auth = sigv4.parse_auth(view_of_url("GET", PRESIGNED_URL))
    assert auth is not None and auth.presigned and auth.payload_hash == sigv4.UNSIGNED_PAYLOAD
    assert auth.expires_seconds == 86400


def test_unsigned_amz_headers_and_unsigned_host_are_refused() -> None:
    error = refused(replace_header(GET_OBJECT, "x-amz-meta-injected", "1"), "AccessDenied")
    assert "x-amz-meta-injected" in error.message
    refused(view_of_url("GET", PRESIGNED_URL, {"x-amz-acl": "public-read"}), "AccessDenied")
    req = RequestView("GET", "/b/k", "", signed_by_us("http://h/b/k"))
    auth = sigv4.parse_auth(req)
    assert auth is not None and "host" in auth.signed_headers
    without_host = replace_header(req, "authorization", req.headers["authorization"].replace(
        "SignedHeaders=host;", "SignedHeaders="))
    refused(without_host, "AccessDenied")


def test_signing_context_repr_hides_the_key() -> None:
    ctx = check(GET_OBJECT)
    assert ctx.signing_key.hex() not in repr(ctx)
    assert str(list(ctx.signing_key)) not in repr(ctx)


# --------------------------------------------------------------------------------------
# aws-chunked bodies
# --------------------------------------------------------------------------------------

PAYLOAD = bytes(range(256)) * 100  # 25600 bytes
PIECES = [PAYLOAD[:9000], PAYLOAD[9000:18000], PAYLOAD[18000:]]
TRAILERS = {"x-amz-checksum-crc32": base64.b64encode(
    zlib.crc32(PAYLOAD).to_bytes(4, "big")).decode()}


def signing_context() -> sigv4.SigningContext:
    return make_signing_context(SECRET, "20130524T000000Z", "us-east-1", "1" * 64)


def bodies() -> list[tuple[str, bytes]]:
    ctx = signing_context()
    return [
        (sigv4.STREAMING_SIGNED, aws_chunked_body(PIECES, ctx)),
        (sigv4.STREAMING_SIGNED_TRAILER, aws_chunked_body(PIECES, ctx, TRAILERS)),
        (sigv4.STREAMING_UNSIGNED_TRAILER, aws_chunked_body(PIECES, None, TRAILERS)),
    ]


@pytest.mark.parametrize(("mode", "body"), bodies(), ids=["signed", "trailer", "unsigned"])
def test_decoder_results_do_not_depend_on_slicing(mode: str, body: bytes) -> None:
    results = []
    for step in (1, 7, None):
        decoder, out = decode(mode, body, step)
        assert out == PAYLOAD
        sigv4.verify_chunk_signatures(signing_context(), decoder)
        results.append((decoder.chunks, decoder.trailers, decoder.trailer_signature,
                        decoder.decoded_length))
    assert results[0] == results[1] == results[2]
    chunks, trailers, _, length = results[0]
    assert length == len(PAYLOAD)
    assert trailers == ({} if mode == sigv4.STREAMING_SIGNED else TRAILERS)
    assert len(chunks) == (0 if mode == sigv4.STREAMING_UNSIGNED_TRAILER else 4)


@pytest.mark.parametrize("mode", [sigv4.STREAMING_SIGNED, sigv4.STREAMING_SIGNED_TRAILER])
def test_tampered_chunk_data_or_signature(mode: str) -> None:
    body = dict(bodies())[mode]
    start = body.index(b"\r\n") + 2
    flipped = body[:start + 5] + bytes([body[start + 5] ^ 1]) + body[start + 6:]
    decoder, _ = decode(mode, flipped)
    with pytest.raises(SigV4Error, match="SignatureDoesNotMatch"):
        sigv4.verify_chunk_signatures(signing_context(), decoder)
    second = body.index(b"chunk-signature=", start) + len(b"chunk-signature=")
    forged = body[:second] + b"0" * 64 + body[second + 64:]
    decoder, _ = decode(mode, forged)
    with pytest.raises(SigV4Error, match="SignatureDoesNotMatch"):
        sigv4.verify_chunk_signatures(signing_context(), decoder)
    with pytest.raises(SigV4Error, match="SignatureDoesNotMatch"):  # another seed
        sigv4.verify_chunk_signatures(
            make_signing_context(SECRET, "20130524T000000Z", "us-east-1", "2" * 64),
            decode(mode, body)[0])


def test_canonical_trailers_are_sorted_name_value_lines() -> None:
    trailers = {"x-amz-checksum-sha256": "B", "x-amz-checksum-crc32": "A"}
    assert sigv4.canonical_trailers(trailers) == (
        b"x-amz-checksum-crc32:A\nx-amz-checksum-sha256:B\n")


def test_tampered_or_missing_signed_trailer() -> None:
    body = dict(bodies())[sigv4.STREAMING_SIGNED_TRAILER]
    value = TRAILERS["x-amz-checksum-crc32"].encode()
    decoder, _ = decode(sigv4.STREAMING_SIGNED_TRAILER, body.replace(value, b"AAAAAA=="))
    with pytest.raises(SigV4Error, match="SignatureDoesNotMatch"):
        sigv4.verify_chunk_signatures(signing_context(), decoder)
    cut = body.index(b"x-amz-trailer-signature")
    decoder, _ = decode(sigv4.STREAMING_SIGNED_TRAILER, body[:cut] + b"\r\n")
    with pytest.raises(SigV4Error, match="SignatureDoesNotMatch"):
        sigv4.verify_chunk_signatures(signing_context(), decoder)


@pytest.mark.parametrize(("mode", "body"), bodies(), ids=["signed", "trailer", "unsigned"])
def test_truncated_body_is_incomplete(mode: str, body: bytes) -> None:
    final = body.index(b"\r\n0")
    for cut in (10, body.index(b"\r\n") + 100, final, final + 3, len(body) - 12):
        decoder = sigv4.AwsChunkedDecoder(mode)
        decoder.feed(body[:cut])
        with pytest.raises(SigV4Error) as info:
            decoder.finish()
        assert info.value.code == "IncompleteBody", cut
        with pytest.raises(SigV4Error, match="IncompleteBody"):
            sigv4.verify_chunk_signatures(signing_context(), decoder)


@pytest.mark.parametrize(("mode", "body"), bodies(), ids=["signed", "trailer", "unsigned"])
def test_missing_final_crlf_is_tolerated(mode: str, body: bytes) -> None:
    decoder, out = decode(mode, body[:-2])
    assert out == PAYLOAD
    sigv4.verify_chunk_signatures(signing_context(), decoder)


def test_blank_line_before_trailers_is_tolerated() -> None:
    body = dict(bodies())[sigv4.STREAMING_UNSIGNED_TRAILER]
    separated = body.replace(b"0\r\nx-amz", b"0\r\n\r\nx-amz")
    assert decode(sigv4.STREAMING_UNSIGNED_TRAILER, separated)[0].trailers == TRAILERS


@pytest.mark.parametrize("step", [1, 1000, None])
def test_oversized_chunk_size_line(step: int | None) -> None:
    body = b"1000;" + b"x" * 5000 + b"\r\n"
    with pytest.raises(SigV4Error) as info:
        decode(sigv4.STREAMING_UNSIGNED_TRAILER, body, step)
    assert info.value.code == "InvalidArgument"


def test_oversized_trailer_section() -> None:
    body = b"0\r\n" + b"x-amz-meta-a:" + b"b" * 20000 + b"\r\n\r\n"
    with pytest.raises(SigV4Error, match="InvalidArgument"):
        decode(sigv4.STREAMING_UNSIGNED_TRAILER, body, 999)
    many_lines = b"0\r\n" + b"".join(b"x-amz-t%d:v\r\n" % i for i in range(2000)) + b"\r\n"
    with pytest.raises(SigV4Error, match="InvalidArgument"):
        decode(sigv4.STREAMING_UNSIGNED_TRAILER, many_lines)


@pytest.mark.parametrize(("body", "code"), [
    (b"zz\r\nab\r\n0\r\n\r\n", "IncompleteBody"),  # size not hex
    (b"2\r\nabXY0\r\n\r\n", "IncompleteBody"),  # data not followed by CRLF
    (b"2;chunk-signature=" + b"0" * 64 + b"\r\nab\r\n0\r\n\r\n", None),  # ignored extension
    (b"0\r\nno-colon\r\n\r\n", "IncompleteBody"),
    (b"0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\nmore", "InvalidArgument"),
    (b"0\r\na:1\r\na:2\r\n\r\n", "InvalidArgument"),
])
def test_malformed_unsigned_framing(body: bytes, code: str | None) -> None:
    if code is None:
        assert decode(sigv4.STREAMING_UNSIGNED_TRAILER, body)[1] == b"ab"
        return
    with pytest.raises(SigV4Error) as info:
        decode(sigv4.STREAMING_UNSIGNED_TRAILER, body)
    assert info.value.code == code


def test_signed_chunks_need_signatures_and_a_minimum_size() -> None:
    with pytest.raises(SigV4Error, match="IncompleteBody"):
        decode(sigv4.STREAMING_SIGNED, b"2\r\nab\r\n0\r\n\r\n")
    small = aws_chunked_body([b"a" * 100, b"b" * 100], signing_context())
    with pytest.raises(SigV4Error, match="InvalidArgument"):
        decode(sigv4.STREAMING_SIGNED, small)
    trailer_line = aws_chunked_body([b"a"], signing_context()).replace(
        b"\r\n\r\n", b"\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n")
    with pytest.raises(SigV4Error, match="IncompleteBody"):  # no trailers in this mode
        decode(sigv4.STREAMING_SIGNED, trailer_line)


def test_max_decoded_length_and_sticky_errors() -> None:
    body = dict(bodies())[sigv4.STREAMING_UNSIGNED_TRAILER]
    decode(sigv4.STREAMING_UNSIGNED_TRAILER, body, max_decoded_length=len(PAYLOAD))
    decoder = sigv4.AwsChunkedDecoder(sigv4.STREAMING_UNSIGNED_TRAILER,
                                      max_decoded_length=len(PAYLOAD) - 1)
    with pytest.raises(SigV4Error, match="EntityTooLarge"):
        decoder.feed(body)
    with pytest.raises(SigV4Error, match="EntityTooLarge"):
        decoder.feed(b"")
    with pytest.raises(ValueError):
        sigv4.AwsChunkedDecoder(sigv4.UNSIGNED_PAYLOAD)


def test_botocore_aws_chunked_wrapper_body() -> None:
    body = AwsChunkedWrapper(io.BytesIO(PAYLOAD), checksum_cls=Crc32Checksum,
                             checksum_name="x-amz-checksum-crc32", chunk_size=4096).read()
    decoder, out = decode(sigv4.STREAMING_UNSIGNED_TRAILER, body, 7)
    assert out == PAYLOAD
    assert decoder.trailers == TRAILERS
    assert decoder.chunks == ()


@pytest.mark.usefixtures("frozen_botocore")
def test_boto3_put_object_with_trailing_checksum() -> None:
    """What boto3 >= 1.36 sends by default over TLS: STREAMING-UNSIGNED-PAYLOAD-TRAILER."""
    request = boto3_request(lambda c: c.put_object(Bucket="b", Key="k ü", Body=PAYLOAD))
    req = wire_view(request.method, request.url, dict(request.headers))
    auth = sigv4.parse_auth(req)
    assert auth is not None and auth.payload_hash == sigv4.STREAMING_UNSIGNED_TRAILER
    ctx = check(req, now=BOTO_NOW)
    decoder, out = decode(auth.payload_hash, request.body.read(), 1000)
    assert out == PAYLOAD
    assert decoder.trailers == TRAILERS
    sigv4.verify_chunk_signatures(ctx, decoder)


# --------------------------------------------------------------------------------------
# Checksums
# --------------------------------------------------------------------------------------

CHECK = b"123456789"  # the catalogue "check" input of every CRC


@pytest.mark.parametrize(("algorithm", "digest"), [
    ("crc32", bytes.fromhex("cbf43926")),
    ("crc32c", bytes.fromhex("e3069283")),
    ("crc64nvme", bytes.fromhex("ae8b14860a799888")),
    ("sha1", hashlib.sha1(CHECK).digest()),
    ("sha256", hashlib.sha256(CHECK).digest()),
])
def test_checksum_check_values(algorithm: str, digest: bytes) -> None:
    summer = Checksummer(algorithm.upper())
    for byte in CHECK:
        summer.update(bytes([byte]))
    assert summer.digest_b64() == base64.b64encode(digest).decode()


@pytest.mark.parametrize("algorithm", CHECKSUM_ALGORITHMS)
def test_checksums_match_reference_implementations(algorithm: str) -> None:
    data = b"hello world"
    reference: dict[str, bytes] = {
        "crc32": zlib.crc32(data).to_bytes(4, "big"),
        "crc32c": checksums.crc32c(data).to_bytes(4, "big"),
        "crc64nvme": checksums.crc64nvme(data).to_bytes(8, "big"),
        "sha1": hashlib.sha1(data).digest(),
        "sha256": hashlib.sha256(data).digest(),
    }
    summer = Checksummer(algorithm)
    summer.update(data[:4])
    summer.update(data[4:])
    assert summer.digest_b64() == base64.b64encode(reference[algorithm]).decode()
    empty = Checksummer(algorithm)
    assert len(base64.b64decode(empty.digest_b64())) == len(reference[algorithm])


def test_crc32_of_hello_world_as_s3_encodes_it() -> None:
    summer = Checksummer("crc32")
    summer.update(b"hello world")
    assert summer.digest_b64() == "DUoRhQ=="


def test_unknown_checksum_algorithm() -> None:
    with pytest.raises(ValueError, match="md5"):
        Checksummer("md5")


# -- generic SigV4 signers (no x-amz-content-sha256): the admin API -----------------------


def generic_signed(method: str, url: str, data: bytes) -> RequestView:
    """A request signed as botocore's plain SigV4Auth signs it (no x-amz-content-sha256; the
    signature covers the SHA-256 of the body)."""
    request = AWSRequest(method, url, headers={"content-type": "application/json"}, data=data)
    botocore.auth.SigV4Auth(Credentials(AK, SECRET), "s3", "us-east-1").add_auth(request)
    prepared = request.prepare()
    return wire_view(method, prepared.url, dict(prepared.headers))


@pytest.mark.usefixtures("frozen_botocore")
def test_generic_signer_is_refused_where_the_payload_header_is_required() -> None:
    req = generic_signed("POST", "http://node.test/admin/users", b'{"username": "a"}')
    assert "x-amz-content-sha256" not in req.headers
    with pytest.raises(SigV4Error) as info:
        sigv4.parse_auth(req)
    assert info.value.code == "InvalidRequest"


@pytest.mark.usefixtures("frozen_botocore")
def test_generic_signer_verifies_against_the_sha256_of_the_body() -> None:
    body = b'{"username": "a"}'
    req = generic_signed("POST", "http://node.test/admin/users", body)
    auth = sigv4.parse_auth(req, payload_header_required=False)
    assert auth is not None and auth.payload_from_body
    sigv4.check_claims(auth, req, BOTO_NOW, REGIONS)
    with pytest.raises(ValueError):
        sigv4.verify_signature(auth, req, SECRET)  # not before the body has been hashed
    hashed = replace(auth, payload_hash=hashlib.sha256(body).hexdigest())
    sigv4.verify_signature(hashed, req, SECRET)
    tampered = replace(auth, payload_hash=hashlib.sha256(body + b" ").hexdigest())
    with pytest.raises(SigV4Error) as info:
        sigv4.verify_signature(tampered, req, SECRET)
    assert info.value.code == "SignatureDoesNotMatch"


def test_verify_is_check_claims_then_verify_signature() -> None:
    auth = sigv4.parse_auth(GET_OBJECT)
    assert auth is not None
    expected = sigv4.verify(auth, GET_OBJECT, SECRET, NOW, REGIONS)
    sigv4.check_claims(auth, GET_OBJECT, NOW, REGIONS)
    assert sigv4.verify_signature(auth, GET_OBJECT, SECRET) == expected
    with pytest.raises(SigV4Error) as info:
        sigv4.check_claims(auth, GET_OBJECT, NOW + timedelta(hours=1), REGIONS)
    assert info.value.code == "RequestTimeTooSkewed"
