"""A full disk, without a full disk: the one mapping of ENOSPC / EDQUOT / SQLite
SQLITE_FULL / PostgreSQL disk_full to 507 (and of a database out of reach to 503), the
metadata store's retry that spends the database's reserve only for deletes, the reserve
file and the capacity guard, the body spool that stops at ENOSPC and still lets the
request be answered, temporary files removed, and both APIs answering 507 in their own
format. Failures are injected; the real thing is tests/faults/test_disk_full.py."""

from __future__ import annotations

import errno
import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import exc as sa_exc
from twisted.internet.error import ConnectionDone
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from objstore.blobs import writer as writer_module
from objstore.blobs.control import ControlRecord
from objstore.blobs.space import RESERVE_FILE_NAME, DatabaseReserve, SpaceGuard, SpaceSample
from objstore.blobs.store import BlobStore
from objstore.blobs.writer import BlobWriter
from objstore.errors import (
    AdminError,
    S3Error,
    ServerCondition,
    admin_error_of,
    condition_of,
    s3_error_of,
    storage_full,
)
from objstore.http.site import ObjstoreRequest
from objstore.http.spool import BodySpool
from objstore.meta.async_store import MetaStore
from objstore.meta.retry import RetryPolicy, call_with_retries, frees_space, is_disk_full
from objstore.meta.store import SyncMetaStore
from tests.unit.resource_fixtures import Node
from tests.unit.test_admin_resource import mount

MIB = 1024 * 1024
ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


# -- the mapping ------------------------------------------------------------------------


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_disk_from_the_system_is_insufficient_storage(code: int) -> None:
    error = OSError(code, os.strerror(code))
    s3 = s3_error_of(error)
    admin = admin_error_of(error)
    assert s3 is not None and (s3.code, s3.status) == ("InsufficientStorage", 507)
    assert admin is not None and (admin.code, admin.status) == ("InsufficientStorage", 507)


def test_other_errors_stay_bugs_and_api_errors_stay_themselves() -> None:
    assert condition_of(OSError(errno.EIO, "I/O error")) is None
    assert s3_error_of(ValueError("x")) is None and admin_error_of(KeyError("k")) is None
    own = S3Error("NoSuchKey")
    assert s3_error_of(own) is own
    refused = AdminError("NotFound", "no")
    assert admin_error_of(refused) is refused


def test_a_condition_is_found_through_the_exception_that_wraps_it() -> None:
    try:
        try:
            raise ENOSPC
        except OSError as exc:
            raise RuntimeError("commit failed") from exc
    except RuntimeError as wrapped:
        found = condition_of(wrapped)
    assert found is not None and found.code == "InsufficientStorage"
    unavailable = ServerCondition("ServiceUnavailable", "database down")
    error = s3_error_of(unavailable)
    assert error is not None and (error.status, error.message) == (503, "database down")
    with pytest.raises(ValueError):
        ServerCondition("NoSuchKey", "not a condition")


def _sqlite_full() -> sa_exc.OperationalError:
    """A real SQLITE_FULL: a database that may not grow past two pages."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (v BLOB)")
    conn.execute("PRAGMA max_page_count = 2")
    with pytest.raises(sqlite3.OperationalError) as raised:
        conn.execute("INSERT INTO t VALUES (?)", (b"x" * 100_000,))
    conn.close()
    return sa_exc.OperationalError("INSERT", {}, raised.value)


def test_database_disk_full_is_recognised_and_never_retried_as_busy() -> None:
    class DiskFull(Exception):
        pgcode = "53100"

    class Shutdown(Exception):
        pgcode = "57P01"

    assert is_disk_full(_sqlite_full())
    assert is_disk_full(sa_exc.OperationalError("x", {}, DiskFull()))
    assert not is_disk_full(sa_exc.OperationalError("x", {}, Shutdown()))
    locked = sqlite3.OperationalError("database is locked")
    assert not is_disk_full(sa_exc.OperationalError("x", {}, locked))
    assert not is_disk_full(ENOSPC)


# -- the retry ---------------------------------------------------------------------------


class Calls:
    """A query that fails with `errors` in turn, then answers "done"."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.count = 0

    def __call__(self) -> str:
        self.count += 1
        if self.errors:
            raise self.errors.pop(0)
        return "done"


def _policy(released: list[bool], answer: bool = True) -> RetryPolicy:
    def release() -> bool:
        released.append(answer)
        return answer

    return RetryPolicy(release_reserve=release)


def test_a_write_that_finds_the_disk_full_is_507_and_keeps_the_reserve() -> None:
    released: list[bool] = []
    query = Calls(_sqlite_full())
    with pytest.raises(ServerCondition) as raised:
        call_with_retries(_policy(released), query, lambda _: None)
    assert raised.value.code == "InsufficientStorage"
    assert isinstance(raised.value.__cause__, sa_exc.OperationalError)
    assert (query.count, released) == (1, [])


def test_a_delete_that_finds_the_disk_full_spends_the_reserve_once() -> None:
    released: list[bool] = []
    query = Calls(_sqlite_full())
    assert call_with_retries(_policy(released), query, lambda _: None,
                             frees_space=True) == "done"
    assert (query.count, released) == (2, [True])

    again: list[bool] = []
    twice = Calls(_sqlite_full(), _sqlite_full())
    with pytest.raises(ServerCondition):
        call_with_retries(_policy(again), twice, lambda _: None, frees_space=True)
    assert (twice.count, again) == (2, [True])


def test_a_delete_without_a_reserve_left_is_507() -> None:
    released: list[bool] = []
    query = Calls(_sqlite_full())
    with pytest.raises(ServerCondition):
        call_with_retries(_policy(released, answer=False), query, lambda _: None,
                          frees_space=True)
    assert (query.count, released) == (1, [False])


def test_a_connection_refused_before_sqlalchemy_wraps_it_is_503_too() -> None:
    import psycopg2

    refused = psycopg2.OperationalError("connection to server failed: Connection refused")
    query = Calls(*[refused] * 10)  # as `Engine.raw_connection` raises it: bare
    with pytest.raises(ServerCondition) as raised:
        call_with_retries(RetryPolicy(attempts=2), query, lambda _: None)
    assert raised.value.code == "ServiceUnavailable" and query.count == 2
    full = sqlite3.OperationalError("database or disk is full")
    full.sqlite_errorcode = sqlite3.SQLITE_FULL  # type: ignore[attr-defined]
    assert is_disk_full(full)
    with pytest.raises(ValueError):  # not the database's: passes unchanged
        call_with_retries(RetryPolicy(), Calls(ValueError("bug")), lambda _: None)


def test_a_database_out_of_reach_after_the_retries_is_503() -> None:
    locked = sa_exc.OperationalError("BEGIN", {}, sqlite3.OperationalError("database is locked"))
    query = Calls(*[locked] * 10)
    sleeps: list[float] = []
    with pytest.raises(ServerCondition) as raised:
        call_with_retries(RetryPolicy(attempts=3), query, sleeps.append)
    assert raised.value.code == "ServiceUnavailable"
    assert query.count == 3 and sleeps == [0.05, 0.1]


def test_the_queries_that_free_space_are_the_removals() -> None:
    freeing = sorted(name for name in dir(MetaStore)
                     if callable(getattr(SyncMetaStore, name.lstrip("_"), None))
                     and frees_space(name.lstrip("_")))
    assert "delete_object_version" in freeing and "delete_upload" in freeing
    assert "delete_bucket" in [name.lstrip("_") for name in freeing]
    assert {"delete_user", "remove_credential", "detach_user_grant", "purge_audit"} <= set(
        freeing)
    for writer in ("put_object", "insert_audit_records", "create_user", "put_part",
                   "update_object", "complete_upload", "insert_metrics_sample"):
        assert not frees_space(writer)


# -- the reserve and the guard -------------------------------------------------------------


def test_the_reserve_is_made_released_and_made_again(tmp_path: Path) -> None:
    reserve = DatabaseReserve(str(tmp_path), 2 * MIB)
    assert not reserve.held() and not reserve.release()
    assert reserve.make() and reserve.held()
    stat = os.stat(tmp_path / RESERVE_FILE_NAME)
    assert stat.st_size == 2 * MIB and stat.st_blocks * 512 >= 2 * MIB  # allocated
    assert reserve.release() and not reserve.held()
    assert reserve.make() and reserve.held()
    assert sorted(os.listdir(tmp_path)) == [RESERVE_FILE_NAME]


def test_a_reserve_that_does_not_fit_leaves_nothing(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    def no_room(fd: int, offset: int, length: int) -> None:
        raise ENOSPC

    monkeypatch.setattr(os, "posix_fallocate", no_room)
    reserve = DatabaseReserve(str(tmp_path), MIB)
    assert not reserve.make()
    assert os.listdir(tmp_path) == []


class Volume:
    """Free bytes as the test says, less what the reserve file takes."""

    def __init__(self, free: int, reserve: DatabaseReserve | None = None) -> None:
        self.free = free
        self.reserve = reserve

    def __call__(self, path: str) -> int:
        held = self.reserve is not None and self.reserve.held()
        return self.free - (self.reserve.size_bytes if held else 0)


def test_the_guard_refuses_writes_below_the_minimum() -> None:
    volume = Volume(100 * MIB)
    guard = SpaceGuard("/data", 10 * MIB, measure_free=volume)
    assert not guard.refuses_write()  # nothing sampled yet: no refusal on a guess
    guard.update(guard.measure())
    assert not guard.refuses_write()
    assert not guard.admits_body(95 * MIB)
    volume.free = 9 * MIB
    guard.update(guard.measure())
    assert guard.refuses_write()
    assert guard.admits_body(MIB)  # kept in memory (a DeleteObjects document)
    assert not guard.admits_body(MIB + 1)
    volume.free = 10 * MIB
    guard.update(guard.measure())
    assert not guard.refuses_write()


def test_bodies_admitted_within_a_second_count_until_the_next_sample() -> None:
    volume = Volume(100 * MIB)
    guard = SpaceGuard("/data", 10 * MIB, measure_free=volume)
    guard.update(guard.measure())
    assert guard.admits_body(50 * MIB)
    assert not guard.admits_body(45 * MIB)  # both would not fit above the minimum
    assert guard.admits_body(40 * MIB) and guard.available_bytes() == 10 * MIB
    assert not guard.admits_body(2 * MIB) and not guard.refuses_write()
    assert guard.admits_body(MIB) and guard.available_bytes() == 10 * MIB  # not counted
    volume.free = 60 * MIB  # the sample now sees the first body's bytes
    guard.update(guard.measure())
    assert guard.available_bytes() == 60 * MIB and not guard.refuses_write()


def test_a_spent_reserve_counts_as_used_until_it_is_made_again(tmp_path: Path) -> None:
    reserve = DatabaseReserve(str(tmp_path), 4 * MIB)
    volume = Volume(20 * MIB, reserve)
    guard = SpaceGuard(str(tmp_path), 10 * MIB, reserve, measure_free=volume)
    guard.update(guard.measure())
    assert guard.sample == SpaceSample(16 * MIB, True) and not guard.refuses_write()

    volume.free = 12 * MIB  # 8 MiB really free: refused
    guard.update(guard.measure())
    assert guard.refuses_write()
    assert guard.release_reserve() and not reserve.held()
    guard.update(guard.measure())  # 12 MiB free, 4 promised to the reserve: still refused
    assert guard.sample == SpaceSample(12 * MIB, False) and guard.refuses_write()

    volume.free = 13 * MIB  # room for the reserve, not for writes above it
    guard.update(guard.measure())
    assert not reserve.held() and guard.refuses_write()
    volume.free = 14 * MIB
    guard.update(guard.measure())
    assert reserve.held() and guard.sample == SpaceSample(10 * MIB, True)
    assert not guard.refuses_write()


def test_a_write_that_met_a_full_disk_stops_writes_until_the_next_sample() -> None:
    volume = Volume(100 * MIB)
    guard = SpaceGuard("/data", 10 * MIB, measure_free=volume)
    guard.update(guard.measure())
    guard.found_full()
    assert guard.refuses_write() and not guard.admits_body(2 * MIB)
    guard.update(guard.measure())
    assert not guard.refuses_write()


def test_a_guard_with_nothing_to_guard_never_refuses() -> None:
    guard = SpaceGuard("/data", 0, measure_free=lambda path: 0)
    guard.update(guard.measure())
    assert not guard.refuses_write() and guard.admits_body(10 * MIB)
    assert not guard.release_reserve()


# -- the body spool and the blob store -------------------------------------------------------


def _failing_after(limit: int, real: Callable[..., int]) -> Callable[..., int]:
    """`write_all` that fails with ENOSPC once `limit` bytes were written in all."""
    written = [0]

    def write_all(fd: int, data: Any) -> int:
        if written[0] + len(data) > limit:
            raise ENOSPC
        written[0] += len(data)
        return real(fd, data)

    return write_all


def test_a_body_that_meets_a_full_disk_is_dropped_and_answered_507(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer_module, "write_all",
                        _failing_after(3 * MIB, writer_module.write_all))
    spool = BodySpool(str(tmp_path), memory_limit=MIB)
    chunk = b"x" * 65536
    for _ in range(8 * MIB // len(chunk)):
        spool.write(chunk)  # never raises: twisted.web would drop the connection
    spool.finish_decoding()
    assert isinstance(spool.error, S3Error)
    assert (spool.error.code, spool.error.status) == ("InsufficientStorage", 507)
    assert os.listdir(tmp_path) == []  # the spool file went at once
    assert spool.digests_ready().called
    spool.flush_early()
    with pytest.raises(OSError):
        spool.detach()  # a truncated body never becomes a blob
    spool.close()
    assert os.listdir(tmp_path) == []


def test_a_spool_that_can_not_be_made_is_answered_too(tmp_path: Path) -> None:
    missing = tmp_path / "file-not-dir"
    missing.write_bytes(b"")
    spool = BodySpool(str(missing / "tmp"), memory_limit=1024)
    spool.write(b"x" * 4096)
    assert isinstance(spool.error, S3Error) and spool.error.code == "InternalError"


def test_a_hashed_copy_that_meets_a_full_disk_fails_and_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = BlobStore(str(tmp_path / "data"), fsync=False)
    store.prepare()
    writer = BlobWriter(store.tmp_dir, memory_limit=0)
    monkeypatch.setattr(writer_module, "write_all", _failing_after(0, writer_module.write_all))
    writer.write(b"abc")
    with pytest.raises(OSError) as raised:
        writer.detach()
    assert raised.value.errno == errno.ENOSPC
    assert os.listdir(store.tmp_dir) == []


def test_blob_and_control_writes_that_fail_leave_no_temporary_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from objstore.blobs import store as store_module

    store = BlobStore(str(tmp_path / "data"), fsync=True)
    store.prepare()
    control = ControlRecord(str(tmp_path / "data"), fsync=True)
    control.prepare()
    blob_id = "0b0e4a48-1f4b-4b9c-9a36-54c1f0b5a001"
    monkeypatch.setattr(store_module, "write_all", _failing_after(0, store_module.write_all))
    with pytest.raises(OSError):
        store.commit_bytes(b"abc", blob_id, {"key": "k"})

    def fsync_fails(fd: int) -> None:
        raise ENOSPC

    monkeypatch.setattr(os, "fdatasync", fsync_fails)
    spool = os.path.join(store.tmp_dir, "body.spool")
    fd = os.open(spool, os.O_RDWR | os.O_CREAT, 0o600)
    with pytest.raises(OSError):
        store.commit_file(fd, spool, blob_id, {"key": "k"})
    monkeypatch.setattr(os, "fsync", fsync_fails)
    with pytest.raises(OSError):
        control.write("users", "u-1", {"name": "x"})
    assert os.listdir(store.tmp_dir) == []
    assert store.blob_size(blob_id) is None


# -- both APIs ------------------------------------------------------------------------------


def _full_guard(tmp_path: Path) -> SpaceGuard:
    guard = SpaceGuard(str(tmp_path), 10 * MIB, measure_free=lambda path: MIB)
    guard.update(guard.measure())
    return guard


def _s3_error(body: bytes) -> str:
    text = body.decode()
    assert text.startswith("<?xml"), text
    return text.split("<Code>")[1].split("</Code>")[0]


def test_s3_writes_are_refused_and_deletes_pass_on_a_full_volume(tmp_path: Path) -> None:
    node = Node(tmp_path, space=_full_guard(tmp_path))
    node.buckets.records["keep"] = object()
    refused = node.send("PUT", "http://s3.test/new")
    assert (refused.status, _s3_error(refused.body)) == (507, "InsufficientStorage")
    assert refused.headers["content-type"] == "application/xml"
    assert "new" not in node.buckets.records
    assert node.send("DELETE", "http://s3.test/keep").status == 204
    assert node.send("GET", "http://s3.test/").status == 200


def test_a_large_body_is_refused_before_it_is_read(tmp_path: Path) -> None:
    node = Node(tmp_path, space=_full_guard(tmp_path))
    channel = node.site.buildProtocol(None)  # the answer is written by the channel itself
    transport = StringTransport()
    channel.makeConnection(transport)
    request = ObjstoreRequest(channel)
    request.requestHeaders.addRawHeader(b"expect", b"100-continue")
    request.gotLength(2 * MIB)  # what twisted.web calls once the headers are in
    sent = transport.value()
    assert sent.startswith(b"HTTP/1.1 507 ") and b"Connection: close" in sent
    assert b"<Code>InsufficientStorage</Code>" in sent and b"100 Continue" not in sent
    assert request.spool is None and os.listdir(tmp_path) == []
    request.connectionLost(Failure(ConnectionDone()))
    channel.connectionLost(Failure(ConnectionDone()))

    channel = node.site.buildProtocol(None)
    transport = StringTransport()
    channel.makeConnection(transport)
    small = ObjstoreRequest(channel)
    small.gotLength(MIB)  # fits in memory: refused (or not) once authenticated, not here
    assert b"InsufficientStorage" not in transport.value()
    small.connectionLost(Failure(ConnectionDone()))
    channel.connectionLost(Failure(ConnectionDone()))


def test_an_s3_request_that_meets_a_full_disk_is_507_not_500(tmp_path: Path) -> None:
    space = SpaceGuard(str(tmp_path), MIB, measure_free=lambda path: 100 * MIB)
    space.update(space.measure())
    node = Node(tmp_path, space=space)

    async def create(*args: Any, **kwargs: Any) -> None:
        raise ENOSPC

    async def delete(*args: Any, **kwargs: Any) -> None:
        raise ServerCondition("ServiceUnavailable", "The metadata database is down.")

    node.buckets.create = create  # type: ignore[method-assign]
    node.buckets.delete = delete  # type: ignore[method-assign]
    answer = node.send("PUT", "http://s3.test/new")
    assert (answer.status, _s3_error(answer.body)) == (507, "InsufficientStorage")
    assert space.refuses_write()  # no more writes until the next sample
    answer = node.send("DELETE", "http://s3.test/new")
    assert (answer.status, _s3_error(answer.body)) == (503, "ServiceUnavailable")
    assert answer.headers["retry-after"] == "5"


def test_admin_writes_are_refused_as_json_and_conditions_are_json_too(
        tmp_path: Path) -> None:
    node = mount(Node(tmp_path, space=_full_guard(tmp_path)))
    answer = node.send("PUT", "http://s3.test/admin/buckets/b/quota",
                       body=json.dumps({"max_bytes": 10}).encode())
    assert answer.status == 507 and answer.headers["content-type"] == "application/json"
    assert json.loads(answer.body)["error"] == "InsufficientStorage"
    assert node.send("GET", "http://s3.test/admin/users").status == 200

    healthy = mount(Node(tmp_path / "other"))
    routes: Any = healthy.admin._mounts["users"]
    iam: Any = routes._iam

    async def list_users() -> list[Any]:
        raise storage_full()

    iam.list_users = list_users
    answer = healthy.send("GET", "http://s3.test/admin/users")
    assert answer.status == 507 and json.loads(answer.body)["error"] == "InsufficientStorage"
