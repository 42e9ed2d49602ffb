"""The access log's line format, its batching (a fake clock, a thread stand-in), the
destinations the config accepts, and the metrics scrape token check."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import defer, task

from objstore.admin.metrics_routes import read_bearer_token, scrape_allowed
from objstore.audit.access_log import FLUSH_SECONDS, AccessEntry, AccessLog, format_line
from objstore.config import parse_config

ENTRY = AccessEntry(ts=1_764_000_000.25, request_id="17A2B", principal="alice",
                    source_ip="10.0.0.7", method="PUT", path="/bkt/a b\n/c",
                    status=200, bytes_in=1234, bytes_out=0, duration_ms=3.14159)


def test_text_line_is_one_line_of_fields() -> None:
    line = format_line(ENTRY, "text")
    assert line.endswith("\n") and line.count("\n") == 1
    fields = line.split()
    assert fields == ["2025-11-24T16:00:00.250Z", "17A2B", "alice", "10.0.0.7", "PUT",
                      "/bkt/a%20b\\n/c", "200", "1234", "0", "3.142ms"]


def test_json_line_round_trips() -> None:
    line = format_line(ENTRY, "json")
    assert line.count("\n") == 1
    document = json.loads(line)
    assert document["path"] == "/bkt/a b\n/c"
    assert document["principal"] == "alice" and document["status"] == 200
    assert document["duration_ms"] == 3.142


def test_empty_fields_show_a_dash() -> None:
    entry = AccessEntry(ts=0.0, request_id="", principal="", source_ip="", method="",
                        path="", status=499, bytes_in=0, bytes_out=0, duration_ms=0.0)
    assert format_line(entry, "text").split()[1:6] == ["-"] * 5


def test_lines_are_written_in_batches_and_bounded(tmp_path: Path) -> None:
    clock = task.Clock()
    written: list[bytes] = []

    def run(fn: Any, fd: int, data: bytes) -> defer.Deferred[None]:
        written.append(data)
        return defer.succeed(None)

    access = AccessLog(str(tmp_path / "access.log"), "text", run_in_thread=run, clock=clock,
                       max_pending=3)
    access.startService()
    for _ in range(5):
        access.add(ENTRY)
    assert written == [] and access.dropped == 2
    clock.advance(FLUSH_SECONDS)
    assert len(written) == 1 and written[0].count(b"\n") == 3
    assert access.written == 3
    access.add(ENTRY)
    stopped = access.stopService()  # the last line goes before the file closes
    assert stopped.called and len(written) == 2


def test_a_real_file_gets_whole_lines(tmp_path: Path) -> None:
    clock = task.Clock()
    path = tmp_path / "access.log"

    def run(fn: Any, *args: Any) -> defer.Deferred[None]:
        return defer.succeed(fn(*args))

    access = AccessLog(str(path), "json", run_in_thread=run, clock=clock)
    access.startService()
    access.add(ENTRY)
    access.add(ENTRY)
    access.stopService()
    assert [json.loads(line)["request_id"] for line in path.read_text().splitlines()] == \
        ["17A2B", "17A2B"]


@pytest.mark.parametrize("value", ["", "-"])
def test_off_and_stdout_are_kept_as_is(value: str) -> None:
    config = parse_config(tomllib.loads(f'[logging]\naccess_log = "{value}"\n'), base_dir="/x")
    assert config.logging.access_log == value


def test_a_relative_access_log_path_is_resolved(tmp_path: Path) -> None:
    config = parse_config(tomllib.loads('[logging]\naccess_log = "access.log"\n'),
                          base_dir=str(tmp_path))
    assert config.logging.access_log == str(tmp_path / "access.log")


def test_scrape_token_compared_whole() -> None:
    expected = b"Bearer s3cret"
    assert scrape_allowed(expected, b"Bearer s3cret")
    assert scrape_allowed(expected, b"Bearer s3cret ")
    for presented in (None, b"", b"Bearer s3cre", b"s3cret", b"Bearer s3cretX", b"bearer s3cret"):
        assert not scrape_allowed(expected, presented)


def test_bearer_token_file(tmp_path: Path) -> None:
    assert read_bearer_token(None) is None
    good = tmp_path / "token"
    good.write_bytes(b"abc-123\n")
    assert read_bearer_token(str(good)) == b"abc-123"
    for bad in (b"\n", b"two words\n", b"\xff\xfe\n"):
        good.write_bytes(bad)
        with pytest.raises(ValueError, match="no token"):
            read_bearer_token(str(good))
