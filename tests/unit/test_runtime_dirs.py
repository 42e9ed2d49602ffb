"""Stale runtime directories of killed supervisors are found and removed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from objstore.prefork import runtime_dirs
from objstore.prefork.runtime_dirs import OWNER_FILE, is_stale, sweep_stale_runtime_dirs


@pytest.fixture
def tmpdir_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(runtime_dirs.tempfile, "tempdir", str(tmp_path))
    return tmp_path


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_own_directory_is_kept(tmpdir_env: Path) -> None:
    path = runtime_dirs.make_runtime_dir()
    assert Path(path).parent == tmpdir_env
    assert not is_stale(path)
    assert sweep_stale_runtime_dirs() == []
    assert os.path.isdir(path)


def test_directory_of_a_dead_owner_is_removed(tmpdir_env: Path) -> None:
    stale = tmpdir_env / "objstore-run-dead"
    stale.mkdir()
    (stale / OWNER_FILE).write_text(f"{dead_pid()} 12345\n")
    (stale / "generations").write_bytes(b"\0" * 64)
    other = tmpdir_env / "not-ours"
    other.mkdir()
    assert sweep_stale_runtime_dirs() == [str(stale)]
    assert not stale.exists() and other.exists()


def test_a_reused_pid_is_told_apart_by_its_start_time(tmpdir_env: Path) -> None:
    reused = tmpdir_env / "objstore-run-reused"
    reused.mkdir()
    (reused / OWNER_FILE).write_text(f"{os.getpid()} 1\n")  # our pid, another start time
    assert is_stale(str(reused))


def test_unowned_directories_are_stale_only_when_old(tmpdir_env: Path) -> None:
    young = tmpdir_env / "objstore-run-young"
    young.mkdir()
    assert not is_stale(str(young))
    old = young.stat().st_mtime + runtime_dirs.UNOWNED_GRACE_SECONDS + 1
    assert is_stale(str(young), now=old)
