"""The multipart benchmark's pure helpers: the generated body, part planning, the expected
ETag, the Complete document, boundary ranges and the table. No daemon, no reactor."""

from __future__ import annotations

import hashlib
from itertools import pairwise

import pytest
from lxml import etree

from bench.multipart import RunResult, boundary_checks, summary_rows
from bench.upload import (
    MIB,
    PartPlan,
    Pattern,
    boundary_range,
    complete_body,
    multipart_etag,
    part_md5s,
    plan_parts,
)


def _naive(data: bytes, start: int, length: int) -> bytes:
    return bytes(data[(start + i) % len(data)] for i in range(length))


@pytest.mark.parametrize(("start", "length", "chunk"), [
    (0, 0, 4), (0, 7, 4), (5, 20, 4), (6, 13, 100), (123, 50, 3), (7, 7, 7)])
def test_pattern_chunks_are_the_repeated_bytes(start: int, length: int, chunk: int) -> None:
    pattern = Pattern(b"abcdefg")
    chunks = list(pattern.chunks(start, length, chunk))
    assert b"".join(chunks) == _naive(b"abcdefg", start, length)
    assert all(0 < len(c) <= min(chunk, 7) for c in chunks)
    assert pattern.read(start, length) == _naive(b"abcdefg", start, length)


def test_pattern_md5() -> None:
    pattern = Pattern(bytes(range(251)))
    assert pattern.md5(100, 1000) == hashlib.md5(_naive(bytes(range(251)), 100, 1000)).digest()
    with pytest.raises(ValueError):
        Pattern(b"")


def test_plan_parts_of_a_gib_in_100() -> None:
    parts = plan_parts(1024 * MIB, 100)
    assert len(parts) == 100
    assert parts[0] == PartPlan(1, 0, 10_737_419)  # ~10.24 MiB
    assert all(p.size_bytes == 10_737_419 for p in parts[:-1])
    assert parts[-1].size_bytes == 1024 * MIB - 99 * 10_737_419
    assert sum(p.size_bytes for p in parts) == 1024 * MIB
    assert all(b.offset == a.offset + a.size_bytes for a, b in pairwise(parts))
    assert [p.number for p in parts] == list(range(1, 101))


def test_plan_parts_exact_and_impossible() -> None:
    assert plan_parts(100, 4) == [PartPlan(1, 0, 25), PartPlan(2, 25, 25),
                                  PartPlan(3, 50, 25), PartPlan(4, 75, 25)]
    assert plan_parts(5, 1) == [PartPlan(1, 0, 5)]
    with pytest.raises(ValueError):
        plan_parts(3, 4)
    with pytest.raises(ValueError):
        plan_parts(10, 0)
    with pytest.raises(ValueError):  # ceil(10/4) = 3: the fourth part would be empty
        plan_parts(9, 4)


def test_part_md5s_hash_each_shape_once() -> None:
    data = bytes(range(256)) * 4  # period 1024
    pattern = Pattern(data)
    parts = plan_parts(10 * 1024 + 100, 11)  # parts of 940 bytes: many phases
    expected = [hashlib.md5(_naive(data, p.offset, p.size_bytes)).digest() for p in parts]
    assert part_md5s(pattern, parts) == expected


def test_multipart_etag() -> None:
    digests = [hashlib.md5(b"a").digest(), hashlib.md5(b"b").digest()]
    assert multipart_etag(digests) == f'"{hashlib.md5(b"".join(digests)).hexdigest()}-2"'


def test_complete_body() -> None:
    root = etree.fromstring(complete_body([(1, '"e1"'), (2, '"e2"')]))
    ns = "{http://s3.amazonaws.com/doc/2006-03-01/}"
    assert root.tag == f"{ns}CompleteMultipartUpload"
    assert [(p.findtext(f"{ns}PartNumber"), p.findtext(f"{ns}ETag"))
            for p in root] == [("1", '"e1"'), ("2", '"e2"')]


def test_boundary_range_straddles_the_end_of_a_part() -> None:
    parts = plan_parts(1000, 4)  # 250 each
    assert boundary_range(parts, 1, 100) == (200, 299)
    assert boundary_range(parts, 3, 100) == (700, 799)
    assert boundary_range(parts, 3, 1000) == (250, 999)  # clipped to the object
    assert boundary_checks(parts) == [1, 2, 3]
    assert boundary_checks(plan_parts(1024 * MIB, 100)) == [1, 50, 99]
    assert boundary_checks(plan_parts(10, 1)) == []


def test_summary_rows() -> None:
    runs = [RunResult(f"mp-{i}", 4.0, ms, 8192, 70_000, 90_000, 0.02, True, 3, 3)
            for i, ms in enumerate((30.0, 25.0, 400.0))]
    runs.append(RunResult("mp-3", 8.0, 20.0, 0, 0, 0, 0.01, False, 2, 3, ("HEAD mp-3: x",)))
    rows = summary_rows(runs, 1024 * MIB, 100, 4)
    median, slowest = rows[0], rows[1]
    assert (median.objstore, median.baseline, median.unit) == (27.5, 1000.0, "ms")
    assert slowest.objstore == 400.0 and slowest.ratio == 0.4
    assert "30.0, 25.0, 400, 20.0 ms" in median.note
    assert rows[2].objstore == 8.0  # KiB
    assert rows[3].objstore == 256.0  # median of 256, 256, 256, 128 MiB/s
    assert (rows[4].objstore, rows[4].baseline) == (3, 4)
    assert (rows[5].objstore, rows[5].baseline) == (11, 12)
