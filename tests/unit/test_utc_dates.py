"""Every renderer of a stored date gets stamps far outside the years S3 can show (1e18,
year 10000, 1.7e308, -1e15, NaN, the infinities) and answers a date of the years 1970 to
9999 rather than raising (a row stamped so made listings, GET and HEAD answer 500)."""

from __future__ import annotations

import datetime
import email.utils
import math
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from objstore.admin import views as admin_views
from objstore.cluster import views as cluster_views
from objstore.engine import transfer
from objstore.meta.records import ObjectRecord
from objstore.s3 import lifecycle, listing_xml, lock_headers, objects, objects_xml, versioning_xml
from objstore.s3.listing_xml import list_objects_document
from objstore.s3.xml import http_date, iso8601
from objstore.utc_dates import (
    END_STAMP,
    FIRST_STAMP,
    LAST_STAMP,
    clamped,
    iso_milliseconds,
    renderable,
    utc_moment,
)

YEAR_10000 = 253402300800.0
EXTREMES = [1e18, YEAR_10000, 1.7e308, -1e15, -1.0, math.nan, math.inf, -math.inf, 1e12]


def row(stamp: float) -> ObjectRecord:
    return ObjectRecord("b", "k", "null", "blob", size=1, etag="e", last_modified=stamp,
                        retention_mode="COMPLIANCE", retain_until_date=stamp)


def year_of_iso(text: str) -> int:
    return int(text[:4])


RENDERERS: list[tuple[str, Callable[[float], str]]] = [
    ("iso8601", iso8601),
    ("http_date", http_date),
    ("admin iso", admin_views.iso),
    ("cluster iso", lambda s: str(cluster_views.iso(s))),
    ("transfer iso", transfer.iso),
    ("x-amz-expiration", lambda s: lifecycle.expiration_header(s, "r")),
    ("Last-Modified", lambda s: objects.validator_headers(row(s))["Last-Modified"]),
    ("retain-until header", lambda s: lock_headers.retention_headers(row(s))[
        lock_headers.UNTIL_HEADER]),
    ("retention document", lambda s: versioning_xml.retention_document(row(s)).decode()),
    ("copy result", lambda s: objects_xml.copy_object_result_document(row(s)).decode()),
    ("ListObjectsV2", lambda s: list_objects_document(
        bucket="b", version=2, prefix="", delimiter="", max_keys=1000, encoding_type=None,
        contents=[row(s)], common_prefixes=[], is_truncated=False, fields={"KeyCount": "1"},
        fetch_owner=True).decode()),
    ("ListObjectVersions", lambda s: listing_xml.list_versions_document(
        listing_xml.VersionsListing("b", "", "", "", "", 1000, None,
                                    entries=[row(s)])).decode()),
]


@pytest.mark.parametrize("stamp", EXTREMES, ids=repr)
@pytest.mark.parametrize(("name", "render"), RENDERERS, ids=[n for n, _ in RENDERERS])
def test_no_renderer_raises_on_an_extreme_stamp(name: str, render: Callable[[float], str],
                                                stamp: float) -> None:
    text = render(stamp)
    assert ("9999" in text) if stamp > 0 and not math.isnan(stamp) else ("1970" in text), text


@pytest.mark.parametrize("stamp", EXTREMES, ids=repr)
def test_http_dates_stay_parseable(stamp: float) -> None:
    parsed = email.utils.parsedate_to_datetime(http_date(stamp))
    assert 1970 <= parsed.year <= 9999


def test_the_ends_of_the_range_render_as_themselves() -> None:
    assert iso8601(FIRST_STAMP) == "1970-01-01T00:00:00.000Z"
    assert iso8601(LAST_STAMP).startswith("9999-12-31T23:59:59.99")
    assert http_date(LAST_STAMP) == "Fri, 31 Dec 9999 23:59:59 GMT"
    assert renderable(LAST_STAMP) and renderable(253402300799.999)  # a client's last date
    assert not renderable(END_STAMP) and not renderable(LAST_STAMP + 1)
    assert renderable(FIRST_STAMP) and not renderable(-0.001)
    assert not renderable(math.nan) and not renderable(math.inf)


def test_dates_in_range_render_as_before() -> None:
    assert iso8601(1700000000.123) == "2023-11-14T22:13:20.123Z"
    assert http_date(1700000000) == "Tue, 14 Nov 2023 22:13:20 GMT"


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_any_float_gives_a_moment_in_range(stamp: float) -> None:
    moment = utc_moment(stamp)
    assert 1970 <= moment.year <= 9999
    assert renderable(clamped(stamp))
    if renderable(stamp):
        assert moment == datetime.datetime.fromtimestamp(stamp, datetime.UTC)
        assert clamped(stamp) == stamp
    assert year_of_iso(iso8601(stamp)) == moment.year


def parsed(text: str) -> float:
    return datetime.datetime.fromisoformat(text).timestamp()


@given(st.floats(min_value=FIRST_STAMP, max_value=4102444800.0))  # up to the year 2100
def test_view_times_are_cut_to_the_millisecond_never_rounded_up(stamp: float) -> None:
    # A view's time sent back as its `since` filter must find the row it came from.
    shown = parsed(iso_milliseconds(stamp))
    assert shown <= stamp < shown + 0.001 + 1e-6


def test_a_stamp_just_below_a_millisecond_shows_the_millisecond_before() -> None:
    stamp = 1764412345.3449996  # datetime.fromtimestamp rounds it to .345000
    assert utc_moment(stamp).microsecond == 345000
    for render in (iso_milliseconds, admin_views.iso, transfer.iso, cluster_views.iso):
        assert str(render(stamp)) == "2025-11-29T10:32:25.344+00:00"
    # A stamp written as a whole millisecond (its float a hair below it) shows it.
    assert iso_milliseconds(1700000000.123) == "2023-11-14T22:13:20.123+00:00"
