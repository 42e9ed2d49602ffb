"""The pure helpers of bench/ab.py (ab's summary and percentile file) and bench/hotpath.py
(py-spy profile summaries, thread names). Neither benchmark runs in the test suite."""

from __future__ import annotations

import pytest

from bench.ab import parse_ab_output
from bench.hotpath import (
    STRICT_AUDIT,
    Figure,
    audit_settings,
    parse_thread_names,
    summarise_profile,
    thread_group,
)
from bench.wrk import WrkError

AB_SUMMARY = """\
Server Software:        objstore
Document Path:          /hot/get/0000000?X-Amz-Signature=abc
Concurrency Level:      32
Time taken for tests:   5.002 seconds
Complete requests:      3722
Failed requests:        0
Non-2xx responses:      2
Keep-Alive requests:    3722
Total transferred:      1861000 bytes
Requests per second:    744.10 [#/sec] (mean)
"""
AB_CSV = "Percentage served,Time in ms\n0,1.5\n50,40.25\n99,90.5\n100,120.0\n"


def test_parse_ab_output() -> None:
    result = parse_ab_output(AB_SUMMARY, AB_CSV)
    assert result.requests == 3722
    assert result.duration_seconds == pytest.approx(5.002)
    assert (result.p50_ms, result.p99_ms, result.max_ms) == (40.25, 90.5, 120.0)
    assert result.status_errors == 2 and result.socket_errors == 0
    assert result.bytes_read == 1861000


def test_parse_ab_output_without_summary() -> None:
    with pytest.raises(WrkError):
        parse_ab_output("apr_socket_recv: Connection refused (111)\n", "")


def test_summarise_profile_leaves_out_waiting_threads() -> None:
    lines = [
        "main (twistd:1);doRead (twisted/internet/tcp.py:278) 6",
        "main (twistd:1);render (objstore/s3/api.py:10);verify (objstore/http/sigv4.py:5) 3",
        "run (threading.py:1);Condition.wait (threading.py:320) 50",
        "garbage line",
    ]
    rows = {name: (inclusive, own) for name, inclusive, own in summarise_profile(lines)}
    assert rows["doRead (internet/tcp.py)"] == (pytest.approx(200 / 3), pytest.approx(200 / 3))
    assert rows["main (twistd)"] == (pytest.approx(100.0), 0.0)
    assert rows["verify (http/sigv4.py)"][1] == pytest.approx(100 / 3)
    assert "Condition.wait (threading.py)" not in rows
    assert summarise_profile([]) == []


def test_thread_names_and_groups() -> None:
    dump = ('Process 5: twistd\nThread 5 (idle): "MainThread"\n'
            '    doPoll (twisted/internet/epollreactor.py:1)\n'
            'Thread 7 (active): "PoolThread-objstore-db-read-0"\n')
    names = parse_thread_names(dump)
    assert names == {5: "MainThread", 7: "PoolThread-objstore-db-read-0"}
    assert [thread_group(n) for n in ("MainThread", names[7], "PoolThread-objstore-io-3",
                                      "PoolThread-objstore-hash-0")] == [
        "reactor", "db-read", "io", "other"]


def test_a_figure_prints_rate_cpu_and_wrk_latencies() -> None:
    figure = Figure("get", 2000, 10.0, 12.0, latency_ms=(9.4, 19.9),
                    split=(("reactor", 8.0),))
    lines = figure.line().splitlines()
    assert lines[0].split()[:3] == ["get", "200", "ops/s"]
    assert "6000 us CPU/request" in lines[0] and "1.20 cores" in lines[0]
    assert lines[1].split() == ["p50", "9.4", "ms,", "p99", "19.9", "ms"]
    assert lines[2].split() == ["reactor", "4000", "us"]
    assert len(Figure("head", 10, 1.0, 0.1).line().splitlines()) == 1  # ab: no latencies


def test_audit_settings_label_each_daemon() -> None:
    assert audit_settings("off") == [("default", "")]
    assert audit_settings("on") == [("strict", STRICT_AUDIT)]
    assert [label for label, _ in audit_settings("both")] == ["default", "strict"]
    assert "strict = true" in STRICT_AUDIT
