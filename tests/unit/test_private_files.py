"""Owner-only modes (objstore.private_files): what the node creates is 0700/0600 whatever
the umask; files holding secrets that group or others can open are refused with one line;
directories they can enter get a warning. Also the SQLite database and the control record,
which create their files through these rules."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from objstore.blobs.control import ControlRecord
from objstore.blobs.store import BlobStore
from objstore.meta.dialect import create_db_engine, sqlite_files, write_transaction
from objstore.private_files import (
    ExposedSecrets,
    create_private_file,
    directory_warnings,
    make_private_dir,
    open_to_others,
    refuse_exposed,
)


def mode(path: Path | str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture(params=[0o022, 0o000, 0o002])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    previous = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(previous)


def test_directories_and_files_are_made_owner_only(tmp_path: Path, umask: int) -> None:
    directory = tmp_path / "new" / "private"
    make_private_dir(str(directory))
    assert mode(directory) == 0o700
    assert create_private_file(str(directory / "secret"))
    assert mode(directory / "secret") == 0o600
    assert not create_private_file(str(directory / "secret"))  # exists: left alone


def test_an_existing_directory_keeps_its_mode(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o755)
    make_private_dir(str(tmp_path))
    assert mode(tmp_path) == 0o755


@pytest.mark.parametrize(("bits", "exposed"), [
    (0o600, False), (0o400, False), (0o640, True), (0o604, True), (0o620, True),
    (0o602, True), (0o610, True),
])
def test_any_access_of_group_or_others_is_exposure(tmp_path: Path, bits: int,
                                                  exposed: bool) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"")
    os.chmod(path, bits)
    assert (open_to_others(str(path)) == bits) is exposed
    assert open_to_others(str(tmp_path / "missing")) is None


def test_an_exposed_secret_is_refused_in_one_line(tmp_path: Path) -> None:
    safe, exposed = tmp_path / "safe", tmp_path / "exposed file"
    for path in (safe, exposed):
        path.write_bytes(b"")
    os.chmod(safe, 0o600)
    os.chmod(exposed, 0o644)
    refuse_exposed([str(safe), str(tmp_path / "missing")], "secrets")
    with pytest.raises(ExposedSecrets) as caught:
        refuse_exposed([str(safe), str(exposed)], "every credential's secret")
    message = str(caught.value)
    assert "\n" not in message
    assert message == (f"{exposed} holds every credential's secret but is open to group or "
                       f"others (mode 0644); restrict it (chmod 600 '{exposed}') and start "
                       "again")
    assert isinstance(caught.value, OSError)  # a start-up error like any storage error


def test_open_directories_are_warned_about_once(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o755)
    private = tmp_path / "private"
    make_private_dir(str(private))
    warnings = directory_warnings([str(tmp_path), str(private), str(tmp_path)])
    assert len(warnings) == 1 and f"{tmp_path} is open to group or others (mode 0755)" in (
        warnings[0])


def test_the_sqlite_database_is_created_owner_only(tmp_path: Path, umask: int) -> None:
    database = tmp_path / "meta" / "objstore.db"
    engine = create_db_engine("sqlite", str(database), None, 1)
    try:
        with write_transaction(engine) as conn:
            conn.exec_driver_sql("CREATE TABLE t (x INTEGER)")
            conn.exec_driver_sql("INSERT INTO t VALUES (1)")
        assert mode(database.parent) == 0o700
        files = sqlite_files(str(database))
        assert all(os.path.exists(path) for path in files)  # the WAL is still open
        assert {path: mode(path) for path in files} == dict.fromkeys(files, 0o600)
    finally:
        engine.dispose()


def test_data_layout_and_control_record_are_owner_only(tmp_path: Path, umask: int) -> None:
    data = tmp_path / "data"
    blobs, control = BlobStore(str(data)), ControlRecord(str(data))
    blobs.prepare()
    control.prepare()
    control.write("credentials", "AK1", {"secret_key": "s"})
    control.write("users", "u1", {"name": "n"})
    for directory in (data, data / "blobs", data / "tmp", data / "control",
                      data / "control" / "credentials"):
        assert mode(directory) == 0o700, directory
    secrets = control.secret_files()
    assert len(secrets) == 1 and mode(secrets[0]) == 0o600
    assert [os.path.dirname(path) for path in secrets] == [str(data / "control" /
                                                              "credentials")]
