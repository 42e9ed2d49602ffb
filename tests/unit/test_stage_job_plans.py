"""Which plan each rewrite job gives a version (workers/stage_jobs.py `target_plan`), pure:
what it changes, what it keeps, and what it leaves alone."""

from __future__ import annotations

from dataclasses import replace

import pytest

from objstore.blobs.plan import SSE_S3, StagePlan
from objstore.crypto.packages import FORMAT
from objstore.engine.stage_plan import NO_BUCKET_STAGES, BucketStageSettings
from objstore.meta.records import ObjectRecord, PartRef
from objstore.workers.stage_jobs import target_plan

PLAIN = ObjectRecord(bucket="b", key="k", version_id="v", blob_id="x", size=10, etag="e",
                     last_modified=0.0)
SSE = replace(PLAIN, encryption_algorithm=SSE_S3, encryption_key_id="local:old",
              encryption_params={"format": FORMAT, "wrapped_key": "w"})
ZSTD = BucketStageSettings(compression="zstd", compression_level=5)


@pytest.mark.parametrize(("job", "record", "bucket", "expected"), [
    ("encrypt", PLAIN, NO_BUCKET_STAGES, StagePlan(encryption=SSE_S3, key_id="local:new")),
    ("encrypt", replace(PLAIN, compression="zstd"), ZSTD,
     StagePlan("zstd", SSE_S3, "local:new", 5)),
    ("encrypt", SSE, NO_BUCKET_STAGES, None),
    ("decrypt", SSE, NO_BUCKET_STAGES, StagePlan()),
    ("decrypt", PLAIN, NO_BUCKET_STAGES, None),
    ("compress", PLAIN, ZSTD, StagePlan(compression="zstd", compression_level=5)),
    ("compress", SSE, ZSTD, StagePlan("zstd", SSE_S3, "local:new", 5)),
    ("compress", PLAIN, NO_BUCKET_STAGES, None),
    ("compress", replace(PLAIN, content_type="image/png"), ZSTD, None),
    ("decompress", replace(SSE, compression="zstd"), ZSTD,
     StagePlan(encryption=SSE_S3, key_id="local:new")),
    ("decompress", PLAIN, ZSTD, None),
    # SSE-KMS (the master key's, crypto/kms_key.py) stays SSE-KMS through a rewrite.
    ("compress", replace(SSE, encryption_algorithm="aws:kms"), ZSTD,
     StagePlan("zstd", "aws:kms", "local:new", 5)),
    ("decrypt", replace(SSE, encryption_algorithm="aws:kms"), ZSTD, StagePlan()),
])
def test_target_plans(job: str, record: ObjectRecord, bucket: BucketStageSettings,
                      expected: StagePlan | None) -> None:
    assert target_plan(job, record, bucket, "local:new") == expected


@pytest.mark.parametrize("job", ["encrypt", "decrypt", "compress", "decompress"])
def test_left_alone(job: str) -> None:
    multipart = replace(PLAIN, parts=(PartRef(1, "p", 10, "e"),), etag="e-1")
    assert target_plan(job, multipart, ZSTD, "local:new") is None
    customer = replace(SSE, encryption_params={"format": FORMAT, "customer_key_hmac": "h"})
    assert target_plan(job, customer, ZSTD, "local:new") is None
    assert target_plan("encrypt", PLAIN, ZSTD, None) is None  # no master key here
