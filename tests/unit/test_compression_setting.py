"""The bucket compression setting (engine/compression.py): what an admin PUT may say, its
stored form, and what a stored document means for a body's stage plan."""

from __future__ import annotations

from typing import Any

import pytest

from objstore.engine.compression import (
    CompressionSetting,
    parse_setting,
    stage_settings,
)
from objstore.engine.stage_plan import NO_BUCKET_STAGES, BucketStageSettings
from objstore.errors import AdminError


def test_a_setting_round_trips_and_the_level_defaults_to_3() -> None:
    setting = parse_setting({"algorithm": "zstd", "level": 9})
    assert CompressionSetting.from_json(setting.to_json()) == setting
    assert parse_setting({"algorithm": "zstd"}).level == 3
    assert stage_settings(setting.to_json()) == BucketStageSettings(
        compression="zstd", compression_level=9)
    assert stage_settings(None) == NO_BUCKET_STAGES
    assert stage_settings('{"algorithm": "lz77"}') == NO_BUCKET_STAGES


@pytest.mark.parametrize("body", [
    {"algorithm": "gzip"}, {"algorithm": None}, {}, {"algorithm": "zstd", "level": 0},
    {"algorithm": "zstd", "level": 20}, {"algorithm": "zstd", "level": "3"},
    {"algorithm": "zstd", "level": True}, {"algorithm": "zstd", "speed": 1}, ["zstd"],
])
def test_invalid_settings_are_bad_requests(body: Any) -> None:
    with pytest.raises(AdminError) as caught:
        parse_setting(body)
    assert caught.value.code == "BadRequest"
