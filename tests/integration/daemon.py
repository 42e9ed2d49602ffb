"""Start and stop a real objstore daemon process for integration tests.

The daemon runs as `twistd -n --pidfile= objstore --config PATH` on a free port with a
temporary data directory, exactly as an operator would run it; readiness is polled on
GET /admin/health with a deadline. Logs are kept in the data directory's parent and
printed when a start fails.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psycopg2
import urllib3

ROOT_ACCESS_KEY = "OSTESTROOTACCESSKEY1"
ROOT_SECRET_KEY = "test-root-secret-key-0123456789abcdefghij"
TWISTD = str(Path(sys.executable).with_name("twistd"))
POSTGRES_ADMIN_DSN = "host=127.0.0.1 user=postgres dbname=postgres"


# Under pytest-xdist each worker (PYTEST_XDIST_WORKER = gw0, gw1, ...) takes its daemons'
# ports from a range of its own, below the kernel's ephemeral range (32768-60999 on Linux):
# two workers never pick the same port, an outgoing connection never takes a port between
# the probe below and the daemon's bind, and a port is not reused within a session (until
# the range wraps), so a node of one worker's cluster never reaches a node of another's
# cluster that took over a stopped node's port (every test cluster shares one secret).
PORT_RANGE_START = 10000
PORT_RANGE_SIZE = 1500
_next_port: list[int] = []


def _xdist_worker_index() -> int | None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else None


def _port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A port nothing listens on. Without xdist: one the kernel picks (bind to port 0).
    Under xdist: the next free one in this worker's range (started at a random offset, so
    two test runs side by side rarely meet; a port in use is skipped)."""
    index = _xdist_worker_index()
    if index is None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])
    start = PORT_RANGE_START + (index % 15) * PORT_RANGE_SIZE
    if not _next_port:
        _next_port.append(secrets.randbelow(PORT_RANGE_SIZE))
    for _ in range(PORT_RANGE_SIZE):
        port = start + _next_port[0] % PORT_RANGE_SIZE
        _next_port[0] += 1
        if _port_is_free(port):
            return port
    raise RuntimeError(f"no free port in {start}-{start + PORT_RANGE_SIZE - 1}")


def create_postgres_database() -> str:
    name = f"objstore_it_{uuid.uuid4().hex[:12]}"
    conn = psycopg2.connect(POSTGRES_ADMIN_DSN)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    conn.close()
    return name


def drop_postgres_database(name: str) -> None:
    conn = psycopg2.connect(POSTGRES_ADMIN_DSN)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    conn.close()


@dataclass
class Daemon:
    workdir: Path
    backend: str = "sqlite"
    extra_config: str = ""
    # OBJSTORE_TEST_WORKERS=2 runs every integration test against a two-worker node.
    workers: int = field(default_factory=lambda: int(os.environ.get("OBJSTORE_TEST_WORKERS",
                                                                     "1")))
    port: int = field(default_factory=free_port)
    drain_timeout_seconds: float = 0.2
    # The CA of the daemon's [server.tls] certificate (the section itself goes in
    # extra_config): the endpoint is then https:// and readiness checks verify against it.
    tls_ca: Path | None = None
    process: subprocess.Popen[bytes] | None = None
    pg_database: str | None = None
    # Environment variables of the daemon besides the test's own (OBJSTORE_TEST_* knobs).
    extra_env: dict[str, str] = field(default_factory=dict)
    _log_start: int = 0
    _terminating: bool = False  # SIGTERM sent by terminate(), not waited for yet
    log_checked: int = 0  # the log before this byte was checked for tracebacks already

    @property
    def data_dir(self) -> Path:
        return self.workdir / "data"

    @property
    def config_path(self) -> Path:
        return self.workdir / "objstore.toml"

    @property
    def endpoint(self) -> str:
        scheme = "http" if self.tls_ca is None else "https"
        return f"{scheme}://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "daemon.log"

    @property
    def temp_dir(self) -> Path:
        """The daemon's TMPDIR: its runtime directory lands here, removed with the workdir
        even when the daemon was SIGKILLed."""
        return self.workdir / "tmp"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        self.temp_dir.mkdir(parents=True, exist_ok=True)
        env["TMPDIR"] = str(self.temp_dir)
        env["OBJSTORE_ROOT_ACCESS_KEY"] = ROOT_ACCESS_KEY
        env["OBJSTORE_ROOT_SECRET_KEY"] = ROOT_SECRET_KEY
        env.update(self.extra_env)
        return env

    def write_config(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        storage = f'data_dir = "{self.data_dir}"\nmetadata_backend = "{self.backend}"\n'
        if self.backend == "postgres":
            if self.pg_database is None:
                self.pg_database = create_postgres_database()
            storage += (
                f'postgres_url = "postgresql://postgres@127.0.0.1:5432/{self.pg_database}"\n'
            )
        self.config_path.write_text(
            "[server]\n"
            f'host = "127.0.0.1"\nport = {self.port}\ndrain_timeout_seconds = '
            f'{self.drain_timeout_seconds}\n'
            f"workers = {self.workers}\n"
            "[storage]\n" + storage + self.extra_config
        )

    def start(self, timeout: float = 60.0) -> None:
        self.launch()
        self.wait_ready(timeout)

    def launch(self) -> None:
        """Write the config and start the process without waiting for it (`wait_ready`
        does): several daemons then start side by side."""
        self.write_config()
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [TWISTD, "-n", "--pidfile=", "objstore", "--config", str(self.config_path)],
                cwd=self.workdir, env=self.env(), stdout=log, stderr=subprocess.STDOUT,
            )

    def wait_ready(self, timeout: float) -> None:
        http = urllib3.PoolManager(retries=False, timeout=2.0,
                                   ca_certs=None if self.tls_ca is None else str(self.tls_ca))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"daemon exited with {self.process.returncode}:\n"
                                   + self.log_path.read_text(errors="replace")[-4000:])
            try:
                response = http.request("GET", self.endpoint + "/admin/health")
                if response.status == 200 and self._every_worker_listens():
                    return
            except urllib3.exceptions.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("daemon not ready in time:\n" + self.log_path.read_text()[-4000:])

    def _every_worker_listens(self) -> bool:
        """With several workers, health answers as soon as one of them is up: a test that
        needs each worker (pinned connections) would race the slower ones."""
        if self.workers <= 1:
            return True
        with open(self.log_path, "rb") as log:
            log.seek(self._log_start)
            text = log.read().decode("utf-8", "replace")
        listening = {int(m) for m in re.findall(r"\[worker (\d+)\] [\w.]+: objstore \S+ "
                                                r"listening on", text)}
        return listening >= set(range(self.workers))

    def terminate(self) -> None:
        """Send SIGTERM once without waiting (`stop`/`cleanup` then wait): several daemons
        then drain side by side."""
        if self.process is not None and self.process.poll() is None and not self._terminating:
            self.process.send_signal(signal.SIGTERM)
            self._terminating = True

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        if self.process is None:
            return 0
        if self.process.poll() is None and not (sig == signal.SIGTERM and self._terminating):
            self.process.send_signal(sig)
        code = self.process.wait(timeout)
        self.process = None
        self._terminating = False
        return code

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def kill_tree(self, timeout: float = 30.0) -> None:
        """SIGKILL the daemon and every process it started at one instant, as the OOM
        killer or a container stop does: all are frozen (SIGSTOP) first, so none sees
        another die (a supervisor would replace a dead worker, an orphan would drain)."""
        assert self.process is not None
        pids = self.pids()
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
        self.process.wait(timeout)
        self.process = None
        self._terminating = False
        wait_processes_gone(pids, timeout)

    def cleanup(self) -> None:
        """Stop the daemon (SIGTERM, so it removes what it made; SIGKILL if it hangs) and
        drop its PostgreSQL database; fail when it logged a traceback."""
        if self.process is not None:
            try:
                self.stop(signal.SIGTERM, timeout=15.0)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.pg_database:
            drop_postgres_database(self.pg_database)
            self.pg_database = None
        self.assert_no_tracebacks()

    def remove_files(self) -> None:
        """Remove the workdir (data, database, log, temp files) of a stopped daemon."""
        assert self.process is None
        shutil.rmtree(self.workdir, ignore_errors=True)

    def log_size(self) -> int:
        """Bytes in the daemon's log so far (where a later check may start)."""
        return self.log_path.stat().st_size if self.log_path.exists() else 0

    def assert_no_tracebacks(self, since: int | None = None) -> None:
        """No request of a test may hit an unhandled error: every one would have been a
        500 (or a cut stream) for a real client. `since`: only the log after that byte
        (default `log_checked`)."""
        if not self.log_path.exists():
            return
        with open(self.log_path, "rb") as log:
            log.seek(self.log_checked if since is None else since)
            text = log.read().decode("utf-8", "replace")
        index = text.find("Traceback (most recent call last)")
        if index >= 0:
            raise AssertionError("the daemon logged a traceback:\n" + text[max(0, index - 600):
                                                                         index + 3000])

    def pids(self) -> list[int]:
        """The daemon's process and its descendants (a supervisor's workers)."""
        assert self.process is not None
        found, queue = [], [self.process.pid]
        while queue:
            pid = queue.pop()
            found.append(pid)
            for task_dir in Path(f"/proc/{pid}/task").glob("*"):
                try:
                    queue += [int(c) for c in (task_dir / "children").read_text().split()]
                except OSError:
                    pass
        return found

    def _status_by_process(self, field_name: str) -> dict[int, int]:
        found = {}
        for pid in self.pids():
            try:
                with open(f"/proc/{pid}/status") as status:
                    for line in status:
                        if line.startswith(field_name + ":"):
                            found[pid] = int(line.split()[1]) * 1024
            except OSError:
                pass
        return found

    def _status_total(self, field_name: str) -> int:
        return sum(self._status_by_process(field_name).values())

    def largest_peak_rss_bytes(self) -> int:
        """The highest peak resident memory of any one of the daemon's processes."""
        return max(self._status_by_process("VmHWM").values())

    def rss_bytes(self) -> int:
        """Resident memory of the whole daemon (every process)."""
        return self._status_total("VmRSS")

    def peak_rss_bytes(self) -> int:
        """Sum of each process's peak resident memory (an upper bound of the peak total)."""
        return self._status_total("VmHWM")


def process_gone(pid: int) -> bool:
    """True once `pid` has exited (a zombie nobody reaped yet counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] in ("Z", "X")
    except OSError:
        return True


def wait_processes_gone(pids: list[int], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not all(process_gone(pid) for pid in pids):
        assert time.monotonic() < deadline, f"processes still running: {pids}"
        time.sleep(0.05)


OBJSTORE = str(Path(sys.executable).with_name("objstore"))


def objstore_cli(daemon: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the offline `objstore` command against a (stopped) daemon's config."""
    return subprocess.run([OBJSTORE, *args, "--config", str(daemon.config_path)],
                          cwd=daemon.workdir, env=daemon.env(), capture_output=True,
                          text=True, timeout=300)


def drop_database(daemon: Daemon) -> None:
    """Lose the metadata database of a stopped daemon (SQLite file or PostgreSQL database)."""
    if daemon.backend == "sqlite":
        shutil.rmtree(daemon.data_dir / "meta")
        return
    conn = psycopg2.connect(POSTGRES_ADMIN_DSN)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'DROP DATABASE "{daemon.pg_database}" WITH (FORCE)')
        cur.execute(f'CREATE DATABASE "{daemon.pg_database}"')
    conn.close()


ORPHANS = "orphans (reclaimable with --repair)"
CHECK_SUMMARY = ("ok", "problems", "repaired")


def check_findings(daemon: Daemon, *args: str
                   ) -> tuple[subprocess.CompletedProcess[str], dict[str, list[str]]]:
    """Run `objstore check` and read its report: each section it printed (e.g. "missing
    blobs", ORPHANS) with the items it listed."""
    report = objstore_cli(daemon, "check", *args)
    findings: dict[str, list[str]] = {}
    items: list[str] = []
    for line in report.stdout.splitlines():
        if line.startswith("  "):
            items.append(line.strip())
        elif line:
            title = line.partition(":")[0]
            items = [] if title in CHECK_SUMMARY else findings.setdefault(title, [])
    return report, findings
