"""Stamps (float seconds since the epoch) as UTC dates, for every place that renders one:
S3 XML and HTTP dates, admin and cluster views, export documents.

The views' times (`iso_milliseconds`) are cut to the millisecond, never rounded up: a
client that sends one back as a `since` filter must find the row it came from.

S3 shows dates of years 1970 to 9999 (ISO 8601 and HTTP dates have four-digit years);
`datetime` cannot hold a later year and raises OverflowError or OSError ("Value too
large") for stamps far outside it, and ValueError for NaN. `utc_moment` never raises: a
stamp outside [FIRST_STAMP, END_STAMP) is shown as the nearest end, NaN as the epoch.
The same range is what replicated rows may carry (convergence/row_rules.py refuses the
rest on receipt), so the clamp only ever shows a value that got in some other way.

Pure: no I/O.
"""

from __future__ import annotations

import datetime
import math

FIRST_STAMP = 0.0  # 1970-01-01T00:00:00Z
END_STAMP = 253402300800.0  # 10000-01-01T00:00:00Z: the first stamp past the range
LAST_STAMP = 253402300799.999  # 9999-12-31T23:59:59.999Z (as near as a float gets)


def renderable(stamp: float) -> bool:
    """Whether `stamp` is a date S3 can show (years 1970 to 9999), as it is."""
    return math.isfinite(stamp) and FIRST_STAMP <= stamp < END_STAMP


def clamped(stamp: float) -> float:
    """`stamp` moved into the renderable range (NaN: the epoch)."""
    if math.isnan(stamp):
        return FIRST_STAMP
    return min(max(stamp, FIRST_STAMP), LAST_STAMP)


def utc_moment(stamp: float) -> datetime.datetime:
    """The aware UTC datetime of `stamp`, clamped to the renderable range."""
    return datetime.datetime.fromtimestamp(clamped(stamp), datetime.UTC)


def iso_milliseconds(stamp: float) -> str:
    """`stamp` (clamped) as ISO 8601 with its UTC offset, to the millisecond, never later
    than the stamp itself. `fromtimestamp` rounds to the microsecond, so a stamp of
    x.3449996 would read .345 and, sent back as a view's `since`, leave out the very row
    it was read from (about one stamp in 2,400)."""
    moment = utc_moment(stamp)
    moment = moment.replace(microsecond=moment.microsecond // 1000 * 1000)
    if moment.timestamp() > clamped(stamp):  # rounded up to the next millisecond
        moment -= datetime.timedelta(milliseconds=1)
    return moment.isoformat(timespec="milliseconds")
