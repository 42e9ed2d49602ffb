"""CORS rules (objstore/http/cors.py) and the CORSConfiguration XML (objstore/s3/cors.py):
AWS's validation, wildcard matching, preflight and actual-response headers; any body is a
4xx S3 error or a configuration, never an exception of another kind."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from objstore.errors import S3Error
from objstore.http import cors
from objstore.s3.cors import cors_document, parse_cors

DOC = b"""<CORSConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
<CORSRule><ID>web</ID><AllowedOrigin>https://*.example.com</AllowedOrigin>
<AllowedMethod>GET</AllowedMethod><AllowedMethod>PUT</AllowedMethod>
<AllowedHeader>x-amz-*</AllowedHeader><AllowedHeader>Content-Type</AllowedHeader>
<ExposeHeader>ETag</ExposeHeader><MaxAgeSeconds>600</MaxAgeSeconds></CORSRule>
<CORSRule><AllowedOrigin>*</AllowedOrigin><AllowedMethod>HEAD</AllowedMethod></CORSRule>
</CORSConfiguration>"""


def test_parse_round_trip_and_json() -> None:
    rules = parse_cors(DOC)
    assert rules[0].rule_id == "web" and rules[0].max_age_seconds == 600
    assert cors.rules_from_json(cors.to_json(rules)) == rules
    assert parse_cors(cors_document(rules)) == rules


@pytest.mark.parametrize("pattern,text,matches", [
    ("*", "https://a", True), ("https://*.example.com", "https://x.example.com", True),
    ("https://*.example.com", "https://example.com", False), ("http://a", "http://a", True),
    ("http://a", "http://A", False), ("a*a", "a", False), ("a*a", "aa", True),
])
def test_wildcard(pattern: str, text: str, matches: bool) -> None:
    assert cors.wildcard_match(pattern, text) is matches


def test_preflight() -> None:
    rules = parse_cors(DOC)
    headers = cors.preflight(rules, {"origin": "https://app.example.com",
                                     "access-control-request-method": "PUT",
                                     "access-control-request-headers": "X-Amz-Date, content-type"})
    assert headers["Access-Control-Allow-Origin"] == "https://app.example.com"
    assert headers["Access-Control-Allow-Methods"] == "GET, PUT"
    assert headers["Access-Control-Allow-Headers"] == "x-amz-date, content-type"
    assert headers["Access-Control-Max-Age"] == "600"
    assert headers["Access-Control-Allow-Credentials"] == "true"
    star = cors.preflight(rules, {"origin": "http://other",
                                  "access-control-request-method": "HEAD"})
    assert star["Access-Control-Allow-Origin"] == "*"
    assert "Access-Control-Allow-Credentials" not in star
    for request, code in [
        ({"origin": "http://other", "access-control-request-method": "PUT"}, "CORSResponse"),
        ({"origin": "https://app.example.com", "access-control-request-method": "PUT",
          "access-control-request-headers": "authorization"}, "CORSResponse"),
        ({"access-control-request-method": "GET"}, "BadRequest"),
        ({"origin": "http://a"}, "BadRequest"),
        ({"origin": "http://a", "access-control-request-method": "PATCH"}, "BadRequest"),
    ]:
        with pytest.raises(S3Error) as refused:
            cors.preflight(rules, request)
        assert refused.value.code == code
    with pytest.raises(S3Error) as none:
        cors.preflight(None, {"origin": "http://a", "access-control-request-method": "GET"})
    assert (none.value.code, none.value.status) == ("CORSResponse", 403)


def test_actual_response_headers() -> None:
    rules = parse_cors(DOC)
    got = cors.actual(rules, "https://app.example.com", "GET")
    assert got["Access-Control-Expose-Headers"] == "ETag" and "Origin" in got["Vary"]
    assert cors.actual(rules, "https://evil.test", "GET") == {}
    assert cors.actual(rules, None, "GET") == {}
    assert cors.actual(None, "https://app.example.com", "GET") == {}


def rule_xml(inner: str) -> bytes:
    return f"<CORSConfiguration><CORSRule>{inner}</CORSRule></CORSConfiguration>".encode()


@pytest.mark.parametrize("body,code", [
    (rule_xml("<AllowedOrigin>*</AllowedOrigin>"), "MalformedXML"),
    (rule_xml("<AllowedMethod>GET</AllowedMethod>"), "MalformedXML"),
    (rule_xml("<AllowedOrigin>*</AllowedOrigin><AllowedMethod>PATCH</AllowedMethod>"),
     "InvalidRequest"),
    (rule_xml("<AllowedOrigin>*.*</AllowedOrigin><AllowedMethod>GET</AllowedMethod>"),
     "InvalidRequest"),
    (rule_xml("<AllowedOrigin>a</AllowedOrigin><AllowedMethod>GET</AllowedMethod>"
              "<AllowedHeader>**</AllowedHeader>"), "InvalidRequest"),
    (rule_xml("<AllowedOrigin>a</AllowedOrigin><AllowedMethod>GET</AllowedMethod>"
              "<ExposeHeader>*</ExposeHeader>"), "InvalidRequest"),
    (rule_xml("<AllowedOrigin>a</AllowedOrigin><AllowedMethod>GET</AllowedMethod>"
              "<MaxAgeSeconds>-1</MaxAgeSeconds>"), "MalformedXML"),
    (rule_xml("<AllowedOrigin>a</AllowedOrigin><AllowedMethod>GET</AllowedMethod>"
              f"<ID>{'i' * 256}</ID>"), "InvalidArgument"),
    (b"<CORSConfiguration/>", "MalformedXML"),
    (b"<CORSConfiguration>" + b"<CORSRule><AllowedOrigin>a</AllowedOrigin><AllowedMethod>"
     b"GET</AllowedMethod></CORSRule>" * 101 + b"</CORSConfiguration>", "MalformedXML"),
    (b"not xml", "MalformedXML"),
])
def test_refusals(body: bytes, code: str) -> None:
    with pytest.raises(S3Error) as refused:
        parse_cors(body)
    assert refused.value.code == code and refused.value.status < 500


_TAGS = st.sampled_from(["AllowedOrigin", "AllowedMethod", "AllowedHeader", "ExposeHeader",
                         "MaxAgeSeconds", "ID", "Other"])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(_TAGS, st.text(max_size=12)), max_size=6), max_size=4),
       st.text(max_size=20), st.sampled_from(cors.METHODS + ("PATCH",)))
def test_any_document_is_a_4xx_or_rules(rules: list[list[tuple[str, str]]], origin: str,
                                        method: str) -> None:
    from xml.sax.saxutils import escape
    body = "<CORSConfiguration>" + "".join(
        "<CORSRule>" + "".join(f"<{t}>{escape(v)}</{t}>" for t, v in rule) + "</CORSRule>"
        for rule in rules) + "</CORSConfiguration>"
    try:
        parsed = parse_cors(body.encode("utf-8", "surrogatepass"))
    except S3Error as refused:
        assert refused.status < 500
        return
    try:
        cors.preflight(parsed, {"origin": origin, "access-control-request-method": method})
    except S3Error as refused:
        assert refused.status < 500
    cors.actual(parsed, origin, method)
