"""Requests pinned to one worker process of a daemon with several ([server] workers):
one kept-alive connection per worker, since a keep-alive connection is served by the
process that accepted it and GET /admin/info names that worker. Owns finding one such
connection per worker and sending SigV4-signed S3 requests on it."""

from __future__ import annotations

import datetime
import hashlib
import time

import urllib3

from objstore.http import sigv4
from tests.integration.admin_client import AdminClient
from tests.integration.daemon import ROOT_ACCESS_KEY, ROOT_SECRET_KEY, Daemon


def pinned_admins(daemon: Daemon, deadline_seconds: float = 30.0) -> dict[int, AdminClient]:
    """One root admin client per worker index of `daemon`, each on its own kept-alive
    connection (the kernel spreads new connections over the workers' listeners)."""
    found: dict[int, AdminClient] = {}
    deadline = time.monotonic() + deadline_seconds
    while time.monotonic() < deadline:
        pool = urllib3.HTTPConnectionPool("127.0.0.1", daemon.port, maxsize=1, block=True,
                                          retries=False, timeout=30.0)
        admin = AdminClient(daemon.endpoint, http=pool)
        index = admin.ok("GET", "/info")["worker"]["index"]
        if index in found:
            pool.close()
        else:
            found[index] = admin
        if len(found) == daemon.workers:
            return found
    raise AssertionError(f"only workers {sorted(found)} of {daemon.endpoint} answered")


def s3_call(admin: AdminClient, method: str, path: str, access_key: str = ROOT_ACCESS_KEY,
            secret_key: str = ROOT_SECRET_KEY, body: bytes = b"") -> urllib3.BaseHTTPResponse:
    """A SigV4-signed S3 request on the admin client's pinned connection (its worker)."""
    url = admin.endpoint + path
    headers = sigv4.sign_headers(method, url, {}, hashlib.sha256(body).hexdigest(),
                                 access_key, secret_key, "us-east-1",
                                 datetime.datetime.now(datetime.UTC))
    response: urllib3.BaseHTTPResponse = admin.http.request(method, path, body=body or None,
                                                            headers=headers)
    return response
