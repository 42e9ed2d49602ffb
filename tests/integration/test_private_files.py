"""Secrets on disk stay the daemon's own: a node started under umask 022 makes its data
directory, database, control record, blobs and sidecars owner-only (0700/0600), and a start
refuses (one line, exit 2, nothing changed) a database or credential file that group or
others can open; an open data directory only gets a warning."""

from __future__ import annotations

import os
import stat
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.integration.admin_client import AdminClient
from tests.integration.conftest import BACKENDS, make_client
from tests.integration.daemon import TWISTD, Daemon


@contextmanager
def umask(value: int) -> Iterator[None]:
    previous = os.umask(value)  # inherited by the daemon started meanwhile
    try:
        yield
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def started(tmp_path: Path, backend: str, workers: int) -> Daemon:
    fresh = Daemon(tmp_path, backend=backend, workers=workers)
    with umask(0o022):
        fresh.start()
    return fresh


@pytest.fixture(params=[(backend, workers) for backend in BACKENDS for workers in (1, 2)],
                ids=lambda p: f"{p[0]}-{p[1]}worker")
def node(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Daemon]:
    """A fresh node of one process, or of two workers (storage prepared by a child)."""
    fresh = started(tmp_path, *request.param)
    yield fresh
    fresh.cleanup()


@pytest.fixture(params=BACKENDS)
def single(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Daemon]:
    fresh = started(tmp_path, request.param, 1)
    yield fresh
    fresh.cleanup()


def start_refused(node: Daemon) -> subprocess.CompletedProcess[str]:
    """Start the stopped node again; it must not come up."""
    node.write_config()
    with umask(0o022):
        return subprocess.run(
            [TWISTD, "-n", "--pidfile=", "objstore", "--config", str(node.config_path)],
            cwd=node.workdir, env=node.env(), capture_output=True, text=True, timeout=30)


def assert_refused(result: subprocess.CompletedProcess[str], path: Path) -> None:
    lines = result.stderr.splitlines()
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert len(lines) == 1 and lines[0].startswith(f"objstore: {path} holds "), lines
    assert "open to group or others (mode 0644)" in lines[0] and "chmod 600" in lines[0]
    assert "AWS_SECRET_ACCESS_KEY" not in result.stdout and "listening" not in result.stdout


def test_a_node_started_under_umask_022_keeps_everything_owner_only(node: Daemon) -> None:
    s3: Any = make_client(node.endpoint)
    bucket = f"private-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="k", Body=b"secret object", Metadata={"m": "v"})
    AdminClient(node.endpoint).ok("POST", "/credentials", {}, 201)
    data = node.data_dir
    directories = [data, data / "tmp", data / "control", data / "control" / "credentials",
                   data / "blobs", *[p for p in (data / "blobs").rglob("*") if p.is_dir()]]
    files = [*(data / "control").rglob("*.json"), *[p for p in (data / "blobs").rglob("*")
                                                    if p.is_file()]]
    if node.backend == "sqlite":
        directories.append(data / "meta")
        files += [p for p in (data / "meta").iterdir()]  # database, -wal, -shm, write-lock
    assert len(files) >= 4 and (node.backend != "sqlite" or len(files) >= 8)
    assert {str(p): mode(p) for p in directories} == dict.fromkeys(map(str, directories),
                                                                     0o700)
    assert {str(p): mode(p) for p in files} == dict.fromkeys(map(str, files), 0o600)


def test_a_database_open_to_others_is_refused(node: Daemon) -> None:
    if node.backend != "sqlite":
        pytest.skip("the PostgreSQL server keeps its own files")
    node.stop()
    database = node.data_dir / "meta" / "objstore.db"
    os.chmod(database, 0o644)
    assert_refused(start_refused(node), database)
    assert mode(database) == 0o644  # never changed behind the operator's back
    os.chmod(database, 0o600)
    node.start()  # and once restricted, it starts


def test_a_credential_file_open_to_others_is_refused(single: Daemon) -> None:
    single.stop()
    credential = next((single.data_dir / "control" / "credentials").iterdir())
    os.chmod(credential, 0o644)
    assert_refused(start_refused(single), credential)


def test_a_data_directory_open_to_others_is_warned_about(single: Daemon) -> None:
    single.stop()
    os.chmod(single.data_dir, 0o755)
    single.start()
    log = single.log_path.read_text()
    assert (f"objstore: warning: {single.data_dir} is open to group or others (mode 0755)"
            in log)
