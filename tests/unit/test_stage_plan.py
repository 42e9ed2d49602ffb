"""The decision of a body's stage plan (engine/stage_plan.py) and what a record says
about its stages (blobs/plan.py): pure, no reactor."""

from __future__ import annotations

import pytest

from objstore.blobs.plan import IDENTITY, SSE_S3, StagePlan, plan_of
from objstore.crypto.kms_key import response_headers
from objstore.engine.stage_plan import BucketStageSettings, decide_stage_plan
from objstore.errors import S3Error
from objstore.meta.records import ObjectRecord

KEY_ID = "local:0123456789abcdef"
SSE = {"x-amz-server-side-encryption": "AES256"}


def test_plain_put_is_the_identity_plan() -> None:
    plan = decide_stage_plan("PutObject", {}, key_id=KEY_ID)
    assert plan is IDENTITY and plan.identity


def test_sse_s3_put_is_encrypted_under_the_configured_key() -> None:
    plan = decide_stage_plan("PutObject", SSE, key_id=KEY_ID)
    assert plan == StagePlan(encryption=SSE_S3, key_id=KEY_ID) and not plan.identity


@pytest.mark.parametrize("operation", ["UploadPart", "CompleteMultipartUpload", "UploadPartCopy",
                                       "PutObjectTagging", None])
def test_only_object_bodies_get_stages(operation: str | None) -> None:
    assert decide_stage_plan(operation, SSE, key_id=KEY_ID) is IDENTITY


def test_a_copy_destination_is_staged_as_a_put_is() -> None:
    assert decide_stage_plan("CopyObject", SSE, key_id=KEY_ID) == \
        StagePlan(encryption=SSE_S3, key_id=KEY_ID)
    assert decide_stage_plan("CopyObject", {}, key_id=KEY_ID) is IDENTITY


def test_sse_s3_without_encryption_configured_is_refused() -> None:
    with pytest.raises(S3Error) as caught:
        decide_stage_plan("PutObject", SSE, key_id=None)
    assert caught.value.code == "NotImplemented"


KMS = {"x-amz-server-side-encryption": "aws:kms"}
KEY_HEADER = "x-amz-server-side-encryption-aws-kms-key-id"


@pytest.mark.parametrize("key", [None, KEY_ID, f"arn:aws:kms:{KEY_ID}",
                                 f"arn:aws:kms:eu-west-1:123456789012:key/{KEY_ID}",
                                 "alias/objstore", "alias/aws/s3",
                                 "arn:aws:kms:us-east-1:000000000000:alias/objstore"])
def test_kms_is_sse_s3_under_the_master_key(key: str | None) -> None:
    headers = KMS if key is None else {**KMS, KEY_HEADER: key}
    for operation in ("PutObject", "CopyObject", "CreateMultipartUpload"):
        assert decide_stage_plan(operation, headers, key_id=KEY_ID) == \
            StagePlan(encryption="aws:kms", key_id=KEY_ID)


@pytest.mark.parametrize("key", ["local:ffffffffffffffff", "alias/other", "arn:aws:kms:x",
                                 f"arn:aws:kms:us-east-1:1:alias/{KEY_ID}", "",
                                 "1234abcd-12ab-34cd-56ef-1234567890ab"])
def test_an_unknown_kms_key_is_not_found(key: str) -> None:
    with pytest.raises(S3Error) as caught:
        decide_stage_plan("PutObject", {**KMS, KEY_HEADER: key}, key_id=KEY_ID)
    assert caught.value.code == "KMS.NotFoundException" and caught.value.status == 400
    assert caught.value.message == f"Invalid keyId {key}"


def test_kms_without_encryption_configured_and_dsse_are_not_implemented() -> None:
    for headers, key_id in ((KMS, None), ({**KMS, KEY_HEADER: "alias/objstore"}, None),
                            ({"x-amz-server-side-encryption": "aws:kms:dsse"}, KEY_ID)):
        with pytest.raises(S3Error) as caught:
            decide_stage_plan("PutObject", headers, key_id=key_id)
        assert caught.value.code == "NotImplemented"


def test_an_older_master_key_version_names_the_same_kms_key() -> None:
    """After `objstore key rotate` an object still shows the version that wraps it until a
    rotate-key job ran: a client may send it back."""
    versions = ("local:1111111111111111", KEY_ID)
    for key in ("local:1111111111111111", "arn:aws:kms:local:1111111111111111",
                "arn:aws:kms:eu-west-1:123456789012:key/local:1111111111111111"):
        assert decide_stage_plan("PutObject", {**KMS, KEY_HEADER: key}, key_id=KEY_ID,
                                 key_ids=versions) == StagePlan(encryption="aws:kms",
                                                                key_id=KEY_ID)
    with pytest.raises(S3Error) as caught:
        decide_stage_plan("PutObject", {**KMS, KEY_HEADER: "local:2222222222222222"},
                          key_id=KEY_ID, key_ids=versions)
    assert caught.value.code == "KMS.NotFoundException"


@pytest.mark.parametrize("headers", [
    {KEY_HEADER: KEY_ID},  # a key id without aws:kms
    {**SSE, KEY_HEADER: KEY_ID},
    {**SSE, "x-amz-server-side-encryption-context": "e30="},
    {**KMS, "x-amz-server-side-encryption-context": "not base64!"},
    {**KMS, "x-amz-server-side-encryption-context": "WzFd"},  # [1]: not an object
    {**KMS, "x-amz-server-side-encryption-bucket-key-enabled": "yes"},
])
def test_misused_kms_headers_are_invalid(headers: dict[str, str]) -> None:
    with pytest.raises(S3Error) as caught:
        decide_stage_plan("PutObject", headers, key_id=KEY_ID)
    assert caught.value.code == "InvalidArgument"


def test_kms_context_and_bucket_key_are_accepted() -> None:
    headers = {**KMS, "x-amz-server-side-encryption-context": "eyJhIjogImIifQ==",
               "x-amz-server-side-encryption-bucket-key-enabled": "true"}
    assert decide_stage_plan("PutObject", headers, key_id=KEY_ID).encryption == "aws:kms"
    bucket = BucketStageSettings(default_encryption="aws:kms")
    assert decide_stage_plan("PutObject", {}, bucket, key_id=KEY_ID) == \
        StagePlan(encryption="aws:kms", key_id=KEY_ID)
    assert decide_stage_plan("PutObject", SSE, bucket, key_id=KEY_ID).encryption == SSE_S3


@pytest.mark.parametrize("value", ["aes256", "AES-256", "", "rot13"])
def test_an_unknown_algorithm_is_invalid(value: str) -> None:
    with pytest.raises(S3Error) as caught:
        decide_stage_plan("PutObject", {"x-amz-server-side-encryption": value}, key_id=KEY_ID)
    assert caught.value.code == "InvalidArgument"
    assert caught.value.fields["ArgumentName"] == "x-amz-server-side-encryption"


def test_bucket_default_applies_without_a_header_and_the_header_wins() -> None:
    bucket = BucketStageSettings(default_encryption=SSE_S3)
    assert decide_stage_plan("PutObject", {}, bucket, key_id=KEY_ID).encryption == SSE_S3
    with pytest.raises(S3Error):
        decide_stage_plan("PutObject", {"x-amz-server-side-encryption": "bad"}, bucket,
                          key_id=KEY_ID)


def test_bucket_compression_alone_has_no_key() -> None:
    plan = decide_stage_plan("PutObject", {}, BucketStageSettings(compression="zstd"),
                             key_id=KEY_ID)
    assert plan == StagePlan(compression="zstd")


def _record(**fields: object) -> ObjectRecord:
    return ObjectRecord(bucket="b", key="k", version_id="v", blob_id=None, size=1, etag="e",
                        last_modified=0.0, owner_id="o", owner_name="o", **fields)  # type: ignore[arg-type]


def test_plan_of_a_record() -> None:
    assert plan_of(_record()) is IDENTITY
    assert plan_of(_record(encryption_algorithm=SSE_S3, encryption_key_id=KEY_ID)) == \
        StagePlan(encryption=SSE_S3, key_id=KEY_ID)


def test_bucket_compression_applies_unless_the_type_is_already_compressed() -> None:
    bucket = BucketStageSettings(compression="zstd", compression_level=7)
    plan = decide_stage_plan("PutObject", {"content-type": "text/plain"}, bucket, key_id=None)
    assert (plan.compression, plan.compression_level, plan.encryption) == ("zstd", 7, None)
    assert decide_stage_plan("PutObject", {}, bucket, key_id=None).compression == "zstd"
    for kind in ("image/jpeg", "video/mp4", "audio/ogg", "application/zip",
                 "application/gzip", "application/x-7z-compressed", "application/zstd",
                 "Image/PNG; charset=binary"):
        plan = decide_stage_plan("PutObject", {"content-type": kind}, bucket, key_id=None)
        assert plan.identity, kind
    sse = decide_stage_plan("PutObject", {"x-amz-server-side-encryption": "AES256",
                                          "content-type": "image/png"}, bucket, key_id="k1")
    assert (sse.compression, sse.encryption) == (None, "AES256")
    both = decide_stage_plan("PutObject", {"x-amz-server-side-encryption": "AES256"}, bucket,
                             key_id="k1")
    assert (both.compression, both.encryption, both.key_id) == ("zstd", "AES256", "k1")
    assert decide_stage_plan("UploadPart", {}, bucket, key_id=None).identity


def test_responses_show_the_kms_key_as_an_arn() -> None:
    assert response_headers("aws:kms", KEY_ID) == {
        "x-amz-server-side-encryption": "aws:kms",
        "x-amz-server-side-encryption-aws-kms-key-id": f"arn:aws:kms:{KEY_ID}"}
    assert response_headers(SSE_S3, KEY_ID) == SSE
    assert response_headers("SSE-C", None) == {} and response_headers(None, None) == {}
