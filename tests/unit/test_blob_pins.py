"""A version's files removed while streamed reads hold its parts (BlobStore.delete_version
and pin_parts): the parts stay until the last reader lets go, who removes them; a pin
taken after the removal started fails."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from objstore.blobs.store import BlobStore


@pytest.fixture
def blobs(tmp_path: Path) -> BlobStore:
    store = BlobStore(str(tmp_path / "data"), fsync=False)
    store.prepare()
    return store


def composite(blobs: BlobStore, count: int = 3) -> tuple[str, list[str]]:
    """A composite version's files: its sidecar-only blob and its part blobs."""
    own = str(uuid.uuid4())
    blobs.write_sidecar(own, {"kind": "object"})
    parts = []
    for number in range(1, count + 1):
        part = str(uuid.uuid4())
        blobs.commit_bytes(bytes([number]) * 10, part, {"kind": "part"})
        parts.append(part)
    return own, parts


def present(blobs: BlobStore) -> set[str]:
    return {info.blob_id for info in blobs.iter_blobs()}


def test_without_readers_every_file_goes(blobs: BlobStore) -> None:
    own, parts = composite(blobs)
    blobs.delete_version(own, parts)
    assert present(blobs) == set()


def test_a_pinned_reader_keeps_the_parts_and_removes_them_when_done(blobs: BlobStore) -> None:
    own, parts = composite(blobs)
    pin = blobs.pin_parts(parts)
    blobs.delete_version(own, parts)
    # The version is gone for everyone else (its own blob, and the pin blob's name) ...
    assert present(blobs) == set(parts[1:])
    # ... while the reader still reads every part.
    with blobs.open_blob(parts[2]) as last:
        assert last.read(0, 10) == b"\x03" * 10
    pin.release()
    assert present(blobs) == set()
    pin.release()  # idempotent


def test_the_last_of_several_readers_removes_the_parts(blobs: BlobStore) -> None:
    own, parts = composite(blobs)
    first, second = blobs.pin_parts(parts), blobs.pin_parts(parts)
    blobs.delete_version(own, parts)
    first.release()
    assert present(blobs) == set(parts[1:])
    second.release()
    assert present(blobs) == set()


def test_a_pin_after_the_removal_started_fails(blobs: BlobStore) -> None:
    own, parts = composite(blobs)
    holder = blobs.pin_parts(parts)
    blobs.delete_version(own, parts)
    with pytest.raises(FileNotFoundError):
        blobs.pin_parts(parts)
    assert present(blobs) == set(parts[1:])  # the failed pin took nothing away
    holder.release()
    assert present(blobs) == set()


def test_a_second_removal_of_the_version_leaves_the_pinned_parts(blobs: BlobStore) -> None:
    # A delete that lost its row to an overwrite and the overwrite both let the replaced
    # version go (found by tests/integration/test_read_races.py on two workers): the
    # second removal finds the first part gone and must not take the others from the
    # reader that pinned them.
    own, parts = composite(blobs)
    reader = blobs.pin_parts(parts)
    blobs.delete_version(own, parts)
    blobs.delete_version(own, parts)
    assert present(blobs) == set(parts[1:])
    with blobs.open_blob(parts[2]) as last:
        assert last.read(0, 10) == b"\x03" * 10
    reader.release()
    assert present(blobs) == set()


def test_settling_a_crashed_removal_takes_the_parts_left(blobs: BlobStore) -> None:
    # The removal that unlinked the first part died with the process: no reader is left.
    own, parts = composite(blobs)
    blobs.delete(parts[0])
    blobs.delete_version(own, parts)
    assert present(blobs) == set(parts[1:])  # live: not this call's to remove
    blobs.delete_version(own, parts, settling=True)
    assert present(blobs) == set()


def test_a_released_pin_of_a_live_object_removes_nothing(blobs: BlobStore) -> None:
    own, parts = composite(blobs)
    blobs.pin_parts(parts).release()
    assert present(blobs) == {own, *parts}


def test_a_plain_version_is_its_blob_and_sidecar(blobs: BlobStore) -> None:
    blob_id = str(uuid.uuid4())
    blobs.commit_bytes(b"bytes", blob_id, {"kind": "object"})
    blobs.delete_version(blob_id)
    assert present(blobs) == set()
