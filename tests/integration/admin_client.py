"""A small SigV4-signing admin API client for integration tests (urllib3 underneath)."""

from __future__ import annotations

import datetime
import hashlib
import json
from dataclasses import dataclass
from typing import Any

import urllib3

from objstore.http import sigv4
from tests.integration.daemon import ROOT_ACCESS_KEY, ROOT_SECRET_KEY

_HTTP = urllib3.PoolManager(retries=False, timeout=30.0)


@dataclass
class Reply:
    status: int
    body: bytes
    headers: Any

    @property
    def json(self) -> Any:
        assert self.headers.get("Content-Type") == "application/json", (self.status, self.body)
        return json.loads(self.body)

    @property
    def error(self) -> str:
        return str(self.json["error"])


@dataclass
class AdminClient:
    endpoint: str
    access_key: str = ROOT_ACCESS_KEY
    secret_key: str = ROOT_SECRET_KEY
    http: Any = None  # a connection pool of its own (e.g. pinned to one worker process)

    def call(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None
             ) -> Reply:
        data = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
        url = f"{self.endpoint}/admin{path}"
        headers = {"content-type": "application/json"} if data else {}
        headers.update(sigv4.sign_headers(
            method, url, headers, hashlib.sha256(data).hexdigest(), self.access_key,
            self.secret_key, "us-east-1", datetime.datetime.now(datetime.UTC)))
        # A connection pool of one host takes the path (a full URL would go out as the
        # absolute-form request target).
        target = url if self.http is None else url[len(self.endpoint):]
        response = (self.http or _HTTP).request(method, target, body=data or None,
                                                headers=headers)
        return Reply(response.status, response.data, response.headers)

    def get(self, path: str) -> Reply:
        return self.call("GET", path)

    def post(self, path: str, body: Any = None) -> Reply:
        return self.call("POST", path, body)

    def put(self, path: str, body: Any = None) -> Reply:
        return self.call("PUT", path, body)

    def delete(self, path: str) -> Reply:
        return self.call("DELETE", path)

    def ok(self, method: str, path: str, body: Any = None, status: int = 200) -> Any:
        """Call and insist on `status`; the decoded JSON (None for 204)."""
        reply = self.call(method, path, body)
        assert reply.status == status, (method, path, reply.status, reply.body)
        return None if status == 204 else reply.json

    def as_user(self, access_key: str, secret_key: str) -> AdminClient:
        return AdminClient(self.endpoint, access_key, secret_key, self.http)
