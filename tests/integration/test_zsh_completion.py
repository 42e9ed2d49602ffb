"""`objstore completion zsh` in a real interactive zsh on a pseudo-terminal: the line editor
completes what is typed after a TAB, both when the script is sourced after compinit and
when it is installed as `_objstore` in a directory of $fpath (how the Debian package ships
it). A key bound to a widget writes the edited line to a file, so the test reads the
line, not the terminal's redrawing. Skipped without zsh (scripts/install-test-clients
installs it)."""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ZSH = shutil.which("zsh")
OBJSTORE = Path(sys.executable).with_name("objstore")
DEADLINE_SECONDS = 60.0

pytestmark = pytest.mark.skipif(ZSH is None, reason="zsh is not installed")


def completed_line(tmp_path: Path, setup: str, typed: str) -> str:
    """The zsh line after typing `typed` and a TAB, with `setup` in .zshrc."""
    assert ZSH is not None
    zdotdir = tmp_path / "zdotdir"
    zdotdir.mkdir(exist_ok=True)
    line = tmp_path / "line"
    line.unlink(missing_ok=True)
    (zdotdir / ".zshrc").write_text(
        setup + "\n"
        f"_show_line() {{ print -r -- \"[$BUFFER]\" > {line}; }}\n"
        "zle -N _show_line\n"
        "bindkey '^T' _show_line\n")
    env = {"PATH": f"{OBJSTORE.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
           "HOME": str(tmp_path), "ZDOTDIR": str(zdotdir), "TERM": "xterm"}
    controller, terminal = os.openpty()
    shell = subprocess.Popen([ZSH, "-i"], stdin=terminal, stdout=terminal, stderr=terminal,
                             env=env, start_new_session=True)
    os.close(terminal)
    screen = b""
    try:
        # Keys wait in the terminal until the line editor reads them, in order: the TAB's
        # completion (which runs `objstore __complete`) is done before ^T shows the line.
        os.write(controller, typed.encode() + b"\t\x14")
        deadline = time.monotonic() + DEADLINE_SECONDS
        while time.monotonic() < deadline:
            if select.select([controller], [], [], 0.1)[0]:
                try:
                    screen += os.read(controller, 65536)
                except OSError:
                    break
            text = line.read_text() if line.exists() else ""
            if text.endswith("]\n"):
                return text[1:-2]
        raise AssertionError(f"zsh showed no line; the terminal said: {screen[-2000:]!r}")
    finally:
        shell.kill()
        shell.wait()
        os.close(controller)


SOURCED = "autoload -U compinit && compinit -u && source <(objstore completion zsh)"


@pytest.mark.parametrize(("typed", "expected"), [
    ("objstore buck", "objstore buckets "),          # a subcommand
    ("objstore buckets q", "objstore buckets quota "),  # one level down
    ("objstore completion z", "objstore completion zsh "),  # a positional's choices
    ("objstore jobs start --mo", "objstore jobs start --mode "),  # an option
    ("objstore jobs start --mode m", "objstore jobs start --mode maintenance "),  # its value
])
def test_sourced_script_completes(tmp_path: Path, typed: str, expected: str) -> None:
    assert completed_line(tmp_path, SOURCED, typed) == expected


def test_script_in_fpath_completes_at_the_first_tab(tmp_path: Path) -> None:
    functions = tmp_path / "functions"
    functions.mkdir()
    script = subprocess.run([str(OBJSTORE), "completion", "zsh"], capture_output=True,
                            text=True, check=True, timeout=60).stdout
    (functions / "_objstore").write_text(script)
    setup = f"fpath=({functions} $fpath); autoload -U compinit && compinit -u"
    assert completed_line(tmp_path, setup, "objstore buckets q") == "objstore buckets quota "


def test_no_candidate_falls_back_to_file_names(tmp_path: Path) -> None:
    (tmp_path / "export-2026.json").write_text("{}")
    setup = SOURCED + f"; cd {tmp_path}"
    assert completed_line(tmp_path, setup, "objstore import exp") == \
        "objstore import export-2026.json "
