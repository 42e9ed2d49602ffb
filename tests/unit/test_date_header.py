"""The Date header is formatted once a second: always twisted.web's text for that second."""

from __future__ import annotations

from twisted.web.http import datetimeToString

from objstore.http.site import date_header


def test_date_header_is_twisteds_for_each_second() -> None:
    for now in (1_700_000_000.0, 1_700_000_000.9, 1_700_000_001.2, 1_600_000_000.5):
        assert date_header(lambda now=now: now) == datetimeToString(now)
