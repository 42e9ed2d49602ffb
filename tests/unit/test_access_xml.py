"""The access settings' request parsers (issue 29): ACLs (canned, x-amz-grant-* headers,
AccessControlPolicy XML), PublicAccessBlockConfiguration and OwnershipControls. Any input
is a value or an S3 error of status 4xx, never anything else (Hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from objstore.errors import S3Error
from objstore.iam.acl_rules import ALL_USERS, Grant
from objstore.iam.public_access import PublicAccessBlock
from objstore.s3.acl import requested_acl
from objstore.s3.bucket_policy import (
    checked_ownership,
    ownership_document,
    parse_ownership_controls,
    parse_public_access_block,
    public_access_block_document,
)

NS = 'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'
XSI = 'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"'


def refused(call, *args) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(S3Error) as caught:
        call(*args)
    assert caught.value.status < 500
    return caught.value.code


def test_acl_from_headers_and_xml() -> None:
    assert requested_acl({}, b"", "o") is None
    assert requested_acl({"x-amz-acl": "public-read"}, b"", "o").public  # type: ignore[union-attr]
    assert refused(requested_acl, {"x-amz-acl": "sideways"}, b"", "o") == "InvalidArgument"
    # a grantee no ACL document could carry (found by tests/fuzz/test_access_documents.py)
    assert refused(requested_acl, {"x-amz-grant-read": 'id="\x08"'}, b"", "o") \
        == "InvalidArgument"
    assert refused(requested_acl, {"x-amz-grant-read": f'id="{"u" * 300}"'}, b"", "o") \
        == "InvalidArgument"
    assert refused(requested_acl, {"x-amz-acl": "private", "x-amz-grant-read": 'id="u"'},
                   b"", "o") == "InvalidRequest"
    body = (f'<AccessControlPolicy {NS}><Owner><ID>o</ID></Owner><AccessControlList>'
            f'<Grant><Grantee {XSI} xsi:type="Group"><URI>{ALL_USERS}</URI></Grantee>'
            '<Permission>READ</Permission></Grant>'
            f'<Grant><Grantee {XSI} xsi:type="CanonicalUser"><ID>u-2</ID></Grantee>'
            '<Permission>WRITE</Permission></Grant>'
            '</AccessControlList></AccessControlPolicy>').encode()
    acl = requested_acl({}, body, "o")
    assert acl is not None and acl.grants == (Grant(ALL_USERS, "READ"), Grant("u-2", "WRITE"))
    bad_group = body.replace(ALL_USERS.encode(), b"http://example.com/everyone")
    assert refused(requested_acl, {}, bad_group, "o") == "MalformedACLError"
    bad_permission = body.replace(b">READ<", b">ALL<")
    assert refused(requested_acl, {}, bad_permission, "o") == "MalformedACLError"


def test_public_access_block_and_ownership_documents() -> None:
    block = PublicAccessBlock(True, False, True, False)
    assert parse_public_access_block(public_access_block_document(block)) == block
    assert parse_public_access_block(
        f"<PublicAccessBlockConfiguration {NS}/>".encode()) == PublicAccessBlock()
    assert refused(parse_public_access_block, f"<PublicAccessBlockConfiguration {NS}>"
                   "<BlockPublicAcls>yes</BlockPublicAcls>"
                   "</PublicAccessBlockConfiguration>".encode()) == "MalformedXML"
    assert parse_ownership_controls(ownership_document("ObjectWriter")) == "ObjectWriter"
    assert refused(parse_ownership_controls, f"<OwnershipControls {NS}><Rule><ObjectOwnership>"
                   "Nobody</ObjectOwnership></Rule></OwnershipControls>".encode()) \
        == "MalformedXML"
    assert refused(checked_ownership, "Everyone") == "InvalidArgument"


xml_like = st.one_of(
    st.binary(max_size=300),
    st.builds(lambda inner: f"<AccessControlPolicy {NS}>{inner}</AccessControlPolicy>"
              .encode(), st.text(max_size=200)),
    st.builds(lambda inner: f"<PublicAccessBlockConfiguration {NS}>{inner}"
              "</PublicAccessBlockConfiguration>".encode(), st.text(max_size=200)),
)


@settings(max_examples=150, deadline=None)
@given(xml_like, st.dictionaries(st.sampled_from(
    ["x-amz-acl", "x-amz-grant-read", "x-amz-grant-write", "x-amz-grant-full-control"]),
    st.text(max_size=60), max_size=3))
def test_any_acl_input_is_an_acl_or_a_4xx(body: bytes, headers: dict[str, str]) -> None:
    for parse in (lambda: requested_acl(headers, body, "o"),
                  lambda: parse_public_access_block(body),
                  lambda: parse_ownership_controls(body)):
        try:
            parse()
        except S3Error as error:
            assert error.status < 500
