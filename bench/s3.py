"""The few S3 calls the harness makes itself, signed with objstore's own SigV4 code.

This module owns presigned request paths for wrk (one URL per request, all signed for the
same Host wrk will send), header-signed curl arguments for the large objects, bucket
creation, and the timed ListObjectsV2 page walk. It talks only to the loopback daemon.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import urllib3
from lxml import etree

from objstore.http import sigv4

REGION = "us-east-1"
PRESIGN_EXPIRES_SECONDS = 3600
_S3_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


@dataclass(frozen=True)
class S3Target:
    base_url: str
    access_key: str
    secret_key: str

    def presigned_path(self, method: str, bucket: str, key: str,
                       now: datetime.datetime) -> str:
        """Path and query of a presigned URL (wrk adds scheme and Host)."""
        url = sigv4.presign_url(method, f"{self.base_url}/{bucket}/{quote(key)}",
                                self.access_key, self.secret_key, REGION, now,
                                PRESIGN_EXPIRES_SECONDS)
        parts = urlsplit(url)
        return f"{parts.path}?{parts.query}"

    def presigned_paths(self, method: str, bucket: str, keys: Iterator[str]) -> Iterator[str]:
        now = datetime.datetime.now(datetime.UTC)
        for key in keys:
            yield self.presigned_path(method, bucket, key, now)

    def signed_headers(self, method: str, path_and_query: str,
                       payload_sha256: str = sigv4.UNSIGNED_PAYLOAD,
                       headers: Mapping[str, str] | None = None) -> dict[str, str]:
        """The headers that sign a request; `headers` (e.g. x-amz-copy-source, which the
        server wants signed) are signed too and must be sent as given."""
        return sigv4.sign_headers(method, self.base_url + path_and_query, headers or {},
                                  payload_sha256, self.access_key, self.secret_key, REGION,
                                  datetime.datetime.now(datetime.UTC))


class S3Session:
    """One keep-alive connection to the daemon for sequential signed requests."""

    def __init__(self, target: S3Target) -> None:
        self.target = target
        parts = urlsplit(target.base_url)
        self._pool = urllib3.HTTPConnectionPool(parts.hostname or "127.0.0.1", parts.port,
                                                maxsize=1, retries=False, timeout=60.0)

    def request(self, method: str, path_and_query: str) -> urllib3.BaseHTTPResponse:
        headers = self.target.signed_headers(method, path_and_query)
        return self._pool.request(method, path_and_query, headers=headers)

    def admin(self, method: str, path: str, body: Any = None) -> Any:
        """A signed admin API call with a JSON body; its JSON answer (None when empty)."""
        data = b"" if body is None else json.dumps(body).encode()
        headers = self.target.signed_headers(method, path, hashlib.sha256(data).hexdigest())
        if data:
            headers["Content-Type"] = "application/json"
        response = self._pool.request(method, path, body=data or None, headers=headers)
        if response.status >= 300:
            raise RuntimeError(f"{method} {path}: {response.status} {response.data[:300]!r}")
        return json.loads(response.data) if response.data else None

    def create_bucket(self, bucket: str) -> None:
        response = self.request("PUT", f"/{bucket}")
        if response.status != 200:
            raise RuntimeError(f"CreateBucket {bucket}: {response.status} {response.data!r}")

    def enable_versioning(self, bucket: str) -> None:
        body = (b'<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
                b"<Status>Enabled</Status></VersioningConfiguration>")
        path = f"/{bucket}?versioning"
        headers = self.target.signed_headers("PUT", path, hashlib.sha256(body).hexdigest())
        response = self._pool.request("PUT", path, body=body, headers=headers)
        if response.status != 200:
            raise RuntimeError(f"PutBucketVersioning {bucket}: {response.status} "
                               f"{response.data[:300]!r}")

    def put(self, bucket: str, key: str, body: bytes) -> None:
        path = f"/{bucket}/{quote(key)}"
        headers = self.target.signed_headers("PUT", path)
        response = self._pool.request("PUT", path, body=body, headers=headers)
        if response.status != 200:
            raise RuntimeError(f"PutObject {bucket}/{key}: {response.status}")

    def timed_delete_objects(self, bucket: str, keys: list[str]) -> float:
        """Milliseconds of one DeleteObjects (quiet) of `keys`, signing excluded; raises
        unless it answered 200 without an <Error>."""
        body = ("<Delete><Quiet>true</Quiet>" + "".join(
            f"<Object><Key>{key}</Key></Object>" for key in keys) + "</Delete>").encode()
        path = f"/{bucket}?delete"
        md5 = base64.b64encode(hashlib.md5(body).digest()).decode()  # noqa: S324 (S3 asks)
        headers = self.target.signed_headers("POST", path, hashlib.sha256(body).hexdigest(),
                                             {"Content-MD5": md5})
        headers["Content-MD5"] = md5
        started = time.perf_counter()
        response = self._pool.request("POST", path, body=body, headers=headers)
        elapsed = (time.perf_counter() - started) * 1e3
        if response.status != 200 or b"<Error>" in response.data:
            raise RuntimeError(f"DeleteObjects: {response.status} {response.data[:300]!r}")
        return elapsed

    def list_keys(self, bucket: str, prefix: str, max_pages: int = 1000) -> Iterator[str]:
        """Every key under `prefix` (ListObjectsV2, bounded by `max_pages` pages)."""
        token: str | None = None
        for _ in range(max_pages):
            document = self._list_page(bucket, prefix, token)
            for element in document.findall(f"{_S3_NS}Contents/{_S3_NS}Key"):
                yield str(element.text or "")
            token = document.findtext(f"{_S3_NS}NextContinuationToken")
            if document.findtext(f"{_S3_NS}IsTruncated") != "true" or not token:
                return

    def _list_page(self, bucket: str, prefix: str, token: str | None) -> Any:
        query = "list-type=2&max-keys=1000&prefix=" + quote(prefix, safe="")
        if token is not None:
            query += "&continuation-token=" + quote(token, safe="")
        response = self.request("GET", f"/{bucket}?{query}")
        if response.status != 200:
            raise RuntimeError(f"ListObjectsV2: {response.status} {response.data[:300]!r}")
        return etree.fromstring(response.data)

    def timed_list_walk(self, bucket: str, max_pages: int, deadline_seconds: float
                        ) -> tuple[list[float], int]:
        """Milliseconds of each ListObjectsV2 page (1000 keys) and the keys seen. Signing and
        XML parsing happen outside the timed part."""
        timings: list[float] = []
        keys = 0
        token: str | None = None
        stop_at = time.monotonic() + deadline_seconds
        while len(timings) < max_pages and time.monotonic() < stop_at:
            query = "list-type=2&max-keys=1000"
            if token is not None:
                query += "&continuation-token=" + quote(token, safe="")
            path = f"/{bucket}?{query}"
            headers = self.target.signed_headers("GET", path)
            started = time.perf_counter()
            response = self._pool.request("GET", path, headers=headers)
            timings.append((time.perf_counter() - started) * 1e3)
            if response.status != 200:
                raise RuntimeError(f"ListObjectsV2: {response.status} {response.data[:300]!r}")
            document = etree.fromstring(response.data)
            keys += len(document.findall(f"{_S3_NS}Contents"))
            token = document.findtext(f"{_S3_NS}NextContinuationToken")
            if document.findtext(f"{_S3_NS}IsTruncated") != "true" or not token:
                break
        return timings, keys
