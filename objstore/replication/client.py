"""The replication worker's S3 client: path-style requests to a destination endpoint,
signed with SigV4 by the project's own signer (`http/sigv4/signing.py`, the way our
verifier checks them; no botocore at run time), on treq over an agent and connection pool
of its own.

Bodies are streamed (`http/slice_producer.SliceProducer` reads the source object slice
by slice as the connection takes it) and sent as UNSIGNED-PAYLOAD; the destination's
answered ETag is what the worker checks the copy against. Every call is bounded by a
timeout. Answers are `Answer` (status, lower-case headers, a bounded body); transport
failures raise.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import quote

import treq
from twisted.web.client import Agent, HTTPConnectionPool
from twisted.web.http_headers import Headers
from twisted.web.iweb import IAgent, IBodyProducer, IResponse

from objstore.http.sigv4.canonical import UNSIGNED_PAYLOAD
from objstore.http.sigv4.signing import sign_headers
from objstore.http.slice_producer import SliceProducer

MAX_ANSWER_BYTES = 1024 * 1024
EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


@dataclass(frozen=True)
class Target:
    """Where a journal entry goes and with which key."""

    endpoint: str
    bucket: str
    region: str
    access_key: str
    secret_key: str


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


def object_url(target: Target, key: str, query: str = "") -> str:
    path = f"{target.endpoint}/{quote(target.bucket, safe='')}/{quote(key, safe='/-_.~')}"
    return f"{path}?{query}" if query else path


class S3Client:
    def __init__(self, reactor: Any, *, timeout_seconds: float,
                 now: Callable[[], float]) -> None:
        pool = HTTPConnectionPool(reactor, persistent=True)
        pool.maxPersistentPerHost = 4
        agent = cast(IAgent, Agent(reactor, pool=pool, connectTimeout=timeout_seconds))
        self._http = treq.client.HTTPClient(agent)
        self._timeout = timeout_seconds
        self._now = now
        self._pool = pool

    async def close(self) -> None:
        await self._pool.closeCachedConnections()

    async def request(self, method: str, target: Target, key: str, *, query: str = "",
                      headers: Mapping[str, str] | None = None,
                      body: bytes | IBodyProducer | SliceProducer | None = None,
                      timeout: float | None = None) -> Answer:
        url = object_url(target, key, query)
        given = dict(headers or {})
        if isinstance(body, bytes) and body:  # small documents (tags, a completion)
            given["content-md5"] = base64.b64encode(hashlib.md5(body).digest()).decode()
        payload = EMPTY_SHA256 if body is None or body == b"" else UNSIGNED_PAYLOAD
        moment = datetime.datetime.fromtimestamp(self._now(), datetime.UTC)
        signed = sign_headers(method, url, given, payload, target.access_key,
                              target.secret_key, target.region, moment)
        all_headers = {**given, **signed}
        response: IResponse = await self._http.request(
            method, url, headers=Headers({k: [v] for k, v in all_headers.items()}),
            data=cast(Any, body),
            timeout=timeout if timeout is not None else self._timeout)
        data = await _bounded(response) if method != "HEAD" else b""
        found = {name.decode("latin-1").lower(): values[-1].decode("latin-1")
                 for name, values in response.headers.getAllRawHeaders()}
        return Answer(response.code, found, data)


async def _bounded(response: IResponse) -> bytes:
    chunks: list[bytes] = []
    size = 0

    def collect(data: bytes) -> None:
        nonlocal size
        size += len(data)
        if size <= MAX_ANSWER_BYTES:
            chunks.append(data)

    await treq.collect(response, collect)
    return b"".join(chunks)


__all__ = ["Answer", "S3Client", "Target", "object_url"]
