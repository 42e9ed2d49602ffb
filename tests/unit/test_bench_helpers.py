"""The benchmark harness's pure helpers: wrk summary parsing, the wrk command line, the
results table and the /proc parsing. The benchmark itself never runs in the test suite."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.report import Row, cpu_model, format_table, memory_gib, percentile
from bench.servers import parse_proc_stat
from bench.wrk import WrkError, WrkRun, parse_wrk_output, write_paths

WRK_OUTPUT = """\
Running 3s test @ http://127.0.0.1:18081
  1 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   435.19us  603.18us   8.35ms   94.63%
  190336 requests in 3.10s, 787.25MB read
Requests/sec:  61373.98
BENCH_JSON {"requests": 190336, "duration_us": 3101249, "bytes": 825487232, "p50_us": 294, \
"p99_us": 3704, "max_us": 8348, "errors_connect": 1, "errors_read": 2, "errors_write": 0, \
"errors_status": 7, "errors_timeout": 3}
"""


def test_parse_wrk_output() -> None:
    result = parse_wrk_output(WRK_OUTPUT)
    assert result.requests == 190336
    assert result.duration_seconds == pytest.approx(3.101249)
    assert result.ops_per_second == pytest.approx(190336 / 3.101249)
    assert (result.p50_ms, result.p99_ms, result.max_ms) == (0.294, 3.704, 8.348)
    assert result.bytes_read == 825487232
    assert (result.socket_errors, result.status_errors, result.failed) == (6, 7, 13)


def test_parse_wrk_output_without_summary() -> None:
    with pytest.raises(WrkError, match="no BENCH_JSON"):
        parse_wrk_output("Running 3s test @ http://127.0.0.1:1\nunable to connect\n")


def test_wrk_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("bench.wrk.wrk_binary", lambda: "wrk")
    paths = tmp_path / "p"
    assert write_paths(paths, (f"/b/{i}" for i in range(3))) == 3
    assert paths.read_text() == "/b/0\n/b/1\n/b/2\n"
    once = WrkRun("http://127.0.0.1:1", paths, "PUT", tmp_path / "body", True, 10)
    command = once.command()
    assert command[:5] == ["wrk", "-t1", "-c32", "-d10s", "--timeout"]
    assert command[command.index("--"):] == [
        "--", str(paths), "PUT", str(tmp_path / "body"), "once", "1", "32"]
    cycle = WrkRun("http://127.0.0.1:1", paths, "GET", None, False, 3, threads=2)
    assert cycle.command()[cycle.command().index("--") + 3:] == ["-", "cycle", "2", "0"]


def test_table_has_ratios_and_dashes() -> None:
    table = format_table([
        Row("4 KiB GET, c=32", "ops/s", 5000.0, 40000.0, "note"),
        Row("4 KiB GET, p99", "ms", 12.345, 1.5),
        Row("list page", "ms", 7.0),
    ])
    lines = table.splitlines()
    assert lines[0].startswith("| workload | unit | objstore | nginx |")
    assert lines[2] == "| 4 KiB GET, c=32 | ops/s | 5,000 | 40,000 | 0.12 | note |"
    assert lines[3] == "| 4 KiB GET, p99 | ms | 12.35 | 1.50 | 8.23 |  |"
    assert lines[4] == "| list page | ms | 7.00 | — | — |  |"


def test_percentile_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile([3.0], 0.9) == 3.0
    with pytest.raises(ValueError):
        percentile([], 0.5)


def test_proc_parsing() -> None:
    cpuinfo = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n"
    assert cpu_model(cpuinfo) == "AMD EPYC 7B13"
    assert cpu_model("") == "unknown CPU"
    assert memory_gib("MemTotal:       24641344 kB\nMemFree: 1 kB\n") == pytest.approx(23.5, 0.01)


def test_proc_stat_parsing() -> None:
    # The command name may contain spaces and parentheses; fields count from after it.
    text = "4242 (nginx: worker (x)) S 4241 4241 4241 0 -1 4194624 3 0 0 0 170 30 0 0 20 0 1"
    assert parse_proc_stat(text) == (4241, 200)


def test_table_with_a_peer_shows_ratios_first() -> None:
    table = format_table([
        Row("4 KiB PUT, c=32", "ops/s", 400.0, 4000.0, "cpu", peer=100.0),
        Row("DeleteObjects of 1,000 keys", "ms", 3000.0, None, peer=60.0),
        Row("list page", "ms", 7.0),
    ])
    lines = table.splitlines()
    assert lines[0] == ("| workload | unit | objstore / moto | objstore / nginx | objstore | "
                        "moto | nginx | note |")
    assert lines[2] == "| 4 KiB PUT, c=32 | ops/s | 4.00 | 0.10 | 400 | 100 | 4,000 | cpu |"
    assert lines[3].startswith("| DeleteObjects of 1,000 keys | ms | 50.0 | — | 3000 | 60.00 | —")
    assert lines[4] == "| list page | ms | — | — | 7.00 | — | — |  |"


def test_only_picks_phases_in_the_order_given() -> None:
    from bench.run import DEFAULT_PHASES, selected_phases

    assert selected_phases(None) == selected_phases("") == DEFAULT_PHASES
    assert "rm" not in DEFAULT_PHASES  # optional: only when named
    assert selected_phases("listing, small_get,get,rm") == ("list", "get", "rm")
    with pytest.raises(ValueError, match="small_gets"):
        selected_phases("small_gets")


def test_table_with_rgw_beside_moto_and_alone() -> None:
    both = format_table([
        Row("4 KiB PUT, c=32", "ops/s", 400.0, 4000.0, "cpu", peer=100.0, rgw=800.0),
        Row("list page", "ms", 7.0),
    ]).splitlines()
    assert both[0] == ("| workload | unit | objstore / moto | objstore / rgw | objstore / nginx "
                       "| objstore | moto | rgw | nginx | note |")
    assert both[1] == "|---|---|--:|--:|--:|--:|--:|--:|--:|---|"
    assert both[2] == ("| 4 KiB PUT, c=32 | ops/s | 4.00 | 0.50 | 0.10 | 400 | 100 | 800 | "
                       "4,000 | cpu |")
    assert both[3] == "| list page | ms | — | — | — | 7.00 | — | — | — |  |"
    alone = format_table([Row("DeleteObjects of 1,000 keys", "ms", 3000.0, rgw=540.0)])
    assert alone.splitlines()[0] == ("| workload | unit | objstore / rgw | objstore / nginx | "
                                     "objstore | rgw | nginx | note |")
    assert alone.splitlines()[2] == ("| DeleteObjects of 1,000 keys | ms | 5.56 | — | 3000 | "
                                     "540 | — |  |")


def test_peer_figures_go_to_their_columns() -> None:
    from bench.run import peer_fields

    assert peer_fields({"moto": 1.0, "rgw": 2.0}) == {"peer": 1.0, "rgw": 2.0}
    assert peer_fields({"rgw": 2.0}) == {"peer": None, "rgw": 2.0}
    assert peer_fields({}) == {"peer": None, "rgw": None}


def test_ceph_conf_keeps_everything_under_its_directory(tmp_path: Path) -> None:
    from bench.servers import ceph_conf

    text = ceph_conf(tmp_path, "fsid-1", "[v2:127.0.0.1:1,v1:127.0.0.1:2]", memstore_bytes=7)
    settings = dict(line.split(" = ", 1) for line in text.splitlines() if " = " in line)
    assert settings["osd objectstore"] == "memstore"
    assert settings["memstore device bytes"] == "7"
    assert settings["osd pool default size"] == settings["osd pool default min size"] == "1"
    assert settings["mon allow pool size one"] == "true"
    assert settings["public addr"] == settings["cluster addr"] == "127.0.0.1"
    for name in ("keyring", "run dir", "admin socket", "pid file", "log file", "crash dir",
                 "mon data", "osd data"):
        assert settings[name].startswith(str(tmp_path) + "/"), name
