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


def test_check_on_an_empty_volume_is_clean(tmp_path: Path) -> None:
    config = tmp_path / "objstore.toml"
    config.write_text(f'[storage]\ndata_dir = "{tmp_path / "data"}"\n')
    result = subprocess.run([OBJSTORE, "check", "--config", str(config)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok: database and files agree" in result.stdout
