"""blobs/page_cache.py on real files: a file evicted from the page cache (its clean pages
dropped with POSIX_FADV_DONTNEED) is not `cached`; `warm` brings it back; ranges, the end
of the file and an empty range."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from objstore.blobs import page_cache
from objstore.blobs.reader import BlobFile, BlobReader
from objstore.blobs.segments import Segment

MIB = 1024 * 1024

pytestmark = pytest.mark.skipif(getattr(os, "RWF_NOWAIT", None) is None,
                                reason="no preadv2 RWF_NOWAIT on this platform")


def evict(fd: int) -> None:
    """Drop the file's pages, and turn the kernel's read-ahead off for this descriptor
    (it reads up to read_ahead_kb past a read: what a test warms must be all there is)."""
    os.fsync(fd)  # only clean pages can be dropped
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


@pytest.fixture
def blob(tmp_path: Path) -> Iterator[int]:
    path = tmp_path / "blob"
    path.write_bytes(os.urandom(4 * MIB))
    fd = os.open(path, os.O_RDONLY)
    yield fd
    os.close(fd)


def test_an_evicted_file_is_not_cached_until_warmed(blob: int) -> None:
    evict(blob)
    if page_cache.cached(blob, 0, 4 * MIB):
        pytest.skip("this file system keeps the pages (or refuses RWF_NOWAIT)")
    page_cache.warm(blob, MIB, 2 * MIB)
    assert page_cache.cached(blob, MIB, 2 * MIB)
    assert not page_cache.cached(blob, 3 * MIB + 1, MIB - 1)  # past the warmed range


def test_a_range_counts_its_first_and_last_byte(blob: int) -> None:
    evict(blob)
    page_cache.warm(blob, 0, 4096)
    if not page_cache.cached(blob, 0, 4096):
        pytest.skip("this file system does not answer RWF_NOWAIT reads")
    assert not page_cache.cached(blob, 0, 2 * MIB)  # its last byte is not in


def test_empty_ranges_and_the_end_of_the_file(blob: int) -> None:
    assert page_cache.cached(blob, 0, 0)
    page_cache.warm(blob, 4 * MIB - 10, 100)  # stops at the end of the file
    page_cache.warm(blob, 0, 0)
    assert page_cache.cached(blob, 4 * MIB - 10, 10)


def test_a_page_missing_between_the_ends_is_seen_where_cachestat_is(blob: int) -> None:
    evict(blob)
    if page_cache.cached_pages(blob, 0, 4 * MIB) is None:
        pytest.skip("no cachestat(2) here: the RWF_NOWAIT probe sees the two ends only")
    page_cache.warm(blob, 0, MIB)
    page_cache.warm(blob, 3 * MIB, MIB)
    assert page_cache.cached(blob, 0, MIB) and page_cache.cached(blob, 3 * MIB, MIB)
    in_cache, pages = page_cache.cached_pages(blob, 0, 4 * MIB) or (0, 0)
    assert pages == 1024 and in_cache < pages  # the kernel may read ahead past a warm-up
    assert not page_cache.cached(blob, 0, 4 * MIB)


def test_pages_are_counted_from_the_page_the_range_starts_in(blob: int) -> None:
    if page_cache.cached_pages(blob, 0, 1) is None:
        pytest.skip("no cachestat(2) here")
    assert page_cache.cached_pages(blob, 4095, 2) == (2, 2)  # the bytes straddle two pages
    assert page_cache.cached_pages(blob, 4096, 4096) == (1, 1)


def test_a_readers_one_blob_says_whether_its_range_is_cached(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    path.write_bytes(os.urandom(MIB))
    opened = lambda blob_id: BlobFile(blob_id, str(path))  # noqa: E731
    reader = BlobReader([Segment("b1", 4096, 8192)], opened)
    evict(reader_fd(reader))
    if page_cache.cached(reader_fd(reader), 4096, 8192):
        pytest.skip("this file system keeps the pages (or refuses RWF_NOWAIT)")
    assert reader.in_page_cache() is False
    page_cache.warm(reader_fd(reader), 4096, 8192)
    assert reader.in_page_cache() is True
    assert reader.read_all() == path.read_bytes()[4096:12288]
    two = BlobReader([Segment("b1", 0, 10), Segment("b2", 0, 10)], opened)
    assert two.in_page_cache() is None  # several blobs: not asked
    two.close()


def reader_fd(reader: BlobReader) -> int:
    return next(reader.file_spans())[0]
