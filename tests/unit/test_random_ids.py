"""Random UUIDs drawn from a buffer (objstore/random_ids.py)."""

from __future__ import annotations

import os
import threading
import uuid

import pytest

from objstore import random_ids
from objstore.blobs.store import is_valid_blob_id, new_blob_id


def test_ids_are_version_4_uuids_in_canonical_form_and_valid_blob_ids() -> None:
    for _ in range(600):  # more than one draw of the buffer
        text = random_ids.random_uuid_text()
        parsed = uuid.UUID(text)
        assert str(parsed) == text and parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
        assert is_valid_blob_id(new_blob_id())


def test_one_system_call_serves_many_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = os.urandom

    def counting(size: int) -> bytes:
        calls.append(size)
        return real(size)

    monkeypatch.setattr(random_ids, "_pool", random_ids._Pool())
    monkeypatch.setattr(random_ids.os, "urandom", counting)
    ids = {random_ids.random_uuid_text() for _ in range(512)}
    assert len(ids) == 512
    assert len(calls) == 2


def test_a_forked_process_does_not_reuse_the_parents_buffer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pool = random_ids._Pool()
    pool.uuid4()
    parent_next = pool._buffer[pool._offset:pool._offset + 16]
    monkeypatch.setattr(random_ids.os, "getpid", lambda: -2)  # as a child sees it
    assert pool.uuid4().bytes[:6] != parent_next[:6]


def test_threads_drawing_at_once_never_get_the_same_id() -> None:
    seen: list[str] = []

    def draw() -> None:
        seen.extend(random_ids.random_uuid_text() for _ in range(2000))

    threads = [threading.Thread(target=draw) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(seen)) == len(seen) == 8000
