"""A bucket's compression setting, pure: its stored form (the bucket configuration document
`compression`, `{"algorithm": "zstd", "level": 3}`), its validation, and what it means for
a body's stage plan (`stage_settings`). engine/compression.py holds the admin use cases;
engine/bucket_config.py reads the document at admission.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from objstore.blobs.zchunks import ALGORITHM, DEFAULT_LEVEL, MAX_LEVEL, MIN_LEVEL
from objstore.engine.stage_plan import NO_BUCKET_STAGES, BucketStageSettings
from objstore.errors import AdminError

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
