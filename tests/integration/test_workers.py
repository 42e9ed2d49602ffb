"""A node with two worker processes ([server] workers = 2): both serve the one port, a
change answered by one is seen by the next request in the other, concurrent writers
through both lose nothing, a dead worker is replaced and SIGTERM stops them all.

Requests are pinned to a worker by keeping one connection per worker: a keep-alive
connection is served by the process that accepted it, and GET /admin/info says which."""

from __future__ import annotations

import concurrent.futures
import datetime
import hashlib
import http.client
import json
import os
import signal
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import urllib3

from objstore.http import sigv4
from tests.integration.admin_client import AdminClient
from tests.integration.conftest import BACKENDS, make_client, running_daemon
from tests.integration.daemon import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Daemon
from tests.integration.worker_pins import pinned_admins, s3_call

WORKERS = 2


@pytest.fixture(scope="module", params=BACKENDS)
def daemon(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Daemon]:
    node = Daemon(tmp_path_factory.mktemp(f"workers-{request.param}"), backend=request.param,
                  workers=WORKERS)
    with running_daemon(request, node):
        yield node


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def test_every_worker_serves_the_port_and_answers_health_alike(daemon: Daemon) -> None:
    admins = pinned_admins(daemon)
    pids = {admin.ok("GET", "/info")["worker"]["pid"] for admin in admins.values()}
    assert len(pids) == WORKERS and daemon.process is not None
    assert daemon.process.pid not in pids  # the parent never serves
    for admin in admins.values():
        assert admin.ok("GET", "/info")["workers"] == WORKERS
        reply = admin.http.request("GET", "/admin/health")
        assert (reply.status, reply.data) == (200, b'{"status": "ok"}')


def test_a_revoked_credential_fails_at_once_in_every_worker(daemon: Daemon) -> None:
    admins = pinned_admins(daemon)
    first, second = admins[0], admins[1]
    user = first.ok("POST", "/users", {"username": unique("user")}, 201)
    grant = first.ok("POST", "/grants", {"name": unique("grant"), "document": {
        "Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Action": ["s3:ListAllMyBuckets"], "Resource": ["*"]}]}}, 201)
    first.ok("PUT", f"/users/{user['user_id']}/grants/{grant['grant_id']}", None, 204)
    credential = first.ok("POST", f"/users/{user['user_id']}/credentials", {}, 201)
    keys = credential["access_key_id"], credential["secret_access_key"]
    for admin in admins.values():  # both workers cache the credential and its policies
        assert s3_call(admin, "GET", "/", *keys).status == 200

    second.ok("DELETE", f"/users/{user['user_id']}/grants/{grant['grant_id']}", None, 204)
    for admin in admins.values():
        reply = s3_call(admin, "GET", "/", *keys)
        assert reply.status == 403 and b"AccessDenied" in reply.data
    first.ok("PUT", f"/users/{user['user_id']}/grants/{grant['grant_id']}", None, 204)
    for admin in admins.values():
        assert s3_call(admin, "GET", "/", *keys).status == 200

    first.ok("DELETE", f"/credentials/{keys[0]}", None, 204)
    for admin in (second, first):
        reply = s3_call(admin, "GET", "/", *keys)
        assert reply.status == 403 and b"InvalidAccessKeyId" in reply.data


def test_a_bucket_change_is_seen_by_the_other_worker_at_once(daemon: Daemon) -> None:
    admins = pinned_admins(daemon)
    root = ROOT_ACCESS_KEY, ROOT_SECRET_KEY
    bucket = unique("coherent")
    assert s3_call(admins[0], "PUT", f"/{bucket}", *root).status == 200
    assert s3_call(admins[1], "HEAD", f"/{bucket}", *root).status == 200  # cached by worker 1
    versioning = (b'<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
                  b"<Status>Enabled</Status></VersioningConfiguration>")
    assert s3_call(admins[0], "PUT", f"/{bucket}?versioning", *root, body=versioning
                   ).status == 200
    for body in (b"one", b"two"):  # written by the worker that cached the bucket
        assert s3_call(admins[1], "PUT", f"/{bucket}/k", *root, body=body).status == 200
    listing = s3_call(admins[1], "GET", f"/{bucket}?versions", *root)
    assert listing.data.count(b"<Version>") == 2, listing.data
    assert s3_call(admins[1], "DELETE", f"/{bucket}/k", *root).status == 204
    assert s3_call(admins[0], "GET", f"/{bucket}?versions", *root).data.count(
        b"<DeleteMarker>") == 1


def test_a_write_answered_by_one_worker_is_read_by_the_other_at_once(daemon: Daemon) -> None:
    # Both workers keep object records in memory for GET and HEAD ([server.cache] objects).
    admins = pinned_admins(daemon)
    root = ROOT_ACCESS_KEY, ROOT_SECRET_KEY
    bucket = unique("readafter")
    assert s3_call(admins[0], "PUT", f"/{bucket}", *root).status == 200
    path = f"/{bucket}/k"
    for round_ in range(5):
        writer, reader = admins[round_ % 2], admins[(round_ + 1) % 2]
        body = f"round {round_}".encode()
        for admin in admins.values():  # both cache the current record (or its absence)
            s3_call(admin, "HEAD", path, *root)
        assert s3_call(writer, "PUT", path, *root, body=body).status == 200
        got = s3_call(reader, "GET", path, *root)
        assert (got.status, got.data) == (200, body)
        head = s3_call(reader, "HEAD", path, *root)
        assert head.headers["ETag"] == f'"{hashlib.md5(body).hexdigest()}"'
    tagging = (b'<Tagging xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><TagSet><Tag>'
               b"<Key>a</Key><Value>b</Value></Tag></TagSet></Tagging>")
    assert s3_call(admins[1], "GET", path, *root).headers.get("x-amz-tagging-count") is None
    assert s3_call(admins[0], "PUT", f"{path}?tagging", *root, body=tagging).status == 200
    assert s3_call(admins[1], "GET", path, *root).headers["x-amz-tagging-count"] == "1"
    assert s3_call(admins[0], "DELETE", path, *root).status == 204
    for admin in admins.values():
        assert s3_call(admin, "GET", path, *root).status == 404


def test_parallel_writers_through_both_workers_lose_nothing(daemon: Daemon) -> None:
    bucket = unique("parallel")
    make_client(daemon.endpoint).create_bucket(Bucket=bucket)  # type: ignore[attr-defined]
    # Four kept-alive connections to each worker, one per writer thread.
    clients = [pinned[index] for pinned in (pinned_admins(daemon) for _ in range(4))
               for index in range(WORKERS)]

    def write(writer: int) -> list[str]:
        admin = clients[writer]
        keys = []
        for n in range(40):
            key = f"w{writer}/k{n}"
            reply = s3_call(admin, "PUT", f"/{bucket}/{key}", ROOT_ACCESS_KEY, ROOT_SECRET_KEY,
                            body=key.encode())
            assert reply.status == 200, reply.data
            keys.append(key)
        return keys

    with concurrent.futures.ThreadPoolExecutor(8) as workers:
        written = sorted(k for keys in workers.map(write, range(8)) for k in keys)
    s3 = make_client(daemon.endpoint)
    listed = sorted(entry["Key"] for page in s3.get_paginator(  # type: ignore[attr-defined]
        "list_objects_v2").paginate(Bucket=bucket) for entry in page.get("Contents", []))
    assert listed == written and len(written) == 320
    for key in written[::37]:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()  # type: ignore[attr-defined]
        assert body == key.encode()


def worker_pids(admins: dict[int, AdminClient]) -> dict[int, int]:
    return {index: admin.ok("GET", "/info")["worker"]["pid"] for index, admin in admins.items()}


BURST = 32


def _ask_worker(sock: socket.socket, daemon: Daemon) -> None:
    """Send GET /admin/info (signed, kept alive) on the connected `sock`."""
    url = f"{daemon.endpoint}/admin/info"
    headers = sigv4.sign_headers("GET", url, {}, hashlib.sha256(b"").hexdigest(),
                                 ROOT_ACCESS_KEY, ROOT_SECRET_KEY, "us-east-1",
                                 datetime.datetime.now(datetime.UTC))
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    sock.sendall(f"GET /admin/info HTTP/1.1\r\n{head}\r\n".encode())  # headers: Host too


def _worker_answering(sock: socket.socket) -> int:
    """The worker index in the answer to `_ask_worker` on `sock`."""
    response = http.client.HTTPResponse(sock)
    response.begin()
    assert response.status == 200
    index = int(json.loads(response.read())["worker"]["index"])
    sock.close()
    return index


def test_a_burst_of_connections_is_spread_over_the_workers(daemon: Daemon) -> None:
    """A client that opens its pool at once (32 kept-alive connections with a request each,
    as ab -k or an SDK's pool) gets both workers, not the one that woke first (twisted.web
    accepts up to 100 connections per wake-up; objstore/http/shared_accept.py). The workers
    are stopped while the connections and their requests queue, so that the burst is whole
    when they wake."""
    pids = [admin.ok("GET", "/info")["worker"]["pid"] for admin in pinned_admins(daemon).values()]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        sockets = [socket.create_connection(("127.0.0.1", daemon.port), timeout=30)
                   for _ in range(BURST)]
        for sock in sockets:
            _ask_worker(sock, daemon)
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    counts = {index: 0 for index in range(WORKERS)}
    for sock in sockets:
        counts[_worker_answering(sock)] += 1
    # Without the spread one worker takes all 32; with it, a share each even on a busy
    # machine where one worker wakes well after the other.
    assert min(counts.values()) >= BURST // 8, counts


def test_a_dead_worker_is_replaced(daemon: Daemon) -> None:
    before = worker_pids(pinned_admins(daemon))
    os.kill(before[1], signal.SIGKILL)
    deadline = time.monotonic() + 30
    while True:
        try:
            after = worker_pids(pinned_admins(daemon))
            if after[1] != before[1]:
                break
        except (AssertionError, urllib3.exceptions.HTTPError):
            pass
        assert time.monotonic() < deadline, "worker 1 was not restarted"
        time.sleep(0.2)
    assert after[0] == before[0]
    assert "worker 1 (pid" in daemon.log_path.read_text()


def test_sigterm_stops_every_worker(tmp_path: Path) -> None:
    node = Daemon(tmp_path, workers=WORKERS)
    node.start()
    try:
        pids = list(worker_pids(pinned_admins(node)).values())
        assert node.stop(signal.SIGTERM) in (0, -signal.SIGTERM)  # twistd re-raises it
        for pid in pids:
            assert not os.path.exists(f"/proc/{pid}") or _is_zombie(pid)
        log = node.log_path.read_text()
        assert log.count("stopped (exit code 0)") == WORKERS
    finally:
        node.cleanup()


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_an_iam_change_whose_client_left_still_reaches_every_worker(daemon: Daemon) -> None:
    admins = pinned_admins(daemon)
    user = admins[0].ok("POST", "/users", {"username": unique("leaver")}, 201)
    credential = admins[0].ok("POST", f"/users/{user['user_id']}/credentials", {}, 201)
    keys = credential["access_key_id"], credential["secret_access_key"]
    for admin in admins.values():  # cached by both workers (authenticated, no grant: 403)
        assert b"AccessDenied" in s3_call(admin, "GET", "/", *keys).data
    url = f"{daemon.endpoint}/admin/credentials/{keys[0]}"
    headers = sigv4.sign_headers("DELETE", url, {}, hashlib.sha256(b"").hexdigest(),
                                 ROOT_ACCESS_KEY, ROOT_SECRET_KEY, "us-east-1",
                                 datetime.datetime.now(datetime.UTC))
    with socket.create_connection(("127.0.0.1", daemon.port)) as raw:
        lines = [f"DELETE /admin/credentials/{keys[0]} HTTP/1.1",
                 *(f"{k}: {v}" for k, v in headers.items()), "Content-Length: 0", "", ""]
        raw.sendall("\r\n".join(lines).encode())
    # The client is gone before any answer; the change must still be made and announced.
    deadline = time.monotonic() + 10
    while keys[0] in admins[1].get(f"/users/{user['user_id']}/credentials").body.decode():
        assert time.monotonic() < deadline, "the credential was not deleted"
        time.sleep(0.05)
    for admin in admins.values():
        assert b"InvalidAccessKeyId" in s3_call(admin, "GET", "/", *keys).data


def test_a_setting_changed_through_another_worker_reaches_the_lifecycle_leader(
        daemon: Daemon) -> None:
    admins = pinned_admins(daemon)
    admins[1].ok("PUT", "/settings/lifecycle_evaluation_interval", {"value": 7})
    try:
        deadline = time.monotonic() + 15
        while not any("[worker 0]" in line and "evaluating every 7s" in line
                      for line in daemon.log_path.read_text().splitlines()):
            assert time.monotonic() < deadline, "worker 0 never re-read the interval"
            time.sleep(0.1)
    finally:
        admins[1].ok("DELETE", "/settings/lifecycle_evaluation_interval", status=204)
