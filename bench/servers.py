"""The servers a benchmark run starts: the objstore daemon, the nginx baseline and moto (a
peer S3 server in Python, `moto[server]`: objects in RAM, no fsync).

This module owns starting them on free loopback ports inside the run's temporary directory,
waiting for readiness with a deadline, and stopping them (SIGTERM, then SIGKILL). Both run in
their own session, so a Ctrl-C at the terminal reaches only the harness, which then stops
them from its `finally`. Nothing here listens on or connects to a non-loopback address.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

LOOPBACK = "127.0.0.1"
ROOT_ACCESS_KEY = "BENCHROOTACCESSKEY01"
ROOT_SECRET_KEY = "bench-root-secret-key-0123456789abcdefgh"
READY_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 15.0


class ServerError(RuntimeError):
    """A server could not be started; the message carries the tail of its log."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def _wait_http(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServerError(f"exited with {process.returncode}:\n{_tail(log)}")
        try:
            with urllib.request.urlopen(url, timeout=2.0) as response:
                if response.status < 500:
                    return
        except urllib.error.HTTPError as exc:
            if exc.code < 500:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise ServerError(f"not ready within {READY_TIMEOUT_SECONDS:.0f} s:\n{_tail(log)}")


def parse_proc_stat(text: str) -> tuple[int, int]:
    """(parent pid, CPU ticks in user + system mode) from the text of /proc/PID/stat."""
    fields = text[text.rindex(")") + 2:].split()  # the command name may hold spaces
    return int(fields[1]), int(fields[11]) + int(fields[12])


def cpu_seconds(pid: int) -> float:
    """CPU time used so far by `pid` and its live children (nginx's workers)."""
    ticks = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent, used = parse_proc_stat((entry / "stat").read_text())
        except (OSError, ValueError, IndexError):
            continue
        if int(entry.name) == pid or parent == pid:
            ticks += used
    return ticks / os.sysconf("SC_CLK_TCK")


def _tail(log: Path) -> str:
    try:
        return log.read_text(errors="replace")[-3000:]
    except OSError:
        return "(no log)"


def _stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(STOP_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class Objstore:
    """`twistd -n --pidfile= objstore --config ...` with SQLite and fsync on."""

    def __init__(self, workdir: Path, workers: int | None = None,
                 limits: str = "", extra: str = "", twistd: str | None = None) -> None:
        self.workdir = workdir
        # Another checkout's daemon (its venv's twistd: a before/after run), or this one's.
        self.twistd = twistd or str(Path(sys.executable).with_name("twistd"))
        self.extra = extra  # more sections of the config, e.g. "[encryption]\nenabled = true\n"
        self.port = free_port()
        self.workers = workers  # None: the daemon's default (one per CPU)
        self.limits = limits  # lines of [server.limits], e.g. "rate_limit_per_second = 1e6"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "objstore.log"

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "objstore.toml"
        workers = f"workers = {self.workers}\n" if self.workers is not None else ""
        config.write_text(
            f'[server]\nhost = "{LOOPBACK}"\nport = {self.port}\ndrain_timeout_seconds = 0\n'
            f"{workers}"
            + (f"[server.limits]\n{self.limits}\n" if self.limits else "")
            + f'[storage]\ndata_dir = "{self.workdir / "data"}"\nmetadata_backend = "sqlite"\n'
            "fsync = true\n" + self.extra
        )
        twistd = self.twistd
        env = dict(os.environ, OBJSTORE_ROOT_ACCESS_KEY=ROOT_ACCESS_KEY,
                   OBJSTORE_ROOT_SECRET_KEY=ROOT_SECRET_KEY)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [twistd, "-n", "--pidfile=", "objstore", "--config", str(config)],
                cwd=self.workdir, env=env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        _wait_http(self.base_url + "/admin/health", self.process, self.log_path)

    def stop(self) -> None:
        _stop(self.process)

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.process.pid) if self.process else 0.0


class Nginx:
    """nginx in the foreground: static files under `root`, WebDAV PUT under /put/."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.root = workdir / "www"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "error.log"

    def config_text(self) -> str:
        temp = self.workdir / "temp"
        # A root master would switch its workers to "nobody", who may not write our files.
        user = f"user {pwd.getpwuid(os.geteuid()).pw_name};\n" if os.geteuid() == 0 else ""
        return (
            f"{user}worker_processes auto;\ndaemon off;\npid {self.workdir / 'nginx.pid'};\n"
            f"error_log {self.log_path} warn;\nevents {{ worker_connections 1024; }}\n"
            "http {\n  access_log off;\n  sendfile on;\n  keepalive_requests 1000000;\n"
            f"  client_body_temp_path {temp / 'body'};\n  proxy_temp_path {temp / 'proxy'};\n"
            f"  fastcgi_temp_path {temp / 'fastcgi'};\n  uwsgi_temp_path {temp / 'uwsgi'};\n"
            f"  scgi_temp_path {temp / 'scgi'};\n"
            f"  server {{\n    listen {LOOPBACK}:{self.port};\n    root {self.root};\n"
            "    client_max_body_size 0;\n"
            "    location /put/ { dav_methods PUT; create_full_put_path on; }\n  }\n}\n"
        )

    def start(self) -> None:
        binary = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists()
                                           else None)
        if binary is None:
            raise ServerError("nginx is not installed: apt-get update && apt-get install -y nginx")
        (self.workdir / "temp").mkdir(parents=True, exist_ok=True)
        self.root.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "nginx.conf"
        config.write_text(self.config_text())
        with open(self.workdir / "nginx.out", "ab") as out:
            self.process = subprocess.Popen(
                [binary, "-p", str(self.workdir), "-c", str(config), "-e", str(self.log_path)],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )
        _wait_http(self.base_url + "/", self.process, self.log_path)

    def stop(self) -> None:
        # SIGQUIT is nginx's graceful stop; SIGTERM (fast stop) is just as safe for a bench.
        _stop(self.process)

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.process.pid) if self.process else 0.0


class Moto:
    """`moto_server` (moto[server], the `bench` extra) on a loopback port: an S3 API in
    Python with objects in memory. It checks no signatures, so the harness's presigned and
    signed requests work unchanged."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "moto.log"

    def start(self) -> None:
        binary = Path(sys.executable).with_name("moto_server")
        if not binary.exists():
            raise ServerError("moto is not installed: .venv/bin/pip install -e '.[bench]' "
                              "(or run with --no-moto)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [str(binary), "-H", LOOPBACK, "-p", str(self.port)], cwd=self.workdir,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                env=dict(os.environ, MOTO_CALL_RESET_API="false"))
        _wait_http(self.base_url + "/", self.process, self.log_path)

    def stop(self) -> None:
        _stop(self.process)

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.process.pid) if self.process else 0.0
