"""bench.notify's and bench.receivers' pure helpers: the request head the asyncio receiver
parses, and the per-request profile difference the bench prints. The bench itself never
runs in the test suite."""

from __future__ import annotations

from collections import Counter

import pytest

from bench.notify import function_samples, profile_delta
from bench.receivers import parse_request_head


def test_parse_request_head() -> None:
    head = (b"POST /hook HTTP/1.1\r\nHost: h\r\nContent-Length: 42\r\n"
            b"Content-Type: application/json")
    assert parse_request_head(head) == ("POST", "/hook", 42, True)
    assert parse_request_head(b"GET /count HTTP/1.1\r\nConnection: close") == \
        ("GET", "/count", 0, False)
    assert parse_request_head(b"GET / HTTP/1.0") == ("GET", "/", 0, False)
    assert parse_request_head(b"GET / HTTP/1.0\r\nConnection: Keep-Alive") == \
        ("GET", "/", 0, True)
    for bad in (b"POST /x SPDY/3", b"POST /x", b"POST /x HTTP/1.1\r\nContent-Length: -1",
                b"POST /x HTTP/1.1\r\nContent-Length: many"):
        with pytest.raises(ValueError):
            parse_request_head(bad)


def test_function_samples_and_profile_delta() -> None:
    lines = ["main (a.py:1);work (b.py:2);post (c.py:3) 20",
             "main (a.py:1);work (b.py:9) 20",
             "main (a.py:1);EPollReactor.doPoll (internet/epollreactor.py:1) 500",
             "garbage"]
    samples = function_samples(lines)
    assert samples == Counter({"main (a.py)": 40, "work (b.py)": 40, "post (c.py)": 20})
    base = Counter({"main (a.py)": 100, "work (b.py)": 100})
    rows = profile_delta(base, 100, samples, 10, rate=100.0, top=2)
    # per request: base 100 samples / 100 Hz / 100 requests = 10 ms; other 40/100/10 = 40 ms
    assert [row[0] for row in rows] == ["main (a.py)", "work (b.py)"]  # grew most; ties by name
    assert rows[0][1:] == (pytest.approx(10_000.0), pytest.approx(40_000.0))
    assert len(rows) == 2
