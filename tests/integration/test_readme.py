"""The README's commands, run as a user runs them, each checked for its exit status and the
first line it prints: the quick start (`scripts/serve`), the aws CLI examples of
"Connecting", the daemon command of "Configuration" and the offline tools. `scripts/test`
is the command running this test; it is only listed."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import urllib3

from tests.integration.daemon import TWISTD, free_port

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BIN = Path(sys.executable).parent
BANNER = re.compile(r"objstore \d+\.\d+\.\d+: listening on port (\d+) of every address "
                    r"\(0\.0\.0\.0\); from this machine: (http://127\.0\.0\.1:\d+), "
                    r"data in (.+)")


def readme_commands() -> list[str]:
    """The commands of the README's ```sh blocks, continuation lines joined."""
    commands, inside, pending = [], False, ""
    for line in README.read_text().splitlines():
        if line.startswith("```"):
            inside = line == "```sh"
            continue
        if not inside:
            continue
        pending += line.strip()
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip() + " "
            continue
        commands.append(pending)
        pending = ""
    return commands


def test_every_readme_command_is_checked_here() -> None:
    """A command added to the README must be added to the checks below."""
    assert readme_commands() == [
        "scripts/serve",
        "scripts/test",
        "export AWS_ACCESS_KEY_ID=OS... AWS_SECRET_ACCESS_KEY=... AWS_DEFAULT_REGION=us-east-1",
        "aws --endpoint-url http://127.0.0.1:9000 s3 mb s3://demo",
        "aws --endpoint-url http://127.0.0.1:9000 s3 cp README.md s3://demo/",
        "aws --endpoint-url http://127.0.0.1:9000 s3api get-object --bucket demo --key "
        "README.md --range bytes=0-99 first-100-bytes.txt",
    ]
    text = README.read_text()
    for documented in ("`scripts/serve path/to/objstore.toml`",
                       "`twistd -n --pidfile= objstore --config PATH`",
                       "`objstore recover --config PATH [--force]`",
                       "`objstore check --config PATH [--repair]", "`objstore keygen`"):
        assert documented in text


def user_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OBJSTORE_", "AWS_"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["AWS_CONFIG_FILE"] = str(tmp_path / "aws-config")
    env["AWS_SHARED_CREDENTIALS_FILE"] = str(tmp_path / "aws-credentials")
    return env


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], list[str], int]]:
    """`scripts/serve path/to/objstore.toml` on the shipped sample, moved to a free port
    (9000 may be taken on a shared machine), run from an empty directory."""
    port = free_port()
    config = tmp_path / "objstore.toml"
    text = (ROOT / "etc" / "objstore.toml").read_text()
    assert "\nport = 9000\n" in text
    config.write_text(text.replace("\nport = 9000\n", f"\nport = {port}\n"))
    process = subprocess.Popen(
        [str(ROOT / "scripts" / "serve"), str(config)], cwd=tmp_path, env=user_env(tmp_path),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    lines: list[str] = []
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + 60
        while not any(line.startswith("  try: aws") for line in lines):
            assert time.monotonic() < deadline, lines
            line = process.stdout.readline()
            assert line, f"scripts/serve ended early: {lines}"
            lines.append(line.rstrip("\n"))
        # What the installer may print first (pip's warnings about this machine's own
        # configuration, say) is not the server's: its output starts at the banner.
        starts = [n for n, line in enumerate(lines) if BANNER.fullmatch(line)]
        assert starts, lines
        yield process, lines[starts[0]:], port
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)  # the README's Ctrl-C
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def test_quick_start_then_connecting(served: tuple[subprocess.Popen[str], list[str], int],
                                     tmp_path: Path) -> None:
    process, lines, port = served
    banner = BANNER.fullmatch(lines[0])
    assert banner, lines[0]
    assert int(banner[1]) == port and banner[3] == str(tmp_path / "data")
    assert lines[1] == ("A root credential was generated. The secret is shown ONLY NOW; "
                        "store it safely:")
    access = re.fullmatch(r"  AWS_ACCESS_KEY_ID=(OS\w+)", lines[2])
    secret = re.fullmatch(r"  AWS_SECRET_ACCESS_KEY=(\S+)", lines[3])
    assert access and secret, lines
    endpoint = banner[2]
    assert lines[4] == f"  try: aws --endpoint-url {endpoint} s3 ls"
    http = urllib3.PoolManager(retries=False)
    deadline = time.monotonic() + 30
    while True:
        try:
            if http.request("GET", endpoint + "/admin/health").status == 200:
                break
        except urllib3.exceptions.HTTPError:
            pass
        assert time.monotonic() < deadline, "the node never became ready"
        time.sleep(0.1)

    env = user_env(tmp_path)
    env.update(AWS_ACCESS_KEY_ID=access[1], AWS_SECRET_ACCESS_KEY=secret[1],
               AWS_DEFAULT_REGION="us-east-1")
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(README, work / "README.md")
    outputs = []
    for command in readme_commands()[3:]:
        argv = shlex.split(command.replace("http://127.0.0.1:9000", endpoint))
        done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        outputs.append([line.strip() for line in done.stdout.strip().split("\n")])
    assert outputs[0][0] == "make_bucket: demo"
    # `s3 cp` prints its transfer progress first when its output is not a terminal.
    assert outputs[1][-1] == "upload: ./README.md to s3://demo/README.md"
    assert outputs[2][0] == "{"
    assert f'"ContentRange": "bytes 0-99/{len(README.read_bytes())}",' in outputs[2]
    assert (work / "first-100-bytes.txt").read_bytes() == README.read_bytes()[:100]

    process.send_signal(signal.SIGINT)
    code = process.wait(60)
    assert code in (0, -signal.SIGINT, 128 + signal.SIGINT), code


def test_daemon_command_and_offline_tools(tmp_path: Path) -> None:
    """`twistd -n --pidfile= objstore --config PATH`, then, with it stopped, the offline
    tools of the README, from the daemon's working directory."""
    port = free_port()
    config = tmp_path / "objstore.toml"
    config.write_text(f'[server]\nhost = "127.0.0.1"\nport = {port}\nworkers = 1\n'
                      "drain_timeout_seconds = 0\n")
    env = user_env(tmp_path)
    daemon = subprocess.Popen([TWISTD, "-n", "--pidfile=", "objstore", "--config", str(config)],
                              cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        assert daemon.stdout is not None
        first = daemon.stdout.readline().rstrip("\n")
        assert first.startswith("objstore ") and f"endpoint http://127.0.0.1:{port}" in first
        http = urllib3.PoolManager(retries=False)
        deadline = time.monotonic() + 30
        while True:
            try:
                if http.request("GET", f"http://127.0.0.1:{port}/admin/health").status == 200:
                    break
            except urllib3.exceptions.HTTPError:
                pass
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(60)

    def objstore(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(BIN / "objstore"), *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=120)

    keygen = objstore("keygen")
    assert keygen.returncode == 0 and re.fullmatch(r"\S{32,}\n", keygen.stdout), keygen
    check = objstore("check", "--config", str(config))
    assert check.returncode == 0, check
    assert check.stdout.strip().splitlines()[-1] == "ok: database and files agree", check
    summary = json.dumps([check.stdout, check.stderr])
    assert "Traceback" not in summary
    for database_file in (tmp_path / "data" / "meta").glob("objstore.db*"):
        database_file.unlink()
    recover = objstore("recover", "--config", str(config))
    assert recover.returncode == 0, recover
    assert "Traceback" not in recover.stdout + recover.stderr
    again = objstore("check", "--config", str(config))
    assert again.returncode == 0, again
