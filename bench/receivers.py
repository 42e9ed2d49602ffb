"""The webhook receivers bench.notify delivers events to, each counting the POSTs it got
and the CPU it used (it shares the machine's cores with the daemon under test):

- `python`: http.server (`ThreadingHTTPServer`) on a thread of the bench process, the
  receiver the first figures were taken with; its CPU is the bench process's (idle
  otherwise while wrk runs);
- `asyncio`: a minimal asyncio HTTP/1.1 server in its own process (`python -m
  bench.receivers --port N`), answering 200 to every request with keep-alive; `GET
  /count` answers the number of POSTs seen (that request itself is not counted);
- `nginx`: nginx answering 200 to every POST (`return 200`, the body discarded), one
  worker process; each request is a line of its access log, which is the count.

`parse_request_head` is pure and tested; the rest starts and stops processes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pwd
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol

from bench.servers import LOOPBACK, ServerError, _stop, _wait_http, cpu_seconds, free_port

KINDS = ("python", "asyncio", "nginx")
MAX_HEAD = 64 * 1024


class Receiver(Protocol):
    url: str

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def count(self) -> int: ...
    def cpu_seconds(self) -> float: ...


def parse_request_head(head: bytes) -> tuple[str, str, int, bool]:
    """(method, target, Content-Length, keep-alive) of an HTTP/1.x request head (the bytes
    before the blank line). Raises ValueError on a head that is not one."""
    lines = head.split(b"\r\n")
    method, target, version = lines[0].decode("latin-1").split(" ")
    if not version.startswith("HTTP/1."):
        raise ValueError(f"not HTTP/1.x: {version!r}")
    length = 0
    keep_alive = version == "HTTP/1.1"
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value.strip())
            if length < 0:
                raise ValueError("negative Content-Length")
        elif name == b"connection":
            token = value.strip().lower()
            keep_alive = token == b"keep-alive" if token in (b"keep-alive", b"close") \
                else keep_alive
    return method, target, length, keep_alive


class PythonReceiver:
    """http.server on a thread of this process."""

    def __init__(self) -> None:
        port = free_port()
        self.url = f"http://{LOOPBACK}:{port}/"
        self._count = 0
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with lock:
                    outer._count += 1
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((LOOPBACK, port), Handler)

    def start(self) -> None:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self._server.shutdown()

    def count(self) -> int:
        return self._count

    def cpu_seconds(self) -> float:
        return time.process_time()  # this process: idle but for the receiver during a run


class AsyncioReceiver:
    """`python -m bench.receivers` in its own process."""

    def __init__(self, workdir: Path) -> None:
        self._port = free_port()
        self.url = f"http://{LOOPBACK}:{self._port}/"
        self._log = workdir / "receiver.log"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        repo = Path(__file__).resolve().parents[1]
        with open(self._log, "ab") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "bench.receivers", "--port", str(self._port)],
                cwd=repo, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        _wait_http(self.url + "count", self._process, self._log)

    def stop(self) -> None:
        _stop(self._process)

    def count(self) -> int:
        with urllib.request.urlopen(self.url + "count", timeout=10) as answer:
            return int(answer.read())

    def cpu_seconds(self) -> float:
        return cpu_seconds(self._process.pid) if self._process else 0.0


class NginxReceiver:
    """nginx, one worker, `return 200` to every request, one access log line each."""

    def __init__(self, workdir: Path) -> None:
        self._dir = workdir / "receiver-nginx"
        self._port = free_port()
        self.url = f"http://{LOOPBACK}:{self._port}/"
        self._access = self._dir / "access.log"
        self._process: subprocess.Popen[bytes] | None = None

    def config_text(self) -> str:
        user = f"user {pwd.getpwuid(os.geteuid()).pw_name};\n" if os.geteuid() == 0 else ""
        temp = self._dir / "temp"
        return (
            f"{user}worker_processes 1;\ndaemon off;\npid {self._dir / 'nginx.pid'};\n"
            f"error_log {self._dir / 'error.log'} warn;\nevents {{ worker_connections 1024; }}\n"
            "http {\n  log_format n '$request_method';\n"
            f"  access_log {self._access} n;\n  keepalive_requests 1000000;\n"
            f"  client_body_temp_path {temp / 'body'};\n  proxy_temp_path {temp / 'proxy'};\n"
            f"  fastcgi_temp_path {temp / 'fastcgi'};\n  uwsgi_temp_path {temp / 'uwsgi'};\n"
            f"  scgi_temp_path {temp / 'scgi'};\n"
            f"  server {{\n    listen {LOOPBACK}:{self._port};\n"
            "    client_max_body_size 1m;\n    client_body_buffer_size 64k;\n"
            "    location / { return 200; }\n  }\n}\n")

    def start(self) -> None:
        binary = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists()
                                           else None)
        if binary is None:
            raise ServerError("nginx is not installed")
        (self._dir / "temp").mkdir(parents=True, exist_ok=True)
        config = self._dir / "nginx.conf"
        config.write_text(self.config_text())
        error_log = self._dir / "error.log"
        with open(self._dir / "nginx.out", "ab") as out:
            self._process = subprocess.Popen(
                [binary, "-p", str(self._dir), "-c", str(config), "-e", str(error_log)],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        _wait_http(self.url, self._process, error_log)

    def stop(self) -> None:
        _stop(self._process)

    def count(self) -> int:
        try:
            with open(self._access, "rb") as log:
                return sum(1 for line in log if line.startswith(b"POST"))
        except FileNotFoundError:
            return 0

    def cpu_seconds(self) -> float:
        return cpu_seconds(self._process.pid) if self._process else 0.0


def make_receiver(kind: str, workdir: Path) -> Receiver:
    if kind == "python":
        return PythonReceiver()
    if kind == "asyncio":
        return AsyncioReceiver(workdir)
    if kind == "nginx":
        return NginxReceiver(workdir)
    raise ValueError(f"unknown receiver {kind!r} (one of {', '.join(KINDS)})")


# The asyncio receiver's process.

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"


async def _serve_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                            counter: list[int]) -> None:
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                return
            method, target, length, keep_alive = parse_request_head(head[:-4])
            if length:
                await reader.readexactly(length)
            if method == "GET" and target == "/count":
                text = str(counter[0]).encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s"
                             % (len(text), text))
            else:
                if method == "POST":
                    counter[0] += 1
                writer.write(OK)
            if not keep_alive:
                return
    except (ValueError, ConnectionError, asyncio.IncompleteReadError):
        return
    finally:
        writer.close()


async def _serve(port: int) -> None:
    counter = [0]
    server = await asyncio.start_server(
        lambda r, w: _serve_connection(r, w, counter), LOOPBACK, port, limit=MAX_HEAD)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description="bench.notify's asyncio webhook receiver")
    parser.add_argument("--port", type=int, required=True)
    asyncio.run(_serve(parser.parse_args().port))


if __name__ == "__main__":
    main()
