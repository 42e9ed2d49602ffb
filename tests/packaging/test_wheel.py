"""The wheel `pip wheel .` builds: it carries the twistd plugin (so `twistd objstore` is
known after a plain install) and nothing that would shadow Twisted's own files. The
Debian package test (test_deb.py) runs twistd from such a plain install."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.packaging, pytest.mark.timeout(900)]


def test_wheel_ships_the_twistd_plugin(tmp_path: Path) -> None:
    # Build from a copy of the checkout's files: setuptools writes build/ into the source.
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                           cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    source = tmp_path / "src"
    for name in files:
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            (source / name).write_bytes((REPO / name).read_bytes())
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w",
                    str(tmp_path / "dist"), str(source)], check=True, timeout=600)
    (wheel,) = (tmp_path / "dist").glob("objstore-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "twisted/plugins/objstore_plugin.py" in names
    # Twisted's own twisted/__init__.py and twisted/plugins/__init__.py must stay Twisted's.
    assert [n for n in names if n.startswith("twisted/")] == [
        "twisted/plugins/objstore_plugin.py"]
    assert "objstore/daemon.py" in names and "objstore/cli/main.py" in names
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "objstore = objstore.cli.main:main" in zipfile.ZipFile(wheel).read(
        entry_points).decode()
