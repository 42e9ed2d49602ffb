"""Bucket default encryption of the S3 API: Put/Get/DeleteBucketEncryption
(PUT/GET/DELETE /bucket?encryption) and its XML (ServerSideEncryptionConfiguration).

The body is parsed and checked (engine/bucket_encryption.py) before anything is changed:
one Rule with ApplyServerSideEncryptionByDefault/SSEAlgorithm (and KMSMasterKeyID);
`AES256` and `aws:kms` (with a key id naming the node's master key) are stored. A GET on a
bucket without one answers ServerSideEncryptionConfigurationNotFoundError (404) as AWS; a
DELETE answers 204 either way.
"""

from __future__ import annotations

from lxml import etree

from objstore.engine.bucket_encryption import BucketEncryption, checked_default
from objstore.errors import S3Error
from objstore.http.error_xml import serialize, sub_element
from objstore.s3.call import S3Call, S3Response
from objstore.s3.xml import child_text, parse_document, s3_root

XML = "application/xml"
ROOT = "ServerSideEncryptionConfiguration"


def _child(element: etree._Element, name: str) -> etree._Element | None:
    for child in element:
        if isinstance(child.tag, str) and etree.QName(child).localname == name:
            return child
    return None


def parse_encryption(body: bytes) -> tuple[str, bool, str | None]:
    """(SSEAlgorithm, BucketKeyEnabled, KMSMasterKeyID) of a
    ServerSideEncryptionConfiguration body."""
    root = parse_document(body, ROOT)
    rules = [child for child in root
             if isinstance(child.tag, str) and etree.QName(child).localname == "Rule"]
    if len(rules) != 1:
        raise S3Error("MalformedXML", "Exactly one Rule is expected.")
    default = _child(rules[0], "ApplyServerSideEncryptionByDefault")
    algorithm = None if default is None else child_text(default, "SSEAlgorithm")
    if not algorithm:
        raise S3Error("MalformedXML", "ApplyServerSideEncryptionByDefault/SSEAlgorithm "
                      "is required.")
    key_enabled = (child_text(rules[0], "BucketKeyEnabled") or "false").strip().lower()
    if key_enabled not in ("true", "false"):
        raise S3Error("MalformedXML", "BucketKeyEnabled must be true or false.")
    kms_key_id = None if default is None else child_text(default, "KMSMasterKeyID")
    return algorithm.strip(), key_enabled == "true", (kms_key_id or "").strip() or None


def encryption_document(config: BucketEncryption) -> bytes:
    root = s3_root(ROOT)
    rule = sub_element(root, "Rule")
    default = sub_element(rule, "ApplyServerSideEncryptionByDefault")
    sub_element(default, "SSEAlgorithm", config.algorithm)
    if config.kms_key_id is not None:
        sub_element(default, "KMSMasterKeyID", config.kms_key_id)
    sub_element(rule, "BucketKeyEnabled", "true" if config.bucket_key_enabled else "false")
    return serialize(root)


async def put_bucket_encryption(call: S3Call) -> S3Response:
    algorithm, key_enabled, kms_key_id = parse_encryption(call.body())
    config = checked_default(algorithm, key_enabled, kms_key_id=kms_key_id,
                             key_id=call.services.objects.encryption_key_id,
                             key_ids=call.services.objects.kms_key_ids)
    await call.services.bucket_config.put_encryption(call.caller, call.bucket, config)
    return S3Response()


async def get_bucket_encryption(call: S3Call) -> S3Response:
    config = await call.services.bucket_config.encryption(call.bucket)
    return S3Response(body=encryption_document(config), content_type=XML)


async def delete_bucket_encryption(call: S3Call) -> S3Response:
    await call.services.bucket_config.delete_encryption(call.caller, call.bucket)
    return S3Response(status=204)


__all__ = ["delete_bucket_encryption", "encryption_document", "get_bucket_encryption",
           "parse_encryption", "put_bucket_encryption"]
