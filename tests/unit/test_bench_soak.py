"""The soak command's pure helpers (bench/soak_verdict.py, and the choices of bench/soak.py's
clients): the readings of the daemon's tree, the interval samples built from request
timings, the thirds, the verdict rules and the table. No daemon, no reactor, no sleeps."""

from __future__ import annotations

import threading

import pytest

from bench.report import Row, format_table
from bench.s3 import S3Target
from bench.soak import MIX, Client, Recorder
from bench.soak_verdict import (
    Interval,
    Limits,
    Reading,
    Timing,
    count_tracebacks,
    default_warmup_seconds,
    ended_pids,
    interval_of,
    readings,
    summary_rows,
    thirds,
    verdict,
)

MB = 1000**2


def _interval(start: float, rss_mb: float = 100.0, fds: int = 40, p99_ms: float | None = 10.0,
              failed: int = 0, pids: tuple[int, ...] = (1, 2), seconds: float = 10.0
              ) -> Interval:
    """A sample whose RSS and fds are split evenly over `pids`."""
    share = len(pids)
    processes = tuple(Reading(pid, "supervisor (twistd)" if index == 0 else f"worker {index}",
                              int(rss_mb * MB / share), fds // share)
                      for index, pid in enumerate(pids))
    return Interval(start, start + seconds, processes, 100, failed,
                    None if p99_ms is None else p99_ms / 2, p99_ms, None)


def _series(values: list[tuple[float, int, float]], warmup: int = 1) -> list[Interval]:
    """`warmup` samples far off (they must not count), then one sample per (rss, fds, p99)."""
    series = [_interval(10.0 * n, rss_mb=10.0, fds=5, p99_ms=500.0) for n in range(warmup)]
    for n, (rss, fds, p99) in enumerate(values, start=warmup):
        series.append(_interval(10.0 * n, rss, fds, p99))
    return series


LIMITS = Limits(warmup_seconds=10.0)


def _checks(series: list[Interval], tracebacks: int = 0) -> dict[str, tuple[bool, str]]:
    return {check.name: (check.passed, check.detail)
            for check in verdict(series, LIMITS, tracebacks)}


# -- readings and samples --------------------------------------------------------------------


def test_readings_skip_a_process_gone_and_tell_equal_labels_apart() -> None:
    labels = {10: "supervisor (twistd)", 11: "worker 0", 12: "worker 1", 13: "worker 0"}
    fds = {10: 12, 11: 30, 12: None, 13: 31}  # 12 ended between the tree walk and the read
    found = readings([10, 11, 12, 13], labels.__getitem__, lambda pid: pid * MB,
                     fds.__getitem__)
    assert found == (Reading(10, "supervisor (twistd)", 10 * MB, 12),
                     Reading(11, "worker 0", 11 * MB, 30),
                     Reading(13, "worker 0 (pid 13)", 13 * MB, 31))


def test_interval_of_takes_the_requests_that_ended_inside_it() -> None:
    timings = [Timing(9.99, "GET small", False, 500.0, True),  # before: not counted
               *(Timing(10.0 + n / 100, "GET small", False, float(n + 1), True)
                 for n in range(100)),
               Timing(12.0, "PUT 8 MiB", True, 300.0, True),
               Timing(12.5, "PUT 8 MiB", True, 100.0, True),
               Timing(13.0, "DELETE", False, 9999.0, False),  # failed: counted, not timed
               Timing(20.0, "GET small", False, 700.0, True)]  # the next interval's
    processes = (Reading(1, "worker 0", 50 * MB, 20), Reading(2, "worker 1", 60 * MB, 22))
    interval = interval_of(10.0, 20.0, processes, timings)
    assert (interval.requests, interval.failed) == (103, 1)
    assert (interval.p50_ms, interval.p99_ms) == (50.0, 99.0)
    assert interval.large_p99_ms == 300.0
    assert (interval.rss_bytes, interval.fds) == (110 * MB, 42)
    assert interval.requests_per_second == pytest.approx(10.3)


def test_interval_without_requests_has_no_percentiles() -> None:
    interval = interval_of(0.0, 5.0, (), [Timing(1.0, "HEAD", False, 3.0, False)])
    assert (interval.requests, interval.failed) == (1, 1)
    assert (interval.p50_ms, interval.p99_ms, interval.large_p99_ms) == (None, None, None)


def test_recorder_keeps_every_timing_and_the_first_failures_in_words() -> None:
    recorder = Recorder()
    for n in range(25):
        recorder.add("HEAD", False, 0.002, f"HEAD /b/{n}: 500" if n % 2 else None)
    timings = recorder.snapshot()
    assert len(timings) == 25 and sum(1 for t in timings if not t.ok) == 12
    assert timings[0].ms == pytest.approx(2.0)
    assert recorder.failures[:2] == ["HEAD /b/1: 500", "HEAD /b/3: 500"]
    assert len(recorder.failures) == 12


# -- warm-up and thirds ------------------------------------------------------------------------


def test_default_warmup_is_a_tenth_of_the_run_at_most_two_minutes() -> None:
    assert default_warmup_seconds(60) == 6.0
    assert default_warmup_seconds(30 * 60) == 120.0


def test_thirds_leave_out_the_warmup_and_the_middle() -> None:
    series = [_interval(10.0 * n) for n in range(11)]  # starts 0..100 s
    first, last = thirds(series, warmup_seconds=15.0)  # 9 samples from 20 s on
    assert [i.start_seconds for i in first] == [20.0, 30.0, 40.0]
    assert [i.start_seconds for i in last] == [80.0, 90.0, 100.0]
    first, last = thirds(series[:3], warmup_seconds=0.0)
    assert (len(first), len(last)) == (1, 1)
    assert thirds(series[:2], warmup_seconds=0.0) == ([], [])


# -- the verdict rules ----------------------------------------------------------------------


def test_a_flat_run_passes_every_check() -> None:
    series = _series([(200.0, 60, 20.0), (205.0, 64, 22.0), (190.0, 58, 30.0),
                      (210.0, 66, 21.0), (215.0, 65, 24.0), (219.0, 69, 25.0)])
    checks = _checks(series)
    assert all(passed for passed, _ in checks.values()), checks
    # Medians of the thirds: RSS 202.5 -> 217 MB, fds 62 -> 67, p99 21 -> 24.5 ms.
    assert checks["RSS of the daemon's tree"][1].startswith("flat: 202.5 -> 217.0 MB")


def test_rss_may_grow_by_20_mb_or_10_percent_whichever_is_larger() -> None:
    small = _checks(_series([(100.0, 40, 10.0)] * 3 + [(121.0, 40, 10.0)] * 3))
    assert small["RSS of the daemon's tree"][0] is False  # +21 MB > 20 MB (10 % is 10)
    assert "GROWS" in small["RSS of the daemon's tree"][1]
    assert _checks(_series([(100.0, 40, 10.0)] * 3 + [(119.0, 40, 10.0)] * 3))[
        "RSS of the daemon's tree"][0] is True
    big = _checks(_series([(400.0, 40, 10.0)] * 3 + [(439.0, 40, 10.0)] * 3))
    assert big["RSS of the daemon's tree"][0] is True  # +39 MB <= 10 % of 400
    assert _checks(_series([(400.0, 40, 10.0)] * 3 + [(441.0, 40, 10.0)] * 3))[
        "RSS of the daemon's tree"][0] is False


def test_rss_that_falls_is_flat() -> None:
    assert _checks(_series([(300.0, 40, 10.0)] * 3 + [(150.0, 40, 10.0)] * 3))[
        "RSS of the daemon's tree"][0] is True


def test_one_spike_does_not_decide_the_median_but_a_trend_does() -> None:
    spike = _series([(100.0, 40, 10.0)] * 7 + [(500.0, 400, 900.0), (100.0, 40, 10.0)])
    assert all(passed for passed, _ in _checks(spike).values())
    leak = _series([(100.0 + 10 * n, 40 + 4 * n, 10.0) for n in range(9)])
    checks = _checks(leak)
    assert checks["RSS of the daemon's tree"][0] is False  # 110 -> 170 MB
    assert checks["open file descriptors of the daemon's tree"][0] is False  # 44 -> 68


def test_fds_may_grow_by_a_small_constant() -> None:
    def fds(after: int) -> bool:
        series = _series([(100.0, 50, 10.0)] * 3 + [(100.0, after, 10.0)] * 3)
        return _checks(series)["open file descriptors of the daemon's tree"][0]

    assert fds(60) is True
    assert fds(62) is False  # 62 fds over two processes: 31 + 31, 12 more than 50


def test_p99_may_grow_by_half_plus_5_ms() -> None:
    def p99(after: float) -> bool:
        series = _series([(100.0, 40, 20.0)] * 3 + [(100.0, 40, after)] * 3)
        return _checks(series)["p99 of small requests"][0]

    assert p99(35.0) is True  # 20 * 1.5 + 5
    assert p99(35.5) is False
    assert p99(5.0) is True


def test_intervals_without_a_p99_are_left_out_of_its_check_not_counted_as_zero() -> None:
    series = _series([(100.0, 40, 20.0)] * 6 + [(100.0, 40, 20.0), (100.0, 40, 20.0),
                                                 (100.0, 40, 900.0)])
    assert _checks(series)["p99 of small requests"][0] is True  # median 20 ms
    series[-2] = _interval(series[-2].start_seconds, p99_ms=None)  # no small request
    passed, detail = _checks(series)["p99 of small requests"]
    assert passed is False and "20.0 -> 460.0 ms" in detail  # median of 20 and 900


def test_too_few_samples_fail_rather_than_pass() -> None:
    checks = _checks(_series([(100.0, 40, 10.0)] * 5))  # one sample per third
    for name in ("RSS of the daemon's tree", "open file descriptors of the daemon's tree",
                 "p99 of small requests"):
        assert checks[name][0] is False
        assert "too few samples" in checks[name][1]


def test_failed_requests_and_tracebacks_fail_the_run() -> None:
    flat = [(100.0, 40, 10.0)] * 6
    series = _series(flat)
    series[0] = _interval(0.0, failed=2)  # in the warm-up: still counted
    checks = _checks(series, tracebacks=1)
    assert checks["failed requests"] == (False, f"2 of {100 * len(series):,}")
    assert checks["tracebacks in the daemon's log"] == (False, "1")
    assert _checks(_series(flat))["failed requests"][0] is True


def test_a_process_that_ended_fails_but_one_that_started_late_does_not() -> None:
    late = [_interval(0.0, pids=(1,)), _interval(10.0, pids=(1, 2, 3)),
            _interval(20.0, pids=(1, 2, 3))]
    assert ended_pids(late) == []
    restarted = [*late, _interval(30.0, pids=(1, 2, 4)), _interval(40.0, pids=(1, 2, 4))]
    assert ended_pids(restarted) == [3]
    series = _series([(100.0, 40, 10.0)] * 6)
    series[4] = _interval(series[4].start_seconds, pids=(1, 7))
    assert _checks(series)["daemon processes that ended"] == (False, "2, 7")


def test_count_tracebacks() -> None:
    log = ("2026-11-25T10:00:00 [objstore] started\n"
           "2026-11-25T10:00:01 [-] Unhandled Error\n\tTraceback (most recent call last):\n"
           "\t  File \"x.py\", line 1\n\tValueError: boom\n"
           "2026-11-25T10:00:02 [-] Traceback (most recent call last):\n")
    assert count_tracebacks(log) == 2
    assert count_tracebacks("2026-11-25T10:00:00 [objstore] started\n") == 0


# -- the table ----------------------------------------------------------------------------


def test_summary_rows_put_the_last_third_beside_the_first() -> None:
    series = _series([(200.0, 60, 20.0)] * 3 + [(210.0, 64, 30.0)] * 3)
    # After the warm-up: samples from 10 to 70 s; thirds 10-30 s and 50-70 s.
    timings = [Timing(10.0 + n, "HEAD", False, float(n + 1), True) for n in range(20)]
    timings += [Timing(50.0 + n, "HEAD", False, float(2 * n + 2), True) for n in range(20)]
    timings += [Timing(40.0, "HEAD", False, 999.0, True),  # the middle third: left out
                Timing(55.0, "HEAD", False, 999.0, False)]  # failed: not timed
    limits = LIMITS
    rows = {row.workload: row for row in summary_rows(
        series, timings, limits, verdict(series, limits, 0))}
    total = rows["total RSS of the daemon (median of the samples)"]
    assert (total.objstore, total.baseline, total.unit) == (210.0, 200.0, "MB")
    assert total.note.startswith("flat: 200.0 -> 210.0 MB")
    assert rows["open file descriptors of the daemon (median)"].objstore == 64
    assert (rows["p99 of small requests (median of the intervals)"].objstore,
            rows["p99 of small requests (median of the intervals)"].baseline) == (30.0, 20.0)
    assert rows["RSS, worker 1"].objstore == 105.0  # half of the tree's 210 MB
    assert rows["open fds, supervisor (twistd)"].baseline == 30
    head = rows["HEAD, p99"]
    assert (head.baseline, head.objstore) == (20.0, 40.0)
    assert head.note == "20 -> 20 requests; p50 10.0 -> 20.0 ms"


def test_the_table_names_its_columns() -> None:
    table = format_table([Row("total RSS", "MB", 210.0, 200.0)],
                         baseline_name="first third", measured_name="last third")
    assert table.splitlines()[0] == ("| workload | unit | last third | first third | "
                                     "last third / first third | note |")
    assert "| total RSS | MB | 210 | 200 | 1.05 |" in table


# -- the load's choices ------------------------------------------------------------------------


def _client(max_objects: int = 3) -> tuple[Client, list[str]]:
    target = S3Target("http://127.0.0.1:9", "AK", "SK")  # never contacted here
    client = Client(0, target, Recorder(), 0.0, max_objects, threading.Event())
    done: list[str] = []
    client.operations = {name: (lambda n=name: done.append(n)) for name in client.operations}
    return client, done


def test_every_operation_of_the_mix_exists() -> None:
    client, _ = _client()
    assert {name for name, _ in MIX} == set(client.operations)
    assert all(weight > 0 for _, weight in MIX)


def test_a_client_writes_first_and_deletes_at_its_bound() -> None:
    client, done = _client(max_objects=3)
    client.step()
    assert done == ["put-small"]  # nothing to read yet
    client.objects = [("c0/1", 1), ("c0/2", 1), ("c0/3", 1)]
    for _ in range(5):
        client.step()
    assert done[1:] == ["delete"] * 5
    client.objects.pop()
    for _ in range(200):
        client.step()
    assert set(done[6:]) == {name for name, _ in MIX}  # the seeded mix reaches every kind


def test_copy_source_is_signed() -> None:
    target = S3Target("http://127.0.0.1:9", "AK", "SK")
    headers = target.signed_headers("PUT", "/b/k", headers={"x-amz-copy-source": "/b/src"})
    signed = headers["Authorization"].split("SignedHeaders=")[1].split(",")[0]
    assert "x-amz-copy-source" in signed.split(";")
