"""SigV2 verification (objstore/http/sigv2.py) against vectors computed elsewhere: the
examples of AWS's "Signing and authenticating REST requests" (S3 developer guide, the
documentation's example key) and botocore's HmacV1Auth / HmacV1QueryAuth."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from objstore.http import sigv2
from objstore.http.sigv4 import RequestView, SigV4Error

DOC_AK = "AKIAIOSFODNN7EXAMPLE"
DOC_SK = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
DOC_TIME = datetime(2007, 3, 27, 19, 36, 42, tzinfo=UTC)


def view(method: str, path: str, query: str = "", **headers: str) -> RequestView:
    return RequestView(method, path, query,
                       {k.replace("_", "-").lower(): v for k, v in headers.items()})


def test_aws_doc_object_get() -> None:
    # S3 developer guide, "Object GET": the virtual-host request for photos/puppy.jpg.
    req = view("GET", "/photos/puppy.jpg",
               authorization="AWS " + DOC_AK + ":" + "bWq2s1WEIj+Ydj0vQ697zp+IXMU=",
               date="Tue, 27 Mar 2007 19:36:42 +0000", host="johnsmith.s3.amazonaws.com")
    auth = sigv2.parse_auth_v2(req)
    assert not auth.presigned and auth.access_key == DOC_AK
    sigv2.verify_v2(auth, req, DOC_SK, DOC_TIME, vhost_bucket="johnsmith")
    expected = (b"GET\n\n\nTue, 27 Mar 2007 19:36:42 +0000\n/johnsmith/photos/puppy.jpg")
    assert expected in list(sigv2.strings_to_sign(auth, req, "johnsmith"))


def test_aws_doc_object_put() -> None:
    req = view("PUT", "/photos/puppy.jpg",
               authorization="AWS " + DOC_AK + ":" + "MyyxeRY7whkBe+bq8fHCL/2kKUg=",
               content_type="image/jpeg", content_length="94328",
               date="Tue, 27 Mar 2007 21:15:45 +0000")
    sigv2.verify_v2(sigv2.parse_auth_v2(req), req, DOC_SK,
                    datetime(2007, 3, 27, 21, 15, 45, tzinfo=UTC), vhost_bucket="johnsmith")


def test_aws_doc_list_with_query_not_signed() -> None:
    # "List": prefix and max-keys are not sub-resources, so not in the string to sign.
    req = view("GET", "/", "prefix=photos&max-keys=50&marker=puppy",
               authorization="AWS " + DOC_AK + ":" "htDYFYduRNen8P9ZfE/s9SuKy0U=",
               date="Tue, 27 Mar 2007 19:42:41 +0000", user_agent="Mozilla/5.0")
    sigv2.verify_v2(sigv2.parse_auth_v2(req), req, DOC_SK,
                    datetime(2007, 3, 27, 19, 42, 41, tzinfo=UTC), vhost_bucket="johnsmith")


def test_aws_doc_fetch_acl_subresource() -> None:
    req = view("GET", "/", "acl",
               authorization="AWS " + DOC_AK + ":" + "c2WLPFtWHVgbEmeEG93a4cG37dM=",
               date="Tue, 27 Mar 2007 19:44:46 +0000")
    sigv2.verify_v2(sigv2.parse_auth_v2(req), req, DOC_SK,
                    datetime(2007, 3, 27, 19, 44, 46, tzinfo=UTC), vhost_bucket="johnsmith")


def test_aws_doc_delete_with_x_amz_date_signs_an_empty_date() -> None:
    req = view("DELETE", "/johnsmith/photos/puppy.jpg",
               authorization="AWS " + DOC_AK + ":" "R4dJ53KECjStyBO5iTBJZ4XVOaI=",
               user_agent="dotnet", host="s3.us-west-1.amazonaws.com",
               date="Tue, 27 Mar 2007 21:20:27 +0000",
               x_amz_date="Tue, 27 Mar 2007 21:20:26 +0000")
    auth = sigv2.parse_auth_v2(req)
    sigv2.verify_v2(auth, req, DOC_SK, datetime(2007, 3, 27, 21, 20, 26, tzinfo=UTC))


def test_aws_doc_upload_with_amz_headers_canonicalised() -> None:
    # "Upload": x-amz-meta-reviewedby's two values joined with ",", names sorted.
    req = view("PUT", "/db-backup.dat.gz",
               authorization="AWS " + DOC_AK + ":" + "ilyl83RwaSoYIEdixDQcA4OnAnc=",
               user_agent="curl/7.15.5", host="static.johnsmith.net:8080",
               date="Tue, 27 Mar 2007 21:06:08 +0000", x_amz_acl="public-read",
               content_type="application/x-download",
               content_md5="4gJE4saaMU4BqNR0kLY+lw==",
               x_amz_meta_reviewedby="joe@johnsmith.net,jane@johnsmith.net",
               x_amz_meta_filechecksum="0x02661779", x_amz_meta_checksumalgorithm="crc32",
               content_disposition="attachment; filename=database.dat",
               content_encoding="gzip", content_length="5913339")
    sigv2.verify_v2(sigv2.parse_auth_v2(req), req, DOC_SK,
                    datetime(2007, 3, 27, 21, 6, 8, tzinfo=UTC),
                    vhost_bucket="static.johnsmith.net")


def test_aws_doc_presigned_url() -> None:
    # "Query string request authentication": the documented example URL.
    query = (f"AWSAccessKeyId={DOC_AK}&Signature=NpgCjnDzrM%2BWFzoENXmpNDUsSn8%3D"
             "&Expires=1175139620")
    req = view("GET", "/photos/puppy.jpg", query)
    auth = sigv2.parse_auth_v2(req)
    assert auth.presigned and auth.expires_text == "1175139620"
    sigv2.verify_v2(auth, req, DOC_SK, datetime.fromtimestamp(1175139000, UTC),
                    vhost_bucket="johnsmith")
    with pytest.raises(SigV4Error) as expired:
        sigv2.verify_v2(auth, req, DOC_SK, datetime.fromtimestamp(1175139621, UTC),
                        vhost_bucket="johnsmith")
    assert expired.value.code == "AccessDenied"


# Computed with botocore 1.43's HmacV1Auth / HmacV1QueryAuth (signature_version "s3",
# path-style endpoint http://127.0.0.1:9000), key pair below.
BOTO_AK, BOTO_SK = "AKIDEXAMPLE", "secret/+key"


def botocore_presign(method: str, path: str, query: str, expires: int) -> str:
    """The query of the URL botocore's HmacV1QueryAuth presigns."""
    pytest.importorskip("botocore")
    from botocore.auth import HmacV1QueryAuth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    url = "http://127.0.0.1:9000" + path + ("?" + query if query else "")
    request = AWSRequest(method=method, url=url)
    signer = HmacV1QueryAuth(Credentials(BOTO_AK, BOTO_SK), expires=expires)
    signer.add_auth(request)
    return request.prepare().url.partition("?")[2]


def test_botocore_presigned_urls_verify(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("time.time", lambda: 1_700_000_000.0)
    now = datetime.fromtimestamp(1_700_000_000, UTC)
    for path, params in [("/bucket/key%20with%20space", ""),
                         ("/bucket/k", "versionId=v%201&response-content-type=a%2Fb"),
                         ("/bucket", "acl"), ("/bucket", "acl="), ("/bucket/%C3%A9t%C3%A9", ""),
                         ("/bucket/k", "uploadId=u&partNumber=2&prefix=p")]:
        query = botocore_presign("GET", path, params, 300)
        req = view("GET", path, query)
        auth = sigv2.parse_auth_v2(req)
        sigv2.verify_v2(auth, req, BOTO_SK, now)
        with pytest.raises(SigV4Error):
            sigv2.verify_v2(auth, req, BOTO_SK, now + timedelta(seconds=301))
        with pytest.raises(SigV4Error):  # another resource
            sigv2.verify_v2(auth, view("GET", path + "x", query), BOTO_SK, now)


def test_botocore_header_auth_verifies() -> None:
    pytest.importorskip("botocore")
    from botocore.auth import HmacV1Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    request = AWSRequest(method="PUT", url="http://127.0.0.1:9000/b/k?tagging",
                         headers={"Content-Type": "text/plain", "x-amz-meta-a": " x ",
                                  "X-Amz-Acl": "private"}, data=b"hi")
    HmacV1Auth(Credentials(BOTO_AK, BOTO_SK)).add_auth(request)
    prepared = request.prepare()
    headers = {k.lower(): v.decode() if isinstance(v, bytes) else v
               for k, v in prepared.headers.items()}
    req = RequestView("PUT", "/b/k", "tagging", headers)
    auth = sigv2.parse_auth_v2(req)
    sigv2.verify_v2(auth, req, BOTO_SK, datetime.now(UTC))
    for name, value in [("x-amz-meta-a", "y"), ("content-type", "a/b"), ("x-amz-acl", "public")]:
        tampered = RequestView("PUT", "/b/k", "tagging", {**headers, name: value})
        with pytest.raises(SigV4Error) as refused:
            sigv2.verify_v2(auth, tampered, BOTO_SK, datetime.now(UTC))
        assert refused.value.code == "SignatureDoesNotMatch"
    added = RequestView("PUT", "/b/k", "tagging", {**headers, "x-amz-copy-source": "/o/k"})
    with pytest.raises(SigV4Error):
        sigv2.verify_v2(auth, added, BOTO_SK, datetime.now(UTC))
    other_sub = RequestView("PUT", "/b/k", "acl", headers)
    with pytest.raises(SigV4Error):
        sigv2.verify_v2(auth, other_sub, BOTO_SK, datetime.now(UTC))
    with pytest.raises(SigV4Error) as skewed:
        sigv2.verify_v2(auth, req, BOTO_SK, datetime.now(UTC) + timedelta(minutes=16))
    assert skewed.value.code == "RequestTimeTooSkewed"


@pytest.mark.parametrize("authorization", ["AWS", "AWS nocolon", "AWS :sig", "AWS ak:",
                                           "AWS ak:!!notbase64", "AWS ak:c2hvcnQ="])
def test_malformed_header_is_a_4xx_code(authorization: str) -> None:
    req = view("GET", "/b", authorization=authorization, date="Tue, 27 Mar 2007 19:36:42 GMT")
    with pytest.raises(SigV4Error) as refused:
        sigv2.verify_v2(sigv2.parse_auth_v2(req), req, "k", DOC_TIME)
    assert refused.value.code in {"InvalidArgument", "SignatureDoesNotMatch"}


@pytest.mark.parametrize("query", ["AWSAccessKeyId=a&Signature=x", "AWSAccessKeyId=a&Expires=1",
                                   "AWSAccessKeyId=a&Expires=soon&Signature=AAAA",
                                   "AWSAccessKeyId=a&AWSAccessKeyId=b&Expires=1&Signature=x"])
def test_malformed_presigned_is_access_denied(query: str) -> None:
    with pytest.raises(SigV4Error) as refused:
        sigv2.parse_auth_v2(view("GET", "/b/k", query))
    assert refused.value.code in {"AccessDenied", "SignatureDoesNotMatch"}


def test_missing_date_is_refused() -> None:
    with pytest.raises(SigV4Error) as refused:
        sigv2.parse_auth_v2(view("GET", "/b", authorization="AWS ak:" + "A" * 27 + "="))
    assert refused.value.code == "AccessDenied"


def test_is_v2() -> None:
    assert sigv2.is_v2(view("GET", "/", authorization="AWS a:b"))
    assert not sigv2.is_v2(view("GET", "/", authorization="AWS4-HMAC-SHA256 Credential=x"))
    assert sigv2.is_v2(view("GET", "/", "AWSAccessKeyId=a&Expires=1&Signature=s"))
    assert not sigv2.is_v2(view("GET", "/", "X-Amz-Algorithm=a&Signature=s"))
    assert not sigv2.is_v2(view("GET", "/", "prefix=a"))
