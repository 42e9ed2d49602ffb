"""Bucket default encryption: the XML (parse and render), the rules of what can be stored,
the stored document, and the configuration cache that PutObject's admission reads."""

from __future__ import annotations

import pytest

from objstore.engine.bucket_encryption import BucketEncryption, checked_default
from objstore.errors import S3Error
from objstore.meta.bucket_cache import BucketCache, BucketConfigCache
from objstore.meta.coherence import LocalCounters
from objstore.s3.bucket_encryption import encryption_document, parse_encryption

KEY_ID = "local:0123abcd"
NS = 'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'


def _document(algorithm: str, extra: str = "") -> bytes:
    return (f"<ServerSideEncryptionConfiguration {NS}><Rule><ApplyServerSideEncryptionByDefault>"
            f"<SSEAlgorithm>{algorithm}</SSEAlgorithm></ApplyServerSideEncryptionByDefault>"
            f"{extra}</Rule></ServerSideEncryptionConfiguration>").encode()


def test_parse_and_render_round_trip() -> None:
    assert parse_encryption(_document("AES256")) == ("AES256", False, None)
    assert parse_encryption(_document("AES256", "<BucketKeyEnabled>true</BucketKeyEnabled>")
                            ) == ("AES256", True, None)
    rendered = encryption_document(BucketEncryption("AES256", True))
    assert b"<SSEAlgorithm>AES256</SSEAlgorithm>" in rendered and b"KMSMasterKeyID" not in rendered
    assert parse_encryption(rendered) == ("AES256", True, None)
    kms = encryption_document(BucketEncryption("aws:kms", True, "alias/objstore"))
    assert b"<KMSMasterKeyID>alias/objstore</KMSMasterKeyID>" in kms
    assert parse_encryption(kms) == ("aws:kms", True, "alias/objstore")


@pytest.mark.parametrize("body", [
    b"not xml",
    b"<ServerSideEncryptionConfiguration/>",  # no rule
    _document("").replace(b"<SSEAlgorithm></SSEAlgorithm>", b""),
    _document("AES256", "<BucketKeyEnabled>maybe</BucketKeyEnabled>"),
    b"<Other><Rule/></Other>",
])
def test_malformed_documents_are_refused(body: bytes) -> None:
    with pytest.raises(S3Error) as refused:
        parse_encryption(body)
    assert refused.value.code == "MalformedXML"


def test_only_a_master_key_encryption_can_be_the_default() -> None:
    assert checked_default("AES256", False, key_id=KEY_ID) == BucketEncryption("AES256", False)
    assert checked_default("aws:kms", True, key_id=KEY_ID) == BucketEncryption("aws:kms", True)
    assert checked_default("aws:kms", False, key_id=KEY_ID, kms_key_id=KEY_ID
                           ) == BucketEncryption("aws:kms", False, KEY_ID)
    for value, kms_key_id, code in (("aws:kms", "alias/nope", "KMS.NotFoundException"),
                                    ("AES256", KEY_ID, "InvalidArgument"),
                                    ("aws:kms:dsse", None, "NotImplemented"),
                                    ("DES", None, "MalformedXML")):
        with pytest.raises(S3Error) as refused:
            checked_default(value, False, key_id=KEY_ID, kms_key_id=kms_key_id)
        assert refused.value.code == code
    for value in ("AES256", "aws:kms"):
        with pytest.raises(S3Error) as refused:
            checked_default(value, False, key_id=None)
        assert refused.value.code == "NotImplemented"


def test_stored_document_round_trip() -> None:
    for config in (BucketEncryption("AES256", True),
                   BucketEncryption("aws:kms", False, "alias/objstore")):
        assert BucketEncryption.from_json(config.to_json()) == config
    assert BucketEncryption.from_json('{"algorithm": "AES256"}') == BucketEncryption()


def test_the_not_found_error_is_a_404() -> None:
    error = S3Error("ServerSideEncryptionConfigurationNotFoundError", BucketName="b")
    assert error.status == 404


def test_config_cache_is_dropped_by_any_change_of_the_buckets_scope() -> None:
    """A bucket write, a configuration write, or a peer's merge (the control listeners
    invalidate the bucket cache) all move the buckets counter the config cache follows."""
    counters = LocalCounters()
    buckets = BucketCache(size=10, ttl_seconds=60, clock=lambda: 0.0, counters=counters)
    configs = BucketConfigCache(size=10, ttl_seconds=60, clock=lambda: 0.0, counters=counters)
    configs.store(("b", "encryption"), '{"algorithm": "AES256"}', configs.token())
    assert configs.get(("b", "encryption"))[0]
    buckets.invalidate()
    assert configs.get(("b", "encryption")) == (False, None)
