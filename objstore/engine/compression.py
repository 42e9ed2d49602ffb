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

from objstore.engine.changes import Caller
from objstore.engine.compression_setting import (
    ALGORITHMS,
    COMPRESSION_CONFIG_KEY,
    CompressionSetting,
    parse_setting,
    stage_settings,
)
from objstore.engine.quota import BucketDocumentService

__all__ = ["ALGORITHMS", "COMPRESSION_CONFIG_KEY", "CompressionService", "CompressionSetting",
           "parse_setting", "stage_settings"]


class CompressionService(BucketDocumentService):
    """Read, set and remove a bucket's compression (the admin endpoints)."""

    CONFIG_KEY = COMPRESSION_CONFIG_KEY

    async def get(self, bucket: str) -> CompressionSetting | None:
        stored = await self._stored(bucket)
        return None if stored is None else CompressionSetting.from_json(stored)

    async def put(self, caller: Caller, bucket: str, setting: CompressionSetting) -> None:
        await self._put(caller, bucket, setting.to_json())
