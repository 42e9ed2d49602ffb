"""Per-bucket compression: the use cases of the admin endpoints (admin/compression_routes.py);
the setting's stored form, its validation and what it means for a body's stage plan are
engine/compression_setting.py's (pure).

The setting is the bucket configuration document `compression`
(`{"algorithm": "zstd", "level": 3}`), written through `BucketConfigService` like a quota:
so it is kept in the control record (`recover`), replicated to cluster peers with the other
bucket configuration documents, and carried by export/import. New PutObject bodies of the
bucket are compressed (blobs/zchunks.py) unless their content type is already compressed
(engine/stage_plan.py); existing objects stay as they were stored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from objstore.engine.bucket_config import BucketConfigService
from objstore.engine.changes import Caller
from objstore.engine.compression_setting import (
    ALGORITHMS,
    COMPRESSION_CONFIG_KEY,
    CompressionSetting,
    parse_setting,
    stage_settings,
)
from objstore.engine.quota import NoSuchBucket
from objstore.errors import S3Error

__all__ = ["ALGORITHMS", "COMPRESSION_CONFIG_KEY", "CompressionService", "CompressionSetting",
           "parse_setting", "stage_settings"]

if TYPE_CHECKING:
    from objstore.meta.async_store import MetaStore

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
