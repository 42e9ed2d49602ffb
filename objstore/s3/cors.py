"""Bucket CORS of the S3 API: Put/Get/DeleteBucketCors (PUT/GET/DELETE /bucket?cors) and
its XML (CORSConfiguration), stored as the bucket's "cors" configuration document (so it
is replicated, exported and recovered like the others). The rules and their matching are
`objstore.http.cors`; the preflight and the headers of actual responses are answered by
the S3 API (s3/api.py) from the same document.
"""

from __future__ import annotations

from lxml import etree

from objstore.engine.bucket_config import BucketConfigService
from objstore.errors import S3Error
from objstore.http import cors
from objstore.http.error_xml import serialize, sub_element
from objstore.s3.call import S3Call, S3Response
from objstore.s3.xml import parse_document, s3_root

XML = "application/xml"
ROOT = "CORSConfiguration"
_RULE_FIELDS = {"AllowedOrigin", "AllowedMethod", "AllowedHeader", "ExposeHeader",
                "MaxAgeSeconds", "ID"}


def _local(element: etree._Element) -> str:
    return etree.QName(element).localname if isinstance(element.tag, str) else ""


def parse_cors(body: bytes) -> tuple[cors.CorsRule, ...]:
    """The rules of a CORSConfiguration body, validated as AWS does."""
    root = parse_document(body, ROOT)
    rules = []
    for element in root:
        if _local(element) != "CORSRule":
            raise S3Error("MalformedXML", f"Unexpected element {_local(element)!r}.")
        rules.append(_parse_rule(element))
    cors.validate_rules(rules)
    return tuple(rules)


def _parse_rule(element: etree._Element) -> cors.CorsRule:
    found: dict[str, list[str]] = {name: [] for name in _RULE_FIELDS}
    for child in element:
        name = _local(child)
        if name not in _RULE_FIELDS:
            raise S3Error("MalformedXML", f"Unexpected element {name!r} in CORSRule.")
        found[name].append((child.text or "").strip())
    if len(found["MaxAgeSeconds"]) > 1 or len(found["ID"]) > 1:
        raise S3Error("MalformedXML", "MaxAgeSeconds and ID may appear once per CORSRule.")
    max_age = None
    if found["MaxAgeSeconds"]:
        text = found["MaxAgeSeconds"][0]
        if not (text.isascii() and text.isdigit()) or len(text) > 10:
            raise S3Error("MalformedXML", "MaxAgeSeconds must be a whole number of seconds.")
        max_age = int(text)
    return cors.CorsRule(
        allowed_origins=tuple(found["AllowedOrigin"]),
        allowed_methods=tuple(found["AllowedMethod"]),
        allowed_headers=tuple(found["AllowedHeader"]),
        expose_headers=tuple(found["ExposeHeader"]),
        max_age_seconds=max_age,
        rule_id=found["ID"][0] if found["ID"] else None,
    )


def cors_document(rules: tuple[cors.CorsRule, ...]) -> bytes:
    root = s3_root(ROOT)
    for rule in rules:
        element = sub_element(root, "CORSRule")
        if rule.rule_id is not None:
            sub_element(element, "ID", rule.rule_id)
        for tag, values in (("AllowedHeader", rule.allowed_headers),
                            ("AllowedMethod", rule.allowed_methods),
                            ("AllowedOrigin", rule.allowed_origins),
                            ("ExposeHeader", rule.expose_headers)):
            for value in values:
                sub_element(element, tag, value)
        if rule.max_age_seconds is not None:
            sub_element(element, "MaxAgeSeconds", str(rule.max_age_seconds))
    return serialize(root)


async def bucket_rules(config: BucketConfigService, bucket: str
                       ) -> tuple[cors.CorsRule, ...] | None:
    """A bucket's CORS rules from the configuration cache (None: none, or no bucket)."""
    text = await config.document(bucket, cors.CORS_CONFIG_KEY)
    return None if text is None else cors.rules_from_json(text)


async def put_bucket_cors(call: S3Call) -> S3Response:
    rules = parse_cors(call.body())
    await call.services.bucket_config.put_config(call.caller, call.bucket,
                                                 cors.CORS_CONFIG_KEY, cors.to_json(rules))
    return S3Response()


async def get_bucket_cors(call: S3Call) -> S3Response:
    await call.services.bucket_config.get(call.bucket)  # NoSuchBucket first
    text = await call.services.bucket_config.document(call.bucket, cors.CORS_CONFIG_KEY)
    if text is None:
        raise S3Error("NoSuchCORSConfiguration", BucketName=call.bucket)
    return S3Response(body=cors_document(cors.rules_from_json(text)), content_type=XML)


async def delete_bucket_cors(call: S3Call) -> S3Response:
    await call.services.bucket_config.get(call.bucket)
    await call.services.bucket_config.delete_config(call.caller, call.bucket,
                                                    cors.CORS_CONFIG_KEY)
    return S3Response(status=204)
