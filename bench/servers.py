"""The servers a benchmark run starts: the objstore daemon, the nginx baseline, moto (a
peer S3 server in Python, `moto[server]`: objects in RAM, no fsync) and, on request, Ceph
RGW (Debian's radosgw on a throwaway one-OSD cluster whose OSD keeps objects in RAM).

This module owns starting them on free loopback ports inside the run's temporary directory,
waiting for readiness with a deadline, and stopping them (SIGTERM, then SIGKILL). Both run in
their own session, so a Ctrl-C at the terminal reaches only the harness, which then stops
them from its `finally`. Nothing here listens on or connects to a non-loopback address.
"""

from __future__ import annotations

import json
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
import uuid
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


def _wait_http(url: str, process: subprocess.Popen[bytes], log: Path,
               timeout: float = READY_TIMEOUT_SECONDS) -> None:
    deadline = time.monotonic() + timeout
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
    raise ServerError(f"not ready within {timeout:.0f} s:\n{_tail(log)}")


def parse_proc_stat(text: str) -> tuple[int, int]:
    """(parent pid, CPU ticks in user + system mode) from the text of /proc/PID/stat."""
    fields = text[text.rindex(")") + 2:].split()  # the command name may hold spaces
    return int(fields[1]), int(fields[11]) + int(fields[12])


def cpu_seconds(*pids: int) -> float:
    """CPU time used so far by the processes `pids` and their live children (nginx's
    workers)."""
    ticks = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent, used = parse_proc_stat((entry / "stat").read_text())
        except (OSError, ValueError, IndexError):
            continue
        if int(entry.name) in pids or parent in pids:
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
        # TMPDIR: the node's runtime directory (objstore-run-*) goes under the run's own
        # directory, removed with it, not into /tmp where a killed daemon leaves it.
        env = dict(os.environ, OBJSTORE_ROOT_ACCESS_KEY=ROOT_ACCESS_KEY,
                   OBJSTORE_ROOT_SECRET_KEY=ROOT_SECRET_KEY, TMPDIR=str(self.workdir))
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


# -- Ceph RGW ----------------------------------------------------------------------------------
RGW_USER = "bench"
CEPH_BINARIES = ("monmaptool", "ceph-authtool", "ceph-mon", "ceph-osd", "ceph", "rados",
                 "radosgw", "radosgw-admin")
# The pools radosgw would create on the first bucket and the first object written (the
# first PUT waited 1.8 s for its data pool here): made and written to before it starts, so
# no measured request pays for a pool.
RGW_BUCKET_POOLS = ("default.rgw.buckets.index", "default.rgw.buckets.data",
                    "default.rgw.buckets.non-ec")
CEPH_STEP_TIMEOUT_SECONDS = 60.0
OSD_UP_TIMEOUT_SECONDS = 60.0
RGW_READY_TIMEOUT_SECONDS = 120.0  # radosgw creates its pools before it listens
MEMSTORE_DEVICE_BYTES = 2 * 1024**3  # the OSD's capacity, held in RAM as objects are written
# (entity, capabilities) in the one keyring; `ceph-mon --mkfs` imports them all, so no key
# has to be registered after the monitor is up.
CEPH_KEYS = (
    ("mon.", ("mon", "allow *")),
    ("client.admin", ("mon", "allow *", "osd", "allow *", "mgr", "allow *")),
    ("osd.0", ("mon", "allow profile osd", "osd", "allow *", "mgr", "allow profile osd")),
    ("client.rgw.bench", ("mon", "allow rw", "osd", "allow rwx")),
)


def ceph_conf(root: Path, fsid: str, mon_addrs: str,
              memstore_bytes: int = MEMSTORE_DEVICE_BYTES) -> str:
    """ceph.conf of the throwaway cluster: every path under `root`, cephx, one memstore OSD
    (RAM, no fsync), pools of size 1 with few placement groups (one OSD holds them all)."""
    return (
        "[global]\n"
        f"fsid = {fsid}\n"
        f"mon host = {mon_addrs}\n"
        f"public addr = {LOOPBACK}\n"
        f"cluster addr = {LOOPBACK}\n"
        "auth cluster required = cephx\nauth service required = cephx\n"
        "auth client required = cephx\n"
        f"keyring = {root / 'keyring'}\n"
        f"run dir = {root / 'run'}\n"
        f"admin socket = {root / 'run'}/$cluster-$name.asok\n"
        f"pid file = {root / 'run'}/$cluster-$name.pid\n"
        f"log file = {root / 'log'}/$cluster-$name.log\n"
        f"crash dir = {root / 'crash'}\n"
        "osd pool default size = 1\nosd pool default min size = 1\n"
        "mon allow pool size one = true\nmon warn on pool no redundancy = false\n"
        "osd pool default pg num = 8\nosd pool default pgp num = 8\n"
        "osd pool default pg autoscale mode = off\nmon max pg per osd = 1000\n"
        "osd crush chooseleaf type = 0\n"
        "[mon]\n"
        f"mon data = {root / 'mon'}/$cluster-$id\n"
        "[osd]\n"
        f"osd data = {root / 'osd'}/$cluster-$id\n"
        "osd objectstore = memstore\n"
        f"memstore device bytes = {memstore_bytes}\n"
    )


def free_ports(count: int) -> list[int]:
    """`count` distinct free loopback ports (held open together while they are picked)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind((LOOPBACK, 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class Rgw:
    """Ceph RGW (Debian's `radosgw`, beast frontend) on a throwaway single-host cluster under
    `workdir`: one monitor, no manager, one OSD with `osd objectstore = memstore` (objects in
    RAM, no fsync), pools of size 1, and an S3 user with the harness's root credential.
    Everything (config, keyring, monitor store, sockets, logs) lives under `workdir`; no
    systemd unit, nothing on a non-loopback address. `stop` kills the three daemons: their
    state is thrown away with the directory."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port, self.mon_v2, self.mon_v1 = free_ports(3)
        self.conf = workdir / "ceph.conf"
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "log" / "ceph-client.rgw.bench.log"

    def start(self) -> None:
        missing = [name for name in CEPH_BINARIES if shutil.which(name) is None]
        if missing:
            raise ServerError(f"Ceph is not installed ({', '.join(missing)} missing): "
                              "apt-get install -y ceph-mon ceph-osd radosgw ceph-common "
                              "(or run without --rgw)")
        for name in ("run", "log", "crash", "mon", "osd/ceph-0", "rgw"):
            (self.workdir / name).mkdir(parents=True, exist_ok=True)
        fsid = str(uuid.uuid4())
        mon_addrs = f"[v2:{LOOPBACK}:{self.mon_v2},v1:{LOOPBACK}:{self.mon_v1}]"
        self.conf.write_text(ceph_conf(self.workdir, fsid, mon_addrs))
        keyring = str(self.workdir / "keyring")
        for n, (entity, caps) in enumerate(CEPH_KEYS):
            create = ["--create-keyring"] if n == 0 else []
            flags = [arg for pair in zip(caps[::2], caps[1::2], strict=True)
                     for arg in ("--cap", *pair)]
            self._step(f"key {entity}", ["ceph-authtool", keyring, *create, "--gen-key",
                                         "-n", entity, *flags])
        monmap = str(self.workdir / "monmap")
        self._step("monmap", ["monmaptool", "--create", "--fsid", fsid, "--addv", "a",
                              mon_addrs, monmap])
        self._step("monitor mkfs", ["ceph-mon", "-c", str(self.conf), "--mkfs", "-i", "a",
                                    "--monmap", monmap, "--keyring", keyring])
        self._daemon("mon", ["ceph-mon", "-f", "-c", str(self.conf), "-i", "a"])
        osd_uuid = str(uuid.uuid4())
        osd_id = self._ceph("osd new", "osd", "new", osd_uuid).strip()
        if osd_id != "0":
            raise ServerError(f"RGW setup: `ceph osd new` gave id {osd_id!r}, not 0")
        self._step("OSD mkfs (memstore)", ["ceph-osd", "-c", str(self.conf), "-i", "0",
                                           "--mkfs", "--osd-uuid", osd_uuid])
        self._daemon("osd", ["ceph-osd", "-f", "-c", str(self.conf), "-i", "0"])
        self._wait_osd_up()
        for pool in RGW_BUCKET_POOLS:
            self._make_pool(pool)
        self._daemon("rgw", ["radosgw", "-f", "-c", str(self.conf), "-n", "client.rgw.bench",
                             "--rgw-frontends", f"beast endpoint={LOOPBACK}:{self.port}",
                             "--rgw-data", str(self.workdir / "rgw")])
        _wait_http(self.base_url + "/", self.processes["rgw"], self.log_path,
                   timeout=RGW_READY_TIMEOUT_SECONDS)
        self._step("S3 user", ["radosgw-admin", "-c", str(self.conf), "user", "create",
                               "--uid", RGW_USER, "--display-name", RGW_USER,
                               "--access-key", ROOT_ACCESS_KEY, "--secret", ROOT_SECRET_KEY])

    def _step(self, what: str, command: list[str],
              timeout: float = CEPH_STEP_TIMEOUT_SECONDS) -> str:
        """Run one setup command to completion; a ServerError naming the step otherwise."""
        try:
            result = subprocess.run(command, capture_output=True, text=True, check=False,
                                    timeout=timeout, env=dict(os.environ, CEPH_CONF=str(self.conf)))
        except subprocess.TimeoutExpired as exc:
            raise ServerError(f"RGW setup: {what} did not finish within {timeout:.0f} s: "
                              f"{' '.join(command)}\n{self._daemon_logs()}") from exc
        if result.returncode != 0:
            raise ServerError(f"RGW setup: {what} failed (exit {result.returncode}): "
                              f"{' '.join(command)}\n{(result.stderr or result.stdout)[-2000:]}"
                              f"\n{self._daemon_logs()}")
        return result.stdout

    def _ceph(self, what: str, *args: str) -> str:
        return self._step(what, ["ceph", "-c", str(self.conf), "--connect-timeout", "10", *args])

    def _make_pool(self, pool: str) -> None:
        """Create one of radosgw's pools and wait (through a write) until it takes I/O."""
        self._ceph(f"pool {pool}", "osd", "pool", "create", pool)
        self._ceph(f"pool {pool}", "osd", "pool", "application", "enable", pool, "rgw")
        rados = ["rados", "-c", str(self.conf), "-p", pool]
        self._step(f"first write to pool {pool}", [*rados, "put", "bench-ready", os.devnull])
        self._step(f"pool {pool}", [*rados, "rm", "bench-ready"])

    def _daemon(self, name: str, command: list[str]) -> None:
        with open(self.workdir / "log" / f"{name}.out", "ab") as out:
            self.processes[name] = subprocess.Popen(
                command, cwd=self.workdir, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, env=dict(os.environ, CEPH_CONF=str(self.conf)))

    def _wait_osd_up(self) -> None:
        """Poll `ceph osd stat` until the OSD is up, with a deadline."""
        deadline = time.monotonic() + OSD_UP_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise ServerError(f"RGW setup: ceph {name} exited with "
                                      f"{process.returncode}\n{self._daemon_logs()}")
            stat = self._ceph("osd stat", "osd", "stat", "--format", "json")
            if json.loads(stat).get("num_up_osds") == 1:
                return
            time.sleep(0.5)
        raise ServerError(f"RGW setup: the OSD was not up within {OSD_UP_TIMEOUT_SECONDS:.0f} s"
                          f"\n{self._daemon_logs()}")

    def _daemon_logs(self) -> str:
        logs = sorted((self.workdir / "log").glob("*"))
        return "\n".join(f"--- {log.name}:\n{_tail(log)[-800:]}" for log in logs)

    def stop(self) -> None:
        """SIGKILL: the cluster is thrown away, and a memstore OSD stopped cleanly would
        first write every object it holds to its directory."""
        for process in reversed(list(self.processes.values())):
            if process.poll() is None:
                process.kill()
                process.wait()

    def cpu_seconds(self) -> float:
        """radosgw's, the OSD's and the monitor's together: a request costs all three."""
        pids = [process.pid for process in self.processes.values()]
        return cpu_seconds(*pids) if pids else 0.0
