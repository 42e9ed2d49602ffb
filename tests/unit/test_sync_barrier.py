"""The shared durability barrier (blobs/barrier.py) and the order in which the blob store
syncs and renames around it (DESIGN invariant 1)."""

from __future__ import annotations

import errno
import os
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from objstore.blobs.barrier import SYNCFS, SyncBarrier, reports_writeback_errors
from objstore.blobs.store import (
    BLOB_CHECK,
    SIDECAR_SUFFIX,
    BlobStore,
    blob_check,
    new_blob_id,
)

DEADLINE_SECONDS = 10.0


def _until(condition: Callable[[], bool]) -> None:
    """Wait (bounded) for other threads to reach a state."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    while not condition():
        assert time.monotonic() < deadline, "threads did not get there in time"
        threading.Event().wait(0.001)


class FakeVolume:
    """A syncfs stand-in that records its calls and can be held while running."""

    def __init__(self) -> None:
        self.calls = 0
        self.release = threading.Event()
        self.release.set()
        self.error: OSError | None = None

    def __call__(self, fd: int) -> None:
        self.calls += 1
        self.release.wait(DEADLINE_SECONDS)
        if self.error is not None:
            raise self.error


def test_a_lone_write_runs_its_own_syncs_and_no_syncfs(tmp_path: Path) -> None:
    volume = FakeVolume()
    barrier = SyncBarrier(str(tmp_path), syncfs=volume)
    own: list[str] = []
    barrier.sync(lambda: own.append("mine"))
    assert own == ["mine"] and volume.calls == 0
    assert (barrier.rounds, barrier.grouped) == (1, 0)


def _waiting(barrier: SyncBarrier) -> int:
    pending = barrier._next
    return 0 if pending is None else len(pending.alone)


def test_writes_arriving_during_a_sync_share_one_syncfs_that_starts_after_them(
        tmp_path: Path) -> None:
    volume = FakeVolume()
    barrier = SyncBarrier(str(tmp_path), syncfs=volume)
    first_started, first_release = threading.Event(), threading.Event()

    def first_own() -> None:
        first_started.set()
        first_release.wait(DEADLINE_SECONDS)

    done: list[str] = []
    first = threading.Thread(target=lambda: (barrier.sync(first_own), done.append("first")))
    first.start()
    assert first_started.wait(DEADLINE_SECONDS)
    others = [threading.Thread(target=lambda n=n: (barrier.sync(lambda: None),
                                                   done.append(f"w{n}")))
              for n in range(4)]
    for thread in others:
        thread.start()
    _until(lambda: _waiting(barrier) == 4)
    assert done == [] and volume.calls == 0  # nobody is answered by a sync that began earlier
    first_release.set()
    for thread in [first, *others]:
        thread.join(DEADLINE_SECONDS)
    assert sorted(done) == ["first", "w0", "w1", "w2", "w3"]
    assert volume.calls == 1  # the four waiting writes: one whole-volume sync
    assert (barrier.rounds, barrier.grouped) == (2, 1)


def test_a_failed_syncfs_fails_every_write_of_its_round(tmp_path: Path) -> None:
    volume = FakeVolume()
    barrier = SyncBarrier(str(tmp_path), syncfs=volume)
    hold = threading.Event()
    started = threading.Event()

    def held() -> None:
        started.set()
        hold.wait(DEADLINE_SECONDS)

    holder = threading.Thread(target=barrier.sync, args=(held,))
    holder.start()
    assert started.wait(DEADLINE_SECONDS)
    volume.error = OSError(errno.EIO, "device gone")
    errors: list[BaseException] = []

    def write() -> None:
        try:
            barrier.sync(lambda: None)
        except OSError as error:
            errors.append(error)

    writers = [threading.Thread(target=write) for _ in range(3)]
    for thread in writers:
        thread.start()
    _until(lambda: _waiting(barrier) == 3)
    hold.set()
    for thread in [holder, *writers]:
        thread.join(DEADLINE_SECONDS)
    assert len(errors) == 3
    assert {getattr(error, "errno", None) for error in errors} == {errno.EIO}
    volume.error = None
    barrier.sync(lambda: None)  # the barrier is usable again


def test_without_syncfs_every_write_of_a_round_runs_its_own_syncs(tmp_path: Path) -> None:
    barrier = SyncBarrier(str(tmp_path), syncfs=None)
    hold, started = threading.Event(), threading.Event()
    ran: list[int] = []

    def held() -> None:
        started.set()
        hold.wait(DEADLINE_SECONDS)

    holder = threading.Thread(target=barrier.sync, args=(held,))
    holder.start()
    assert started.wait(DEADLINE_SECONDS)
    writers = [threading.Thread(target=barrier.sync, args=(lambda n=n: ran.append(n),))
               for n in range(3)]
    for thread in writers:
        thread.start()
    _until(lambda: _waiting(barrier) == 3)
    hold.set()
    for thread in [holder, *writers]:
        thread.join(DEADLINE_SECONDS)
    assert sorted(ran) == [0, 1, 2]


def test_a_write_that_began_before_a_failed_syncfs_is_never_answered_durable(
        tmp_path: Path) -> None:
    """syncfs reports a lost page once, to whichever round runs next: a write that had
    begun by then fails even when its own round's sync succeeds."""
    volume = FakeVolume()
    barrier = SyncBarrier(str(tmp_path), syncfs=volume)
    early = barrier.begin()  # its data written; its sync comes later
    hold, started = threading.Event(), threading.Event()

    def held() -> None:
        started.set()
        hold.wait(DEADLINE_SECONDS)

    holder = threading.Thread(target=barrier.sync, args=(held,))
    holder.start()
    assert started.wait(DEADLINE_SECONDS)
    volume.error = OSError(errno.EIO, "lost a page")
    errors: list[BaseException] = []

    def others() -> None:
        try:
            barrier.sync(lambda: None)
        except OSError as error:
            errors.append(error)

    failing = [threading.Thread(target=others) for _ in range(2)]
    for thread in failing:
        thread.start()
    _until(lambda: _waiting(barrier) == 2)
    hold.set()
    for thread in [holder, *failing]:
        thread.join(DEADLINE_SECONDS)
    assert len(errors) == 2
    volume.error = None
    with pytest.raises(OSError) as raised:
        barrier.sync(lambda: None, early)  # alone and fine, but it began before the error
    assert raised.value.errno == errno.EIO
    later = barrier.begin()
    barrier.sync(lambda: None, later)  # began after the error was reported: fine
    barrier.close()


@pytest.mark.skipif(SYNCFS is None, reason="no syncfs(2) here")
def test_the_real_syncfs_runs(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert SYNCFS is not None
        SYNCFS(fd)
    finally:
        os.close(fd)
    with pytest.raises(OSError) as raised:
        SYNCFS(-1)
    assert raised.value.errno == errno.EBADF


class WatchingBarrier(SyncBarrier):
    """Records, at each sync, which of the blob's final names exist, and may fail one."""

    def __init__(self, volume: str, watched: Callable[[], tuple[bool, bool]]) -> None:
        super().__init__(volume)
        self.seen: list[tuple[bool, bool]] = []
        self.fail_at: int | None = None
        self._watched = watched

    def sync(self, alone: Callable[[], None], began: int | None = None, *,
             whole: bool = False) -> None:
        self.seen.append(self._watched())
        if self.fail_at == len(self.seen):
            raise OSError(errno.EIO, "injected")
        super().sync(alone, began, whole=whole)


def _watching_store(tmp_path: Path, blob_id: str) -> tuple[BlobStore, WatchingBarrier]:
    store = BlobStore(str(tmp_path / "data"))
    store.prepare()
    path = store.blob_path(blob_id)
    store._ensure_dir(os.path.dirname(path))  # the fan-out directories exist already
    barrier = WatchingBarrier(store.data_dir, lambda: (os.path.exists(path),
                                                       os.path.exists(path + SIDECAR_SUFFIX)))
    store.barrier = barrier
    return store, barrier


def test_a_small_commit_is_made_durable_in_one_sync_at_its_final_names(
        tmp_path: Path) -> None:
    """A small body's blob id is new: its blob and sidecar are created where they stay,
    and one barrier round makes them durable (lever 5 of issue 31); nothing is renamed
    and no temp file is made."""
    blob_id = new_blob_id()
    store, barrier = _watching_store(tmp_path, blob_id)
    store.commit_bytes(b"hello", blob_id, {"key": "k"})
    assert barrier.seen == [(True, True)]  # the one sync: both files in place
    assert barrier.rounds == 1
    with open(store.blob_path(blob_id), "rb") as handle:
        assert handle.read() == b"hello"
    sidecar = store.read_sidecar(blob_id)
    assert sidecar["key"] == "k"
    assert sidecar[BLOB_CHECK] == {"bytes": 5, "crc32": zlib.crc32(b"hello")}
    assert os.listdir(store.tmp_dir) == []


def test_a_small_commit_that_can_not_be_made_durable_leaves_nothing(
        tmp_path: Path) -> None:
    blob_id = new_blob_id()
    store, barrier = _watching_store(tmp_path, blob_id)
    barrier.fail_at = 1
    with pytest.raises(OSError):
        store.commit_bytes(b"hello", blob_id, {"key": "k"})
    assert not os.path.exists(store.blob_path(blob_id))
    assert not os.path.exists(store.sidecar_path(blob_id))
    assert os.listdir(store.tmp_dir) == []


def test_a_small_commit_on_a_full_disk_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from objstore.blobs import store as store_module

    blob_id = new_blob_id()
    store, barrier = _watching_store(tmp_path, blob_id)
    writes = iter([None, OSError(errno.ENOSPC, "No space left on device")])

    def write_all(fd: int, data: bytes) -> int:
        error = next(writes)
        if error is not None:
            raise error
        return os.write(fd, data)

    monkeypatch.setattr(store_module, "write_all", write_all)
    with pytest.raises(OSError) as raised:
        store.commit_bytes(b"hello", blob_id, {"key": "k"})  # the sidecar's write fails
    assert raised.value.errno == errno.ENOSPC
    assert not os.path.exists(store.blob_path(blob_id))
    assert not os.path.exists(store.sidecar_path(blob_id))
    assert barrier.seen == []


def test_a_blob_delivered_twice_at_once_takes_the_renaming_path(tmp_path: Path) -> None:
    """A peer's blob sent twice (the same bytes under one id): the second write finds the
    name taken and replaces both files through temp names and renames, as before."""
    blob_id = new_blob_id()
    store, barrier = _watching_store(tmp_path, blob_id)
    store.commit_bytes(b"hello", blob_id, {"kind": "provisional"})
    barrier.seen.clear()
    store.commit_bytes(b"hello", blob_id, {"kind": "provisional"})
    assert barrier.seen == [(True, True), (True, True)]  # data of the temps, then renames
    with open(store.blob_path(blob_id), "rb") as handle:
        assert handle.read() == b"hello"
    assert store.read_sidecar(blob_id) == {  # the same document either way
        "format": 1, "kind": "provisional", BLOB_CHECK: blob_check(b"hello")}
    assert os.listdir(store.tmp_dir) == []


def test_a_sidecar_whose_blob_is_not_the_one_it_was_written_with_is_torn(
        tmp_path: Path) -> None:
    """What a crash before a one-sync write's sync can leave (a whole sidecar, a torn
    blob) is told apart from a whole write; a sidecar written after its blob was durable
    (no check) never is."""
    store = BlobStore(str(tmp_path / "data"), fsync=False)
    store.prepare()
    whole, short, garbled, missing = (new_blob_id() for _ in range(4))
    for blob_id in (whole, short, garbled, missing):
        store.commit_bytes(b"0123456789", blob_id, {"key": blob_id})
    os.truncate(store.blob_path(short), 4)
    with open(store.blob_path(garbled), "r+b") as handle:
        handle.write(b"\0\0\0\0")
    os.unlink(store.blob_path(missing))
    assert not store.torn_blob(whole, store.read_sidecar(whole))
    for torn in (short, garbled, missing):
        assert store.torn_blob(torn, store.read_sidecar(torn)), torn
    store.write_sidecar(short, {"key": short})  # rewritten: no check, not judged
    assert not store.torn_blob(short, store.read_sidecar(short))
    longer = new_blob_id()
    store.commit_bytes(b"0123", longer, {"key": longer})
    with open(store.blob_path(longer), "ab") as handle:
        handle.write(b"more")
    assert store.torn_blob(longer, store.read_sidecar(longer))


def test_a_sidecar_rewrite_syncs_data_before_rename_and_directory_after(
        tmp_path: Path) -> None:
    blob_id = new_blob_id()
    store, barrier = _watching_store(tmp_path, blob_id)
    store.write_sidecar(blob_id, {"key": "k"})
    assert barrier.seen == [(False, False), (False, True)]


def test_a_sidecar_of_a_new_id_is_made_durable_in_one_sync_at_its_final_name(
        tmp_path: Path) -> None:
    """A delete marker's or a completed multipart object's sidecar (a new id, no bytes of
    its own) is created where it stays and made durable in one barrier round."""
    blob_id = new_blob_id()
    store, barrier = _watching_store(tmp_path, blob_id)
    store.create_sidecar(blob_id, {"key": "k", "delete_marker": True})
    assert barrier.seen == [(False, True)]
    assert barrier.rounds == 1
    assert store.read_sidecar(blob_id) == {"format": 1, "key": "k", "delete_marker": True}
    assert os.listdir(store.tmp_dir) == []


def test_a_sidecar_created_where_one_exists_replaces_it_by_renaming(
        tmp_path: Path) -> None:
    """A replicated row's sidecar written again: the name is taken, so the document is
    replaced through a temp name and a rename (two rounds), never written over in place."""
    blob_id = new_blob_id()
    store, barrier = _watching_store(tmp_path, blob_id)
    store.create_sidecar(blob_id, {"key": "k", "tags": {}})
    barrier.seen.clear()
    store.create_sidecar(blob_id, {"key": "k", "tags": {"a": "b"}})
    assert barrier.seen == [(False, True), (False, True)]
    assert store.read_sidecar(blob_id)["tags"] == {"a": "b"}
    assert os.listdir(store.tmp_dir) == []


def test_a_new_sidecar_that_can_not_be_made_durable_leaves_nothing(tmp_path: Path) -> None:
    blob_id = new_blob_id()
    store, barrier = _watching_store(tmp_path, blob_id)
    barrier.fail_at = 1
    with pytest.raises(OSError):
        store.create_sidecar(blob_id, {"key": "k"})
    assert not os.path.exists(store.sidecar_path(blob_id))
    assert os.listdir(store.tmp_dir) == []


def test_a_new_sidecar_on_a_full_disk_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from objstore.blobs import store as store_module

    def write_all(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    blob_id = new_blob_id()
    store, barrier = _watching_store(tmp_path, blob_id)
    monkeypatch.setattr(store_module, "write_all", write_all)
    with pytest.raises(OSError) as raised:
        store.create_sidecar(blob_id, {"key": "k"})
    assert raised.value.errno == errno.ENOSPC
    assert not os.path.exists(store.sidecar_path(blob_id))
    assert barrier.seen == []


def test_a_new_sidecar_in_a_new_fan_out_directory_syncs_its_entry_in_the_same_round(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, synced = _recording_store(tmp_path, monkeypatch)
    blob_id = new_blob_id()
    leaf = os.path.dirname(store.sidecar_path(blob_id))
    store.create_sidecar(blob_id, {"key": "k"})
    assert synced == ["data", store.blob_root, os.path.dirname(leaf), leaf]
    assert store.barrier is not None and store.barrier.rounds == 1


@pytest.mark.parametrize(("release", "expected"), [
    ("6.1.0-18-amd64", True), ("5.8.0", True), ("5.10.0-28-cloud-amd64", True),
    ("5.7.19", False), ("4.19.0-26-amd64", False), ("3.10.0-1160.el7.x86_64", False),
    ("garbage", False), ("", False),
])
def test_syncfs_is_trusted_only_where_it_reports_writeback_errors(
        release: str, expected: bool) -> None:
    assert reports_writeback_errors(release) is expected


def test_a_lone_caller_asking_for_a_whole_sync_gets_one_syncfs(tmp_path: Path) -> None:
    volume = FakeVolume()
    barrier = SyncBarrier(str(tmp_path), syncfs=volume)
    own: list[str] = []
    barrier.sync(lambda: own.append("many"), whole=True)
    assert own == [] and volume.calls == 1
    untrusted = SyncBarrier(str(tmp_path), syncfs=None)
    untrusted.sync(lambda: own.append("many"), whole=True)
    assert own == ["many"]  # no syncfs to trust: the caller's own syncs


@pytest.mark.parametrize("syncfs", [FakeVolume(), None], ids=["syncfs", "per-directory"])
def test_a_batch_withdrawal_moves_every_sidecar_then_syncs_once(
        tmp_path: Path, syncfs: FakeVolume | None, monkeypatch: pytest.MonkeyPatch) -> None:
    from objstore.blobs import store as store_module

    store = BlobStore(str(tmp_path / "data"))
    store.prepare()
    blob_ids = [new_blob_id() for _ in range(5)]
    for blob_id in blob_ids:
        store.commit_bytes(b"x", blob_id, {"key": blob_id})
    barrier = SyncBarrier(store.data_dir, syncfs=syncfs)
    store.barrier = barrier
    synced: list[str] = []
    monkeypatch.setattr(store_module, "fsync_dir", synced.append)
    store.withdraw_sidecars([*blob_ids, new_blob_id()])  # one never written: skipped
    for blob_id in blob_ids:
        assert not os.path.exists(store.sidecar_path(blob_id))
        assert os.path.exists(store.withdrawn_path(blob_id))
        assert os.path.exists(store.blob_path(blob_id))
    assert barrier.rounds == 1
    if syncfs is not None:
        assert syncfs.calls == 1 and synced == []
    else:  # deleting/ and every blob directory, each once
        directories = {os.path.dirname(store.sidecar_path(b)) for b in blob_ids}
        assert synced[0] == store.withdrawn_root
        assert sorted(synced[1:]) == sorted(directories)


def test_sync_method_fsync_makes_a_store_sync_only_its_own_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """[storage] sync_method = "fsync" (`BlobStore(syncfs=False)`): even a batch that
    prefers one whole-volume sync fsyncs its own directories instead."""
    from objstore.blobs import store as store_module

    store = BlobStore(str(tmp_path / "data"), syncfs=False)
    store.prepare()
    blob_ids = [new_blob_id() for _ in range(3)]
    for blob_id in blob_ids:
        store.commit_bytes(b"x", blob_id, {"key": blob_id})
    synced: list[str] = []
    monkeypatch.setattr(store_module, "fsync_dir", synced.append)
    store.withdraw_sidecars(blob_ids)
    assert synced[0] == store.withdrawn_root
    assert sorted(synced[1:]) == sorted({os.path.dirname(store.sidecar_path(b))
                                         for b in blob_ids})


def _recording_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                     ) -> tuple[BlobStore, list[str]]:
    """A store without syncfs whose syncs are recorded in order: "data" for an
    fdatasync, the directory's path for a directory fsync."""
    from objstore.blobs import store as store_module

    store = BlobStore(str(tmp_path / "data"), syncfs=False)
    store.prepare()
    synced: list[str] = []
    real_fdatasync = os.fdatasync

    def fdatasync(fd: int) -> None:
        synced.append("data")
        real_fdatasync(fd)

    monkeypatch.setattr(store_module, "fsync_dir", synced.append)
    monkeypatch.setattr(store_module.os, "fdatasync", fdatasync)
    return store, synced


def test_a_new_fan_out_directory_is_made_durable_in_the_writes_first_sync(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The directories a small commit creates get their entries synced with its data
    and its own directory (one barrier round), not in a round of their own."""
    store, synced = _recording_store(tmp_path, monkeypatch)
    blob_id = new_blob_id()
    leaf = os.path.dirname(store.blob_path(blob_id))
    store.commit_bytes(b"hello", blob_id, {"key": "k"})
    assert synced == ["data", "data", store.blob_root, os.path.dirname(leaf), leaf]
    assert store.barrier is not None and store.barrier.rounds == 1
    synced.clear()
    other = blob_id[:4] + new_blob_id()[4:]  # the same fan-out directory, now durable
    store.commit_bytes(b"again", other, {"key": "k2"})
    assert synced == ["data", "data", leaf]


def test_a_write_into_a_directory_another_write_just_created_syncs_its_entry(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A directory another thread created and has not made durable yet is no excuse:
    the second write syncs its entry too (and the first write's sync would as well)."""
    store, synced = _recording_store(tmp_path, monkeypatch)
    blob_id = new_blob_id()
    leaf = os.path.dirname(store.blob_path(blob_id))
    fresh = store._make_dirs(leaf)  # a first write, between mkdir and its sync
    assert fresh == [os.path.dirname(leaf), leaf] and os.path.isdir(leaf)
    store.commit_bytes(b"hello", blob_id, {"key": "k"})
    assert synced == ["data", "data", store.blob_root, os.path.dirname(leaf), leaf]
    assert store._make_dirs(leaf) == []  # durable now, for every write


def test_a_failed_sync_leaves_a_new_directory_to_be_synced_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, synced = _recording_store(tmp_path, monkeypatch)
    blob_id = new_blob_id()
    leaf = os.path.dirname(store.blob_path(blob_id))

    def failing(fd: int) -> None:
        raise OSError(errno.EIO, "injected")

    with monkeypatch.context() as failing_disk:
        from objstore.blobs import store as store_module
        failing_disk.setattr(store_module.os, "fdatasync", failing)
        with pytest.raises(OSError):
            store.commit_bytes(b"hello", blob_id, {"key": "k"})
    assert store._make_dirs(leaf) == [os.path.dirname(leaf), leaf]


def _store_on(tmp_path: Path, syncfs: FakeVolume | None) -> BlobStore:
    store = BlobStore(str(tmp_path / "data"))
    store.prepare()
    store.barrier = SyncBarrier(store.data_dir, syncfs=syncfs)
    return store


def _read(store: BlobStore, blob_id: str) -> bytes:
    with store.blob_reader(blob_id) as reader:
        return reader.read_all()


@pytest.mark.parametrize("trusted", [True, False], ids=["syncfs", "own-syncs"])
def test_small_bodies_committed_together_share_one_sync(
        tmp_path: Path, trusted: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """`commit_bytes_many`: every body of the batch is created at its final name with
    its checked sidecar, then ONE barrier round makes them durable: one syncfs, or, where
    syncfs is not trusted, every file's data and every directory's entries."""
    from objstore.blobs import store as store_module

    volume = FakeVolume() if trusted else None
    store = _store_on(tmp_path, volume)
    synced: list[str] = []
    monkeypatch.setattr(store_module, "fsync_dir", synced.append)
    datasyncs: list[int] = []
    real_fdatasync = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (datasyncs.append(fd), real_fdatasync(fd)))
    items = [(os.urandom(size), new_blob_id(), {"key": f"k{size}"}) for size in (0, 1, 4096)]
    assert store.commit_bytes_many(items) == [None, None, None]
    for data, blob_id, sidecar in items:
        assert _read(store, blob_id) == data
        document = store.read_sidecar(blob_id)
        assert document["key"] == sidecar["key"]
        assert document[BLOB_CHECK] == blob_check(data)
    assert store.barrier is not None and store.barrier.rounds == 1
    directories = {os.path.dirname(store.blob_path(blob_id)) for _, blob_id, _ in items}
    if volume is not None:
        assert volume.calls == 1 and datasyncs == [] and synced == []
    else:  # each file's data, the new fan-out directories' parents, each directory
        assert len(datasyncs) == 6
        assert directories <= set(synced) and store.blob_root in synced


def test_a_batch_of_one_syncs_as_a_lone_commit_does(tmp_path: Path) -> None:
    volume = FakeVolume()
    store = _store_on(tmp_path, volume)
    blob_id = new_blob_id()
    assert store.commit_bytes_many([(b"alone", blob_id, {"key": "k"})]) == [None]
    assert _read(store, blob_id) == b"alone"
    assert volume.calls == 0  # its own fdatasyncs and directory fsyncs, no syncfs
    assert store.barrier is not None and (store.barrier.rounds, store.barrier.grouped) == (1, 0)


def test_the_bodies_of_a_batch_fail_apart(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A body that does not fit, and an invalid id, fail alone and leave no file; a name
    that exists is replaced through the renaming path; the others are durable."""
    from objstore.blobs import store as store_module

    store = _store_on(tmp_path, FakeVolume())
    no_room = b"no room for these bytes"
    real_write_all = store_module.write_all

    def write_all(fd: int, data: bytes) -> None:
        if data == no_room:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write_all(fd, data)

    monkeypatch.setattr(store_module, "write_all", write_all)
    existing = new_blob_id()
    store.commit_bytes(b"old bytes", existing, {"key": "old"})
    items = [(b"first", new_blob_id(), {}), (no_room, new_blob_id(), {}),
             (b"bad id", "not-a-blob-id", {}), (b"new bytes", existing, {"key": "new"}),
             (b"last", new_blob_id(), {})]
    outcomes = store.commit_bytes_many(items)
    assert outcomes[0] is None and outcomes[3] is None and outcomes[4] is None
    assert isinstance(outcomes[1], OSError) and outcomes[1].errno == errno.ENOSPC
    assert isinstance(outcomes[2], ValueError)
    failed = items[1][1]
    assert not os.path.exists(store.blob_path(failed))
    assert not os.path.exists(store.sidecar_path(failed))
    assert _read(store, items[0][1]) == b"first" and _read(store, items[4][1]) == b"last"
    assert _read(store, existing) == b"new bytes"
    assert store.read_sidecar(existing)["key"] == "new"


def test_a_failed_sync_fails_every_body_of_the_batch_and_keeps_none(tmp_path: Path) -> None:
    volume = FakeVolume()
    volume.error = OSError(errno.EIO, "Input/output error")
    store = _store_on(tmp_path, volume)
    existing = new_blob_id()
    store.commit_bytes(b"old", existing, {"key": "old"})  # alone: no syncfs, no error
    items = [(b"a", new_blob_id(), {}), (b"b", new_blob_id(), {}),
             (b"replacing", existing, {"key": "new"})]
    outcomes = store.commit_bytes_many(items)
    assert volume.calls == 1
    for found in outcomes:
        assert isinstance(found, OSError) and found.errno == errno.EIO
    for _, blob_id, _ in items[:2]:
        assert not os.path.exists(store.blob_path(blob_id))
        assert not os.path.exists(store.sidecar_path(blob_id))
    assert _read(store, existing) == b"old"  # not tried after the volume failed
