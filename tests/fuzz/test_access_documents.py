"""The access documents a client sends, built from their real shapes so examples get past
the first check: bucket policies (Principal, NotPrincipal, NotAction, NotResource and
Condition blocks of the operators and keys people use, with hostile values), ACLs
(AccessControlPolicy XML with any grantee type, id, URI and permission; x-amz-grant-*
headers) and POST policies (every condition form with hostile operands, any form fields).
Each is a value or a 4xx S3 error, never another exception (a 500); what is accepted also
works downstream: a policy evaluates for any caller and condition values, an ACL renders,
parses back the same and is a row the cluster accepts, a POST policy's verdict is a 4xx
or success for any form. The existing fuzz of raw bytes and JSON is in
tests/unit/test_bucket_policy.py, tests/unit/test_access_xml.py, tests/unit/test_post_form.py."""

from __future__ import annotations

import base64
import datetime
import json
from typing import Any
from xml.sax.saxutils import escape

from hypothesis import given
from hypothesis import strategies as st

from objstore.convergence.row_rules import row_problem
from objstore.errors import S3Error
from objstore.http import post_policy
from objstore.iam.acl_rules import ALL_USERS, AUTHENTICATED_USERS, LOG_DELIVERY, PERMISSIONS
from objstore.iam.bucket_policy import Caller, PolicyDocumentError, parse_bucket_policy
from objstore.iam.conditions import FixedValues
from objstore.meta.records import ObjectRecord
from objstore.s3.acl import acl_document
from objstore.s3.acl_headers import requested_acl
from objstore.s3.post_object import form_headers
from tests.fuzz.outcomes import Refused, outcome
from tests.fuzz.strategies import any_text, xml_text

BUCKET = "bkt"
NS = 'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'
XSI = 'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"'
NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)

# -- bucket policies ----------------------------------------------------------------------

OPERATORS = ["StringEquals", "StringNotEquals", "StringLike", "StringNotLike",
             "StringEqualsIgnoreCase", "NumericEquals", "NumericLessThan",
             "NumericGreaterThanEquals", "DateGreaterThan", "DateLessThan", "Bool",
             "IpAddress", "NotIpAddress", "Null", "ArnLike", "ForAnyValue:StringEquals",
             "ForAllValues:StringLike", "StringEqualsIfExists", "BinaryEquals", "Sideways"]
KEYS = ["aws:SourceIp", "aws:SecureTransport", "aws:Referer", "aws:UserAgent",
        "aws:CurrentTime", "aws:EpochTime", "s3:prefix", "s3:delimiter", "s3:max-keys",
        "s3:x-amz-acl", "s3:ExistingObjectTag/team", "s3:RequestObjectTag/team",
        "s3:x-amz-server-side-encryption", "s3:signatureversion", "aws:username",
        "s3:ExistingObjectTag/", "unknown:key"]
VALUES = ["10.0.0.0/8", "::1/128", "300.1.1.1/40", "true", "false", "2026-01-01T00:00:00Z",
          "1e308", "-0", "NaN", "*", "?", "", "arn:aws:s3:::bkt/*", "AES256", "AWS4-HMAC-SHA256"]
condition_value = st.one_of(st.sampled_from(VALUES), any_text, st.integers(), st.booleans(),
                            st.none(), st.floats())
condition_block = st.dictionaries(
    st.one_of(st.sampled_from(OPERATORS), any_text),
    st.one_of(st.dictionaries(st.one_of(st.sampled_from(KEYS), any_text),
                              st.one_of(condition_value, st.lists(condition_value,
                                                                  max_size=3)),
                              max_size=3), condition_value),
    max_size=3)
principal = st.one_of(
    st.just("*"), st.sampled_from([{"AWS": "*"}, {"AWS": ["*"]}, {"CanonicalUser": "u1"},
                                   {"AWS": "arn:aws:iam::123456789012:root"},
                                   {"Service": "s3.amazonaws.com"}, {}]),
    st.builds(lambda names: {"AWS": names},
              st.lists(st.one_of(any_text, st.just("u-alice"),
                                 st.builds(lambda n: f"arn:aws:iam::000000000000:user/{n}",
                                           any_text)), max_size=3)),
    any_text, st.integers())
actions = st.one_of(st.sampled_from(["s3:GetObject", "s3:*", "*", "s3:Get*", "s3:List?ucket",
                                     "iam:PassRole", "s3:"]), any_text)
resources = st.one_of(st.sampled_from([f"arn:aws:s3:::{BUCKET}", f"arn:aws:s3:::{BUCKET}/*",
                                       "arn:aws:s3:::other/*", "*", "arn:aws:s3:::bk?/*"]),
                      any_text.map(lambda t: f"arn:aws:s3:::{BUCKET}/{t}"), any_text)


def _one_or_list(items: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(items, st.lists(items, max_size=3))


statement = st.fixed_dictionaries(
    {"Effect": st.sampled_from(["Allow", "Deny", "allow", "Maybe"])},
    optional={"Sid": st.one_of(any_text, st.integers()),
              "Principal": principal, "NotPrincipal": principal,
              "Action": _one_or_list(actions), "NotAction": _one_or_list(actions),
              "Resource": _one_or_list(resources), "NotResource": _one_or_list(resources),
              "Condition": condition_block})
bucket_policies = st.fixed_dictionaries(
    {"Statement": st.one_of(st.lists(statement, max_size=3), statement)},
    optional={"Version": st.sampled_from(["2012-10-17", "2008-10-17", "2020-01-01"]),
              "Id": any_text})
request_values = st.dictionaries(st.sampled_from([k.lower() for k in KEYS]),
                                 st.one_of(st.sampled_from(VALUES), any_text), max_size=4)
callers = st.one_of(st.just(Caller(None)), st.builds(Caller, any_text, any_text),
                    st.just(Caller("u-alice", "alice")))


@given(bucket_policies, callers, request_values, actions, resources)
def test_a_bucket_policy_is_malformed_or_evaluates(document: dict[str, Any], caller: Caller,
                                                   found: dict[str, str], action: str,
                                                   resource: str) -> None:
    """Parsed as PutBucketPolicy does: MalformedPolicy (400) or a policy that answers for
    any caller, action, resource and condition values, and whose public flag and named
    principals (what PutBucketPolicy checks next) are computed without error."""
    try:
        policy = parse_bucket_policy(json.dumps(document), BUCKET)
    except PolicyDocumentError:
        return
    deny, allow = policy.verdict(caller, (action,), resource, FixedValues(found))
    assert deny is None or not deny.allow
    assert allow is None or allow.allow
    assert isinstance(policy.public, bool)
    assert all(isinstance(name, str) for name in policy.principal_names())
    assert isinstance(policy.reads_existing_tags, bool)


# -- ACLs ---------------------------------------------------------------------------------

GRANTEE_TYPES = ["CanonicalUser", "Group", "AmazonCustomerByEmail", "xsi:Group", "", "Other"]
URIS = [ALL_USERS, AUTHENTICATED_USERS, LOG_DELIVERY, "http://example.com/group"]


def _grant(kind: str, ident: str, permission: str, typed: bool) -> str:
    attribute = f' {XSI} xsi:type="{escape(kind)}"' if typed else ""
    field = "URI" if kind.endswith("Group") else "ID"
    return (f"<Grant><Grantee{attribute}><{field}>{escape(ident)}</{field}></Grantee>"
            f"<Permission>{escape(permission)}</Permission></Grant>")


grants_xml = st.lists(st.builds(
    _grant, st.sampled_from(GRANTEE_TYPES),
    st.one_of(st.sampled_from([*URIS, "u-owner", "u-alice"]), xml_text),
    st.one_of(st.sampled_from([*PERMISSIONS, "read", "ALL"]), xml_text), st.booleans()),
    max_size=4).map("".join)
acl_bodies = st.builds(
    lambda owner, grants, listed: (
        f"<AccessControlPolicy {NS}><Owner><ID>{escape(owner)}</ID></Owner>"
        + (f"<AccessControlList>{grants}</AccessControlList>" if listed else grants)
        + "</AccessControlPolicy>").encode(),
    st.one_of(st.just("u-owner"), xml_text), grants_xml, st.booleans())
grant_header_value = st.one_of(
    st.builds(lambda kind, value: f'{kind}="{value}"',
              st.sampled_from(["id", "uri", "emailAddress", "ID", ""]),
              st.one_of(st.sampled_from(URIS), any_text)),
    any_text).map(lambda v: v.replace("\udcff", ""))
acl_headers = st.dictionaries(
    st.sampled_from(["x-amz-acl", "x-amz-grant-read", "x-amz-grant-write",
                     "x-amz-grant-read-acp", "x-amz-grant-write-acp",
                     "x-amz-grant-full-control"]),
    st.one_of(grant_header_value,
              st.lists(grant_header_value, min_size=2, max_size=3).map(", ".join),
              st.sampled_from(["private", "public-read", "bucket-owner-read", "Private"])),
    max_size=3)


@given(acl_headers, st.one_of(acl_bodies, st.just(b"")))
def test_an_acl_is_a_4xx_or_a_stored_acl(headers: dict[str, str], body: bytes) -> None:
    """PutObjectAcl's reading of headers and body: a 4xx, or an ACL that renders as the
    GetObjectAcl document, reads back the same from it, and is a row the cluster takes."""
    acl = outcome(requested_acl, headers, body, "u-owner", "u-bucket-owner")
    if acl is None or isinstance(acl, Refused):
        return
    document = acl_document(acl, "owner")
    again = requested_acl({}, document, "u-owner")
    assert again is not None
    assert [(g.grantee, g.permission) for g in again.grants] == \
        [(g.grantee, g.permission) for g in acl.grants]
    row = ObjectRecord(BUCKET, "k", "null", "00000000-0000-4000-8000-000000000000", 0, "e",
                       1.0, acl=acl.to_json())
    assert row_problem(row) is None


# -- POST policies ------------------------------------------------------------------------

FIELDS = ["$key", "$bucket", "$Content-Type", "$x-amz-meta-a", "$acl",
          "$success_action_status", "$success_action_redirect", "$x-amz-meta-", "$",
          "key", "$tagging"]
operand = st.one_of(st.sampled_from(["", "uploads/", "${filename}", "bkt", "201", "0"]),
                    any_text, st.integers(), st.floats(), st.booleans(), st.none(),
                    st.lists(st.integers(), max_size=2))
post_condition = st.one_of(
    st.builds(lambda op, name, value: [op, name, value],
              st.sampled_from(["eq", "starts-with", "EQ", "le"]),
              st.one_of(st.sampled_from(FIELDS), any_text), operand),
    st.builds(lambda low, high: ["content-length-range", low, high],
              st.one_of(st.integers(-5, 2**70), operand), st.one_of(st.integers(-5, 2**70),
                                                                    operand)),
    st.dictionaries(st.one_of(st.sampled_from([f.lstrip("$") for f in FIELDS]), any_text),
                    operand, min_size=1, max_size=2),
    st.lists(operand, max_size=4))
post_policies = st.fixed_dictionaries(
    {"expiration": st.one_of(st.sampled_from(["2026-01-02T00:00:00Z",
                                              "2026-01-02T00:00:00.000Z", "2025-01-01",
                                              "9999-99-99T99:99:99Z"]), operand),
     "conditions": st.lists(post_condition, max_size=5)})
form_fields = st.dictionaries(
    st.sampled_from(["key", "content-type", "x-amz-meta-a", "acl", "success_action_status",
                     "success_action_redirect", "tagging", "bucket", "x-amz-checksum-crc32",
                     "x-amz-object-lock-mode", "x-amz-server-side-encryption"]),
    any_text, max_size=5)


@given(post_policies, form_fields, st.integers(0, 2**40))
def test_a_post_policy_is_a_4xx_or_a_verdict(document: dict[str, Any],
                                            fields: dict[str, str], length: int) -> None:
    """A form's policy (base64 JSON) and fields: InvalidPolicyDocument, AccessDenied for
    a condition the form fails, or success; and the fields become PutObject headers or a
    4xx (a bad tagging document, encryption fields)."""
    encoded = base64.b64encode(json.dumps(document).encode()).decode()
    policy = outcome(post_policy.parse_policy, encoded)
    if not isinstance(policy, Refused):
        outcome(post_policy.check_policy, policy, fields, BUCKET, length, NOW)
    outcome(form_headers, fields)


def test_the_strategies_reach_acceptance() -> None:
    """The shapes above are not all refused at the first check (else the properties would
    test nothing): one of each is accepted."""
    policy = parse_bucket_policy(json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
         "Resource": f"arn:aws:s3:::{BUCKET}/*",
         "Condition": {"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}}}]}), BUCKET)
    assert policy.public is False
    body = (f"<AccessControlPolicy {NS}><Owner><ID>u-owner</ID></Owner><AccessControlList>"
            + _grant("Group", ALL_USERS, "READ", True) + "</AccessControlList>"
            "</AccessControlPolicy>").encode()
    acl = requested_acl({}, body, "u-owner")
    assert acl is not None and acl.public
    encoded = base64.b64encode(json.dumps({"expiration": "2026-01-02T00:00:00Z",
                                           "conditions": [["eq", "$key", "k"]]}).encode())
    post_policy.check_policy(post_policy.parse_policy(encoded.decode()), {"key": "k"},
                             BUCKET, 1, NOW)
    try:
        post_policy.check_policy(post_policy.parse_policy(encoded.decode()), {"key": "x"},
                                 BUCKET, 1, NOW)
    except S3Error as refused:
        assert refused.status == 403
    else:
        raise AssertionError("a failed condition was accepted")
