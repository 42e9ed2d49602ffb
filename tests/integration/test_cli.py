"""The `objstore` command's own behaviour (no daemon needed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from objstore import __version__

OBJSTORE = str(Path(sys.executable).with_name("objstore"))


def test_version() -> None:
    result = subprocess.run([OBJSTORE, "--version"], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == f"objstore {__version__}"


def test_bad_config_is_one_line_and_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "objstore.toml"
    config.write_text("[storage]\nmetadata_backend = \"mysql\"\n")
    result = subprocess.run([OBJSTORE, "check", "--config", str(config)],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "[storage] metadata_backend" in result.stderr


def test_check_refuses_a_volume_without_a_database(tmp_path: Path) -> None:
    config = tmp_path / "objstore.toml"
    config.write_text(f'[storage]\ndata_dir = "{tmp_path / "data"}"\n')
    result = subprocess.run([OBJSTORE, "check", "--config", str(config)],
                            capture_output=True, text=True)
    assert result.returncode == 1
    assert "no metadata database" in result.stderr
    assert not (tmp_path / "data").exists()  # a read-only tool creates nothing


def test_keygen_prints_a_strong_secret() -> None:
    result = subprocess.run([OBJSTORE, "keygen"], capture_output=True, text=True)
    secret = result.stdout.strip()
    assert result.returncode == 0 and len(secret) >= 32 and len(set(secret)) >= 16
