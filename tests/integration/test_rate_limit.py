"""Rate limiting end to end ([server.limits] rate_limit_*): the request after the burst gets
503 SlowDown with Retry-After: 5 (S3 XML, or JSON on the admin API), /admin/health is never
limited, and requests pass again once the bucket refills.

Two daemons, one per limit, because the limits are told apart by what they key on. The
per-IP daemon is reached from several loopback source addresses (127.0.0.0/8 is all local),
one per test, so tests do not share buckets; the per-credential daemon gets extra credentials
written to its metadata database.
"""

from __future__ import annotations

import contextlib
import datetime
import http.client
import os
import socket
import time
import uuid
from collections.abc import Iterator

import pytest
import urllib3
from lxml import etree

from objstore.config import Storage
from objstore.http import sigv4
from objstore.meta.records import CredentialRecord
from objstore.meta.store import open_sync_store
from tests.integration.conftest import running_daemon
from tests.integration.daemon import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Daemon

# One token per second: six back-to-back requests on loopback never see a refill between them.
RATE_PER_SECOND = 1
BURST = 5
REFILL_DEADLINE_SECONDS = 5 / RATE_PER_SECOND

Credential = tuple[str, str]
ROOT: Credential = (ROOT_ACCESS_KEY, ROOT_SECRET_KEY)


def limited_daemon(tmp_path_factory: pytest.TempPathFactory, prefix: str) -> Daemon:
    limits = (f"[server.limits]\nrate_limit_{prefix}per_second = {RATE_PER_SECOND}\n"
              f"rate_limit_{prefix}burst = {BURST}\n")
    return Daemon(tmp_path_factory.mktemp(f"ratelimit-{prefix or 'credential'}"),
                  extra_config=limits)


@pytest.fixture(scope="module")
def per_ip(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Daemon]:
    with running_daemon(request, limited_daemon(tmp_path_factory, "per_ip_")) as node:
        yield node


@pytest.fixture(scope="module")
def per_credential(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[Daemon]:
    with running_daemon(request, limited_daemon(tmp_path_factory, "")) as node:
        yield node


def new_credential(node: Daemon) -> Credential:
    """A fresh credential of the root user, written straight into the daemon's database."""
    store = open_sync_store(Storage(data_dir=str(node.data_dir)))
    try:
        root = next(user for user in store.list_users() if user.is_root)
        access_key = "OSRL" + uuid.uuid4().hex[:16].upper()
        secret_key = uuid.uuid4().hex + uuid.uuid4().hex
        assert store.create_credential(
            CredentialRecord(access_key, secret_key, root.user_id, created_at=time.time()))
    finally:
        store.close()
    return access_key, secret_key


class Client:
    """Plain HTTP from one loopback source address, signed with one credential (or none)."""

    def __init__(self, node: Daemon, source_ip: str = "127.0.0.1",
                 credential: Credential | None = ROOT) -> None:
        self._node = node
        self._credential = credential
        self._pool = urllib3.HTTPConnectionPool(
            "127.0.0.1", node.port, retries=False, timeout=10.0, source_address=(source_ip, 0))

    def get(self, path: str) -> urllib3.BaseHTTPResponse:
        headers: dict[str, str] = {}
        if self._credential is not None:
            headers = sigv4.sign_headers(
                "GET", self._node.endpoint + path, {}, sigv4.UNSIGNED_PAYLOAD,
                *self._credential, "us-east-1", datetime.datetime.now(datetime.UTC))
        return self._pool.request("GET", path, headers=headers)

    def statuses(self, path: str, count: int) -> list[int]:
        return [self.get(path).status for _ in range(count)]


def s3_error_code(response: urllib3.BaseHTTPResponse) -> str:
    document = etree.fromstring(response.data)
    assert document.findtext("RequestId") == response.headers["x-amz-request-id"]
    return str(document.findtext("Code"))


def assert_slow_down(response: urllib3.BaseHTTPResponse) -> None:
    assert response.status == 503, response.data
    assert response.headers["Retry-After"] == "5"
    assert s3_error_code(response) == "SlowDown"


def wait_until_served(client: Client, path: str) -> float:
    """Seconds until `path` stops answering 503; refused polls take no token."""
    started = time.monotonic()
    while time.monotonic() - started < REFILL_DEADLINE_SECONDS:
        if client.get(path).status != 503:
            return time.monotonic() - started
        time.sleep(0.1 / RATE_PER_SECOND)
    raise AssertionError(f"still limited after {REFILL_DEADLINE_SECONDS} s")


# -- per client IP ---------------------------------------------------------------------------


def test_sixth_request_from_an_address_slows_down(per_ip: Daemon) -> None:
    client = Client(per_ip, "127.0.0.2")
    assert client.statuses("/", BURST) == [200] * BURST
    assert_slow_down(client.get("/"))


def test_address_limit_applies_before_authentication(per_ip: Daemon) -> None:
    anonymous = Client(per_ip, "127.0.0.3", credential=None)
    assert anonymous.statuses("/", BURST) == [403] * BURST
    assert_slow_down(anonymous.get("/"))
    # The same credential from another address is not limited: the key is the address.
    assert Client(per_ip, "127.0.0.4").get("/").status == 200


def test_admin_api_shares_the_address_limit_but_health_is_never_limited(per_ip: Daemon) -> None:
    client = Client(per_ip, "127.0.0.5")
    assert client.statuses("/", BURST) == [200] * BURST
    response = client.get("/admin/info")
    assert response.status == 503
    assert response.headers["Retry-After"] == "5"
    assert response.headers["Content-Type"] == "application/json"
    assert response.json()["error"] == "SlowDown"
    assert client.statuses("/admin/health", 3 * BURST) == [200] * (3 * BURST)


def test_address_is_served_again_after_a_refill(per_ip: Daemon) -> None:
    client = Client(per_ip, "127.0.0.6")
    assert client.statuses("/", BURST) == [200] * BURST
    assert_slow_down(client.get("/"))
    assert wait_until_served(client, "/") >= 0.5 / RATE_PER_SECOND
    assert_slow_down(client.get("/"))  # one token came back, not the whole burst


# -- per credential --------------------------------------------------------------------------


def test_sixth_request_of_a_credential_slows_down_other_credentials_do_not(
    per_credential: Daemon,
) -> None:
    first, second = new_credential(per_credential), new_credential(per_credential)
    client = Client(per_credential, credential=first)
    assert client.statuses("/", BURST) == [200] * BURST
    assert_slow_down(client.get("/"))
    # Same address, another credential: served, so the key is the credential.
    assert Client(per_credential, credential=second).statuses("/", BURST) == [200] * BURST


def test_credential_limit_counts_only_authenticated_requests(per_credential: Daemon) -> None:
    anonymous = Client(per_credential, credential=None)
    assert anonymous.statuses("/", 2 * BURST) == [403] * (2 * BURST)
    forged = Client(per_credential, credential=(new_credential(per_credential)[0], "wrong"))
    assert forged.statuses("/", 2 * BURST) == [403] * (2 * BURST)


def test_admin_api_shares_the_credential_limit(per_credential: Daemon) -> None:
    client = Client(per_credential, credential=new_credential(per_credential))
    assert client.get("/admin/info").status == 200
    assert client.statuses("/", BURST - 1) == [200] * (BURST - 1)
    response = client.get("/admin/info")
    assert (response.status, response.json()["error"]) == (503, "SlowDown")
    assert response.headers["Retry-After"] == "5"
    assert client.get("/admin/health").status == 200


def test_credential_is_served_again_after_a_refill(per_credential: Daemon) -> None:
    client = Client(per_credential, credential=new_credential(per_credential))
    assert client.statuses("/", BURST) == [200] * BURST
    assert_slow_down(client.get("/"))
    wait_until_served(client, "/")


# -- a node of two worker processes ------------------------------------------------------------
# The limits are per node: a token taken through one worker is gone for the other.

WORKERS = 2
# Slow refills (one token every 10 s): a dozen requests never see one between them.
NODE_RATE_PER_SECOND = 0.1
NODE_CREDENTIAL_BURST = 5
NODE_ADDRESS_BURST = 10


@pytest.fixture(scope="module")
def two_workers(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[Daemon]:
    limits = ("[server.limits]\n"
              f"rate_limit_per_second = {NODE_RATE_PER_SECOND}\n"
              f"rate_limit_burst = {NODE_CREDENTIAL_BURST}\n"
              f"rate_limit_per_ip_per_second = {NODE_RATE_PER_SECOND}\n"
              f"rate_limit_per_ip_burst = {NODE_ADDRESS_BURST}\n")
    node = Daemon(tmp_path_factory.mktemp("ratelimit-workers"), extra_config=limits,
                  workers=WORKERS)
    with running_daemon(request, node):
        yield node


def accepting_pid(node: Daemon, sock: socket.socket, timeout: float = 10.0) -> int:
    """The process that accepted the connection `sock`, found in /proc (the server side's
    socket inode among the processes' descriptors): it costs no request, hence no token."""
    client_port = sock.getsockname()[1]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open("/proc/net/tcp") as table:
            inodes = [fields[9] for fields in (line.split() for line in list(table)[1:])
                      if int(fields[1].split(":")[1], 16) == node.port
                      and int(fields[2].split(":")[1], 16) == client_port]
        target = f"socket:[{inodes[0]}]" if inodes and inodes[0] != "0" else None
        for pid in node.pids() if target else []:
            with contextlib.suppress(OSError):
                if any(os.readlink(f"/proc/{pid}/fd/{fd}") == target
                       for fd in os.listdir(f"/proc/{pid}/fd")):
                    return pid
        time.sleep(0.01)  # not accepted yet
    raise AssertionError(f"no worker accepted the connection from port {client_port}")


class PinnedConnection:
    """A kept-alive connection from `source_ip` that one worker accepted; its requests are
    signed with `credential` (or not at all)."""

    def __init__(self, node: Daemon, connection: http.client.HTTPConnection,
                 credential: Credential | None) -> None:
        self._node = node
        self._connection = connection
        self._credential = credential
        assert connection.sock is not None
        self._sock = connection.sock

    def get(self, path: str) -> tuple[int, str]:
        """(status, S3 error code or "")."""
        assert self._connection.sock is self._sock, "the server closed the pinned connection"
        headers: dict[str, str] = {}
        if self._credential is not None:
            headers = sigv4.sign_headers(
                "GET", self._node.endpoint + path, {}, sigv4.UNSIGNED_PAYLOAD,
                *self._credential, "us-east-1", datetime.datetime.now(datetime.UTC))
        self._connection.request("GET", path, headers=headers)
        response = self._connection.getresponse()
        body = response.read()
        if response.status < 300:
            return response.status, ""
        if response.status == 503:
            assert response.headers["Retry-After"] == "5"
        return response.status, str(etree.fromstring(body).findtext("Code"))

    def close(self) -> None:
        self._connection.close()


@contextlib.contextmanager
def one_connection_per_worker(node: Daemon, source_ip: str, credential: Credential | None
                              ) -> Iterator[list[PinnedConnection]]:
    pinned: dict[int, PinnedConnection] = {}
    deadline = time.monotonic() + 30  # the kernel spreads new connections over the workers
    try:
        while len(pinned) < WORKERS and time.monotonic() < deadline:
            connection = http.client.HTTPConnection("127.0.0.1", node.port, timeout=10,
                                                    source_address=(source_ip, 0))
            connection.connect()
            assert connection.sock is not None
            pid = accepting_pid(node, connection.sock)
            if pid in pinned:
                connection.close()
            else:
                pinned[pid] = PinnedConnection(node, connection, credential)
        assert len(pinned) == WORKERS, "the workers did not all accept a connection"
        yield list(pinned.values())
    finally:
        for connection in pinned.values():
            connection.close()


def test_a_credential_limit_holds_across_the_workers_of_a_node(two_workers: Daemon) -> None:
    credential = new_credential(two_workers)
    with one_connection_per_worker(two_workers, "127.0.0.21", credential) as (first, second):
        answers = [(first, second)[index % 2].get("/") for index in range(NODE_CREDENTIAL_BURST)]
        assert answers == [(200, "")] * NODE_CREDENTIAL_BURST
        # Each worker has served fewer requests than the burst: only a node-wide budget
        # refuses now.
        assert first.get("/") == (503, "SlowDown")
        assert second.get("/") == (503, "SlowDown")


def test_an_address_limit_holds_across_the_workers_of_a_node(two_workers: Daemon) -> None:
    with one_connection_per_worker(two_workers, "127.0.0.22", None) as (first, second):
        answers = [(first, second)[index % 2].get("/") for index in range(NODE_ADDRESS_BURST)]
        assert answers == [(403, "AccessDenied")] * NODE_ADDRESS_BURST  # passed the limit
        assert first.get("/") == (503, "SlowDown")
        assert second.get("/") == (503, "SlowDown")
