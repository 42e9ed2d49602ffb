"""The memory benchmark's pure helpers: the daemon's process tree and its RSS from /proc
text, the peaks of a series of samples, and the table. No daemon, no reactor."""

from __future__ import annotations

from bench.memory import Outcome, Upload, failures, summary_rows
from bench.proctree import (
    Peaks,
    Sample,
    parse_children,
    parse_io,
    parse_status_memory,
    process_label,
    process_tree,
)

STATUS = """\
Name:\tpython3
Umask:\t0022
State:\tS (sleeping)
VmPeak:\t  512000 kB
VmRSS:\t   93260 kB
RssAnon:\t   61000 kB
RssFile:\t   32000 kB
RssShmem:\t     260 kB
Threads:\t11
"""

ROLLUP = """\
55d0c0a00000-7ffd1b9f2000 ---p 00000000 00:00 0                          [rollup]
Rss:               93260 kB
Pss:               70120 kB
Pss_Anon:          61000 kB
"""

IO = """\
rchar: 1203
wchar: 1073741824
syscr: 10
syscw: 1024
read_bytes: 0
write_bytes: 1073745920
cancelled_write_bytes: 4096
"""


def test_parse_children_handles_the_trailing_space_and_nothing() -> None:
    assert parse_children("19702 19703 ") == [19702, 19703]
    assert parse_children("") == []


def test_parse_status_memory_in_bytes() -> None:
    assert parse_status_memory(STATUS) == {
        "VmRSS": 93260 * 1024, "RssAnon": 61000 * 1024, "RssFile": 32000 * 1024,
        "RssShmem": 260 * 1024}
    assert parse_status_memory(ROLLUP, ("Pss",)) == {"Pss": 70120 * 1024}


def test_parse_status_memory_of_a_zombie_is_zero() -> None:
    zombie = "Name:\ttwistd\nState:\tZ (zombie)\nThreads:\t1\n"
    assert parse_status_memory(zombie) == dict.fromkeys(
        ("VmRSS", "RssAnon", "RssFile", "RssShmem"), 0)


def test_parse_io() -> None:
    counters = parse_io(IO)
    assert counters["write_bytes"] == 1073745920
    assert counters["rchar"] == 1203
    assert len(counters) == 7


def test_process_tree_walks_every_descendant_once() -> None:
    tree = {1: [2, 3], 2: [4], 3: [], 4: [2], 9: [10]}  # 4 -> 2: a re-used pid
    assert process_tree(1, lambda pid: tree.get(pid, [])) == [1, 2, 3, 4]
    assert process_tree(7, lambda pid: []) == [7]


def test_process_label() -> None:
    twistd = ["/work/main/.venv/bin/python", "/work/main/.venv/bin/twistd", "-n",
              "--pidfile=", "objstore", "--config", "objstore.toml"]
    assert process_label(twistd) == "supervisor (twistd)"
    worker = ["/usr/bin/python3", "-m", "objstore.prefork.child", "--index", "1",
              "--listen-fd", "7"]
    assert process_label(worker) == "worker 1"
    assert process_label(["/usr/bin/sqlite3"]) == "sqlite3"
    assert process_label([]) == "?"


def _sample(seconds: float, rss_by_pid: dict[int, int]) -> Sample:
    return Sample(seconds, {pid: {"VmRSS": rss, "RssAnon": rss // 2, "RssFile": rss // 2,
                                  "RssShmem": 0, "Pss": rss // 4}
                            for pid, rss in rss_by_pid.items()})


def test_peaks_of_the_total_and_of_each_process() -> None:
    peaks = Peaks()
    labels = {1: "supervisor (twistd)", 2: "worker 0", 3: "worker 1"}
    peaks.add(_sample(0.0, {1: 100, 2: 100, 3: 100}), labels)
    peaks.add(_sample(0.2, {1: 100, 2: 300, 3: 50}), labels)  # total 450: the peak
    peaks.add(_sample(0.4, {1: 100, 2: 150, 3: 180}), labels)  # worker 1's own peak
    peaks.add(_sample(0.6, {1: 100, 2: 200}), labels)  # worker 1 gone
    assert peaks.samples == 4
    assert (peaks.total_bytes, peaks.total_at_seconds) == (450, 0.2)
    assert peaks.at_peak["RssAnon"] == 225
    assert peaks.processes_at_peak == 3
    assert peaks.per_process == {1: 100, 2: 300, 3: 180}
    assert peaks.labels[3] == "worker 1"
    assert (peaks.first_total_bytes, peaks.last_total_bytes) == (300, 300)
    assert peaks.pss_bytes == 112  # 75 + 25 + 12 at t=0.2 (each rounded down)


def _outcome(uploads: list[Upload]) -> Outcome:
    peaks = Peaks()
    peaks.add(_sample(1.0, {10: 150_000_000, 11: 200_000_000}),
              {10: "supervisor (twistd)", 11: "worker 0"})
    return Outcome(uploads, 1024**3, '"abc"', 64.0, peaks, 275_000_000, 1.5,
                   2 * 1024**3)


def test_summary_rows_put_the_target_beside_the_peak() -> None:
    good = Upload("big-000", 200, 60.0, '"abc"', "", 200, 1024**3, '"abc"')
    short = Upload("big-001", 500, 10.0, "", "boom", 200, 5, "")
    rows = summary_rows(_outcome([good, short]))
    first = rows[0]
    assert first.unit == "MB" and first.objstore == 350.0 and first.baseline == 400
    assert first.ratio == 350 / 400
    by_name = {row.workload: row for row in rows}
    assert by_name["peak RSS, worker 0 (pid 11)"].objstore == 200.0
    assert by_name["total RSS before the uploads (idle daemon)"].objstore == 275.0
    assert by_name["aggregate upload throughput"].objstore == 1024 / 64.0  # one good upload
    assert (by_name["uploads answered 200"].objstore,
            by_name["uploads answered 200"].baseline) == (1, 2)
    assert by_name["objects with the right size (HEAD)"].objstore == 1
    assert by_name["objects with the expected ETag (HEAD)"].objstore == 1


def test_failures_name_each_bad_upload() -> None:
    good = Upload("big-000", 200, 60.0, '"abc"', "", 200, 1024**3, '"abc"')
    bad_etag = Upload("big-001", 200, 60.0, '"x"', "", 200, 1024**3, '"x"')
    refused = Upload("big-002", 0, 0.0, "", "ConnectionResetError: reset", 404, -1, "")
    lines = failures(_outcome([good, bad_etag, refused]))
    assert lines == ['big-001: ETag "x"',
                     "big-002: answered nothing ConnectionResetError: reset; HEAD 404, "
                     "-1 bytes"]
