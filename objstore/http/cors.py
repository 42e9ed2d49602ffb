"""CORS rules and how a request is matched against them, as S3 does it: a rule set (a
bucket's CORS configuration, or the node-wide setting of the admin API and the console),
the first rule that allows an origin, a method and the requested headers, and the
Access-Control-* headers a preflight or an actual response carries.

Matching (AWS's): an AllowedOrigin or AllowedHeader may hold one "*" standing for any
text; origins are compared as sent, header names without regard to case; the method must
be one of the rule's AllowedMethods; every header a preflight names in
Access-Control-Request-Headers must be allowed by the same rule. The first matching rule
wins. Rules are also stored as JSON (`to_json` / `rules_from_json`).

Pure: no Twisted, no I/O. Validation of what a client puts is `validate_rules`, raising
S3Error with AWS's codes and messages.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from objstore.errors import S3Error

CORS_CONFIG_KEY = "cors"
METHODS = ("GET", "PUT", "HEAD", "POST", "DELETE")
MAX_RULES = 100
MAX_ID_LENGTH = 255
# Response headers the browser may read by default are not listed; S3 exposes none.
NO_RULE_MESSAGE = (
    "This CORS request is not allowed. This is usually because the evalution of Origin, "
    "request method / Access-Control-Request-Method or Access-Control-Request-Headers are "
    "not whitelisted by the resource's CORS spec."
)


@dataclass(frozen=True, slots=True)
class CorsRule:
    allowed_origins: tuple[str, ...]
    allowed_methods: tuple[str, ...]
    allowed_headers: tuple[str, ...] = ()
    expose_headers: tuple[str, ...] = ()
    max_age_seconds: int | None = None
    rule_id: str | None = None

    def allows(self, origin: str, method: str, request_headers: Sequence[str] = ()) -> bool:
        return (method in self.allowed_methods
                and any(wildcard_match(p, origin) for p in self.allowed_origins)
                and all(any(wildcard_match(p.lower(), h.lower()) for p in self.allowed_headers)
                        for h in request_headers))

    def to_dict(self) -> dict[str, object]:
        return {"origins": list(self.allowed_origins), "methods": list(self.allowed_methods),
                "headers": list(self.allowed_headers), "expose": list(self.expose_headers),
                "max_age": self.max_age_seconds, "id": self.rule_id}


def wildcard_match(pattern: str, text: str) -> bool:
    """`pattern` with at most one "*" (any text, possibly empty) against `text`."""
    head, star, tail = pattern.partition("*")
    if not star:
        return pattern == text
    return (len(text) >= len(head) + len(tail) and text.startswith(head)
            and text.endswith(tail))


def validate_rules(rules: Sequence[CorsRule]) -> None:
    """AWS's refusals of a CORS configuration."""
    if not rules:
        raise S3Error("MalformedXML", "A CORS configuration needs at least one CORSRule.")
    if len(rules) > MAX_RULES:
        raise S3Error("MalformedXML", f"A CORS configuration can have at most {MAX_RULES} "
                                      "rules.")
    for rule in rules:
        if not rule.allowed_origins or not rule.allowed_methods:
            raise S3Error("MalformedXML", "Each CORSRule needs AllowedOrigin and "
                                          "AllowedMethod.")
        for method in rule.allowed_methods:
            if method not in METHODS:
                raise S3Error("InvalidRequest", "Found unsupported HTTP method in CORS config. "
                                                f"Unsupported method is {method}")
        for origin in rule.allowed_origins:
            if origin.count("*") > 1:
                raise S3Error("InvalidRequest", f'AllowedOrigin "{origin}" can not have more '
                                                "than one wildcard.")
        for header in rule.allowed_headers:
            if header.count("*") > 1:
                raise S3Error("InvalidRequest", f'AllowedHeader "{header}" can not have more '
                                                "than one wildcard.")
        for header in rule.expose_headers:
            if "*" in header:
                raise S3Error("InvalidRequest", f'ExposeHeader "{header}" contains wildcard. '
                                                "We currently do not support wildcard for "
                                                "ExposeHeader.")
        if rule.rule_id is not None and len(rule.rule_id) > MAX_ID_LENGTH:
            raise S3Error("InvalidArgument", f"ID length should not exceed allowed limit of "
                                             f"{MAX_ID_LENGTH}")
        if rule.max_age_seconds is not None and rule.max_age_seconds < 0:
            raise S3Error("MalformedXML", "MaxAgeSeconds must not be negative.")


def to_json(rules: Sequence[CorsRule]) -> str:
    return json.dumps([rule.to_dict() for rule in rules], sort_keys=True)


def rules_from_json(text: str) -> tuple[CorsRule, ...]:
    return tuple(
        CorsRule(tuple(item["origins"]), tuple(item["methods"]), tuple(item["headers"]),
                 tuple(item["expose"]), item["max_age"], item["id"])
        for item in json.loads(text))


def node_rules(origins: Sequence[str]) -> tuple[CorsRule, ...]:
    """The one rule of the node-wide setting (`[server] cors_allowed_origins`) for the
    admin API and the console: the origins, every method they use, any request header
    (SigV4's among them), the headers a client reads."""
    if not origins:
        return ()
    return (CorsRule(tuple(origins), METHODS, ("*",),
                     ("ETag", "x-amz-request-id", "Content-Length", "Content-Type"), 600,
                     "node"),)


def first_match(rules: Sequence[CorsRule], origin: str, method: str,
                request_headers: Sequence[str] = ()) -> CorsRule | None:
    return next((rule for rule in rules if rule.allows(origin, method, request_headers)), None)


def requested_headers(value: str | None) -> list[str]:
    """Access-Control-Request-Headers as a list of names."""
    return [name.strip() for name in (value or "").split(",") if name.strip()]


def response_headers(rule: CorsRule, origin: str, *, preflight: bool,
                     request_headers: Sequence[str] = ()) -> dict[str, str]:
    """The Access-Control-* headers of a response to `origin` allowed by `rule`."""
    wildcard = "*" in rule.allowed_origins
    headers = {
        "Access-Control-Allow-Origin": "*" if wildcard else origin,
        "Access-Control-Allow-Methods": ", ".join(rule.allowed_methods),
        "Vary": "Origin, Access-Control-Request-Headers, Access-Control-Request-Method",
    }
    if not wildcard:
        headers["Access-Control-Allow-Credentials"] = "true"
    if rule.expose_headers:
        headers["Access-Control-Expose-Headers"] = ", ".join(rule.expose_headers)
    if rule.max_age_seconds is not None:
        headers["Access-Control-Max-Age"] = str(rule.max_age_seconds)
    if preflight and request_headers:
        headers["Access-Control-Allow-Headers"] = ", ".join(h.lower() for h in request_headers)
    return headers


def preflight(rules: Sequence[CorsRule] | None, headers: Mapping[str, str]
              ) -> dict[str, str]:
    """The headers of the answer to a preflight (OPTIONS) whose request headers are
    `headers` (lower-case names) under `rules` (None: CORS not configured); S3Error
    (400 BadRequest, 403 CORSResponse) when it is refused."""
    origin = headers.get("origin")
    if not origin:
        raise S3Error("BadRequest", "Insufficient information. Origin request header needed.")
    method = headers.get("access-control-request-method")
    if not method:
        raise S3Error("BadRequest", "Invalid Access-Control-Request-Method: null")
    if method not in METHODS:
        raise S3Error("BadRequest", f"Invalid Access-Control-Request-Method: {method[:64]}")
    if not rules:
        raise S3Error("CORSResponse", "CORS is not enabled for this bucket.")
    wanted = requested_headers(headers.get("access-control-request-headers"))
    rule = first_match(rules, origin, method, wanted)
    if rule is None:
        raise S3Error("CORSResponse", NO_RULE_MESSAGE)
    return response_headers(rule, origin, preflight=True, request_headers=wanted)


def actual(rules: Sequence[CorsRule] | None, origin: str | None, method: str
           ) -> dict[str, str]:
    """The headers an actual (non-preflight) response to `origin` carries: none without
    an Origin or a matching rule (the browser then refuses to show the answer)."""
    if not origin or not rules:
        return {}
    rule = first_match(rules, origin, method)
    if rule is None:
        return {}
    return response_headers(rule, origin, preflight=False)
