"""Per-bucket compression: the setting's stored form, its validation, what it means for a
body's stage plan, and the use cases of the admin endpoints (admin/compression_routes.py).

The setting is the bucket configuration document `compression`
(`{"algorithm": "zstd", "level": 3}`), written through `BucketConfigService` like a quota:
so it is kept in the control record (`recover`), replicated to cluster peers with the other
bucket configuration documents, and carried by export/import. New PutObject bodies of the
bucket are compressed (blobs/zchunks.py) unless their content type is already compressed
(engine/stage_plan.py); existing objects stay as they were stored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from objstore.blobs.zchunks import ALGORITHM, DEFAULT_LEVEL, MAX_LEVEL, MIN_LEVEL
from objstore.engine.bucket_config import BucketConfigService
from objstore.engine.changes import Caller
from objstore.engine.quota import NoSuchBucket
from objstore.engine.stage_plan import NO_BUCKET_STAGES, BucketStageSettings
from objstore.errors import AdminError, S3Error

if TYPE_CHECKING:
    from objstore.meta.async_store import MetaStore

COMPRESSION_CONFIG_KEY = "compression"
ALGORITHMS = (ALGORITHM,)


@dataclass(frozen=True)
class CompressionSetting:
    algorithm: str = ALGORITHM
    level: int = DEFAULT_LEVEL

    def to_json(self) -> str:
        return json.dumps({"algorithm": self.algorithm, "level": self.level}, sort_keys=True)

    @staticmethod
    def from_json(text: str) -> CompressionSetting:
        return parse_setting(json.loads(text))


def parse_setting(body: Any) -> CompressionSetting:
    """The setting of an admin PUT body (or a stored document); AdminError BadRequest."""
    if not isinstance(body, dict):
        raise AdminError("BadRequest", "The body must be a JSON object.")
    unknown = sorted(set(body) - {"algorithm", "level", "bucket"})
    if unknown:
        raise AdminError("BadRequest", f"Unknown field {unknown[0]!r}; compression has "
                         "algorithm and level.")
    algorithm = body.get("algorithm")
    if algorithm not in ALGORITHMS:
        raise AdminError("BadRequest", f"algorithm must be one of {', '.join(ALGORITHMS)}.")
    level = body.get("level", DEFAULT_LEVEL)
    if isinstance(level, bool) or not isinstance(level, int) \
            or not MIN_LEVEL <= level <= MAX_LEVEL:
        raise AdminError("BadRequest", f"level must be an integer from {MIN_LEVEL} to "
                         f"{MAX_LEVEL}.")
    return CompressionSetting(algorithm, level)


def stage_settings(document: str | None) -> BucketStageSettings:
    """What a bucket's stored compression document means for its bodies' plans (a
    document this version can not read compresses nothing)."""
    if document is None:
        return NO_BUCKET_STAGES
    try:
        setting = CompressionSetting.from_json(document)
    except (ValueError, AdminError):
        return NO_BUCKET_STAGES
    return BucketStageSettings(compression=setting.algorithm,
                               compression_level=setting.level)


class CompressionService:
    """Read, set and remove a bucket's compression (the admin endpoints)."""

    def __init__(self, meta: MetaStore, documents: BucketConfigService) -> None:
        self._meta = meta
        self._documents = documents

    async def get(self, bucket: str) -> CompressionSetting | None:
        await self._require_bucket(bucket)
        stored = await self._meta.get_bucket_config(bucket, COMPRESSION_CONFIG_KEY)
        return None if stored is None else CompressionSetting.from_json(stored)

    async def put(self, caller: Caller, bucket: str, setting: CompressionSetting) -> None:
        try:
            await self._documents.put_config(caller, bucket, COMPRESSION_CONFIG_KEY,
                                             setting.to_json())
        except S3Error as error:
            if error.code == "NoSuchBucket":
                raise NoSuchBucket(bucket) from None
            raise

    async def delete(self, caller: Caller, bucket: str) -> None:
        await self._require_bucket(bucket)
        await self._documents.delete_config(caller, bucket, COMPRESSION_CONFIG_KEY)

    async def _require_bucket(self, bucket: str) -> None:
        if await self._meta.get_bucket(bucket) is None:
            raise NoSuchBucket(bucket)
