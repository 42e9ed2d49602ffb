"""The cluster protocol's client side: every request this node sends a peer.

`ClusterClient` holds its own HTTP client (`http_agent.AgentHttp`: an `Agent` with its own
`HTTPConnectionPool`, called directly, never treq's global pool), signs every request with
`auth.sign_request` under [cluster] secret only, and bounds each exchange, answer body
included, by [cluster] request_timeout_seconds on its clock. With [cluster.tls] the agent
verifies peers against the cluster CA added to the system roots (Authentication 7: a
node may serve a publicly trusted certificate) and presents this node's certificate
(`ClusterTlsPolicy`); without it only plain HTTP peers are reachable (start-up refuses
https peers without [cluster.tls]).

`ping` turns one probe into the `membership.ProbeResult` the membership rules classify:
the nonce MAC checked under either of our secrets, the fingerprint compared, the peer's
clock offset estimated; after a 403 or 404 the peer's identity is read from its public
health. A probe never raises: no answer is `status=None`.

`manifest` pulls a page of a peer's changed-since manifest (anti-entropy).
`send_object`, `send_delete` and `put_blob` carry replicated changes (wire.py) and answer
the peer's `convergence.ack.Ack` or a `SendFailure` (never raise for a peer's failure; a
cancellation from the caller goes through, so the fan-out's own bound ends the exchange).
Each takes an optional `deadline` (this clock's seconds): the exchange is then cut at the
earlier of it and request_timeout_seconds, and not started once it passed, so that a
write's blob and row toward one peer share ONE deadline (fanout.py). `get_blob` streams a
peer's blob, bytes as stored, into a sink (repair) and answers what arrived (length,
SHA-256) or a `SendFailure`. A row with bytes is two requests, the blob first: its row's
ack then says has_blob: true. `view_query` asks a peer for its part of a per-node view
(node_views.py).

`send_op` posts a best-effort control-plane notice (True when the peer took it);
`control_snapshot` fetches a peer's control-plane snapshot, the one answer read beyond
MAX_ANSWER_BYTES (up to MAX_CONTROL_SNAPSHOT_BYTES: the snapshot is not paged).

This module decides nothing about membership; it only asks and reports.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, cast
from urllib.parse import urlsplit

import treq
from twisted.internet import ssl
from twisted.internet._sslverify import IOpenSSLTrustRoot
from twisted.internet.defer import CancelledError, Deferred
from twisted.web.client import Agent, HTTPConnectionPool, _HTTP11ClientFactory
from twisted.web.iweb import IBodyProducer, IPolicyForHTTPS, IResponse
from zope.interface import implementer

from objstore.cluster.auth import (
    ClusterSecrets,
    RequestLine,
    fingerprint_matches,
    sign_request,
    verify_nonce_mac,
)
from objstore.cluster.control_wire import encode_op
from objstore.cluster.fanout import ClusterOp
from objstore.cluster.http_agent import AgentHttp
from objstore.cluster.manifest_wire import PulledPage, decode_page, encode_request
from objstore.cluster.membership import ProbeResult, clock_offset
from objstore.cluster.wire import ReplicatedDelete, WireError, encode_delete, encode_row
from objstore.config import Cluster, ClusterTLS
from objstore.convergence.ack import Ack, ack_from_response
from objstore.json_input import parse_json
from objstore.meta.records import ObjectRecord
from objstore.timers import ReactorClock

PING_PATH = "/cluster/v1/ping"
HEALTH_PATH = "/cluster/v1/health"
OBJECT_PATH = "/cluster/v1/object"
DELETE_PATH = "/cluster/v1/object/delete"
MANIFEST_PATH = "/cluster/v1/manifest"
BLOB_PATH = "/cluster/v1/blob/"  # + the blob id (a canonical UUID: nothing to encode)
OP_PATH = "/cluster/v1/op"
CONTROL_SNAPSHOT_PATH = "/cluster/v1/control-snapshot"
VIEW_PATH = "/cluster/v1/admin/"  # + a per-node view's family (node_views.FAMILIES)
# An answer of any cluster JSON route is read up to this size; past it, no answer.
MAX_ANSWER_BYTES = 2 * 1024 * 1024
# ... but the control-plane snapshot (every user, credential, bucket, upload and part):
# one answer, not paged, read up to this size.
MAX_CONTROL_SNAPSHOT_BYTES = 256 * 1024 * 1024
# Idle keep-alive connections kept per peer. As many as the writes a node fans out at once
# (a client's c=32): with 4, most fan-out requests of a burst opened a new connection (a
# getaddrinfo on a thread, a TCP or TLS handshake, a new channel on the peer) and closed it
# after one request; that was ~1/4 of node a's reactor time in a 3-node quorum PUT run.
PERSISTENT_PER_PEER = 32
# Below the peer's own idle timeout (http/channel.py IDLE_TIMEOUT_SECONDS, 60 s), so a
# cached connection is never the one the peer is closing as the next request goes out.
IDLE_CONNECTION_SECONDS = 30


class HttpClient(Protocol):
    """The part of treq's HTTPClient the cluster client uses: `http_agent.AgentHttp` in
    the daemon, treq's StubTreq in tests. Responses are read by the caller (never buffered
    whole: a blob fetch streams into its sink)."""

    def request(self, method: str, url: str, **kwargs: Any) -> Deferred[IResponse]: ...


class AnswerTooLarge(Exception):
    """A peer's answer passed MAX_ANSWER_BYTES."""


class SnapshotRefused(Exception):
    """A peer answered the control-snapshot request with an error."""


class DeadlinePassed(Exception):
    """The caller's deadline for this exchange passed before it could start."""


@dataclass(frozen=True, slots=True)
class Exchange:
    status: int
    body: bytes


@dataclass(frozen=True, slots=True)
class SendFailure:
    """Why a peer did not acknowledge: no answer (`status` None), or its refusal."""

    reason: str
    status: int | None = None


@dataclass(frozen=True, slots=True)
class BlobFetched:
    """A blob received from a peer: how many bytes and their SHA-256 (to check against
    the row's before keeping them)."""

    length: int
    sha256: str


@implementer(IOpenSSLTrustRoot)
class ClusterCaAndSystemRoots:
    """The trust of a peer's listener: the system roots (OpenSSL's default paths, which
    SSL_CERT_FILE and SSL_CERT_DIR replace) and the cluster CA added to them."""

    def __init__(self, ca: ssl.Certificate) -> None:
        self._ca = ca

    def _addCACertsToContext(self, context: Any) -> None:  # noqa: N802 (Twisted's name)
        context.set_default_verify_paths()
        context.get_cert_store().add_cert(self._ca.original)


@implementer(IPolicyForHTTPS)
class ClusterTlsPolicy:
    """Peers' listeners are verified against the cluster CA added to the system roots,
    by the name or address dialled (a node may serve a publicly trusted certificate; the
    peer's identity is its client certificate, which the peer's listener checks against
    the cluster CA only, and the nonce MAC); this node shows its own certificate."""

    def __init__(self, ca: ssl.Certificate, own: ssl.PrivateCertificate) -> None:
        self._ca = ca
        self._own = own
        # One context per peer name: the system roots are read once, not per handshake.
        self._options: dict[str, Any] = {}

    @classmethod
    def from_files(cls, tls: ClusterTLS) -> ClusterTlsPolicy:
        """(Start-up: reads the files) the policy of [cluster.tls]."""
        with open(tls.ca_file, "rb") as ca, open(tls.cert_file, "rb") as cert, \
                open(tls.key_file, "rb") as key:
            ca_pem, cert_pem, key_pem = ca.read(), cert.read(), key.read()
        return cls(ssl.Certificate.loadPEM(ca_pem),
                   ssl.PrivateCertificate.loadPEM(cert_pem + b"\n" + key_pem))

    def creatorForNetloc(self, hostname: bytes, port: int) -> Any:  # noqa: N802
        name = hostname.decode("idna")
        options = self._options.get(name)
        if options is None:
            options = self._options[name] = ssl.optionsForClientTLS(
                name, trustRoot=cast(IOpenSSLTrustRoot, ClusterCaAndSystemRoots(self._ca)),
                clientCertificate=self._own)
        return options


class _QuietClientFactory(_HTTP11ClientFactory):
    """Each peer connection without Twisted's "Starting/Stopping factory" log lines (a
    probe every few seconds per peer would fill the log with them)."""

    noisy = False


def build_http_client(reactor: Any, cluster: Cluster) -> HttpClient:
    """An agent of its own (its pool, its connect timeout, its TLS policy), called
    directly (http_agent.py: no per-request layers, no buffered answers)."""
    pool = HTTPConnectionPool(reactor, persistent=True)
    pool._factory = _QuietClientFactory  # type: ignore[misc]
    pool.maxPersistentPerHost = PERSISTENT_PER_PEER
    pool.cachedConnectionTimeout = IDLE_CONNECTION_SECONDS
    kwargs: dict[str, Any] = {"pool": pool,
                              "connectTimeout": cluster.request_timeout_seconds}
    if cluster.tls is not None:
        kwargs["contextFactory"] = ClusterTlsPolicy.from_files(cluster.tls)
    return AgentHttp(Agent(reactor, **kwargs))


class ClusterClient:
    """Signed requests to peers, each bounded by [cluster] request_timeout_seconds."""

    def __init__(self, *, cluster: Cluster, node_id: str, http: HttpClient,
                 clock: ReactorClock) -> None:
        self._cluster = cluster
        self._node_id = node_id
        self._secrets = ClusterSecrets.from_config(cluster)
        self._http = http
        self._clock = clock

    async def request(self, method: str, base_url: str, path: str, *, query: str = "",
                      body: bytes = b"", signed: bool = True,
                      max_answer_bytes: int = MAX_ANSWER_BYTES,
                      deadline: float | None = None) -> Exchange:
        """One exchange with a peer; raises on no answer (refused, timed out, TLS, an
        answer over `max_answer_bytes`, `deadline` passed). `path` and `query` are sent as
        given (encoded)."""
        timeout = self._timeout(deadline)
        return await self._bounded(self._exchange(
            method, *self._signed(method, base_url, path, query, signed,
                                  hashlib.sha256(body).hexdigest(),
                                  "application/json" if body else None), body,
            max_answer_bytes), timeout)

    def _signed(self, method: str, base_url: str, path: str, query: str, signed: bool,
                content_sha256: str, content_type: str | None) -> tuple[str, dict[str, str]]:
        """The URL and headers of a request whose body hashes to `content_sha256`."""
        url = base_url.rstrip("/") + path + (f"?{query}" if query else "")
        headers: dict[str, str] = {}
        if signed:
            line = RequestLine(method, urlsplit(url).path, query)
            headers = sign_request(self._secrets, line, now=self._clock.seconds(),
                                   node_id=self._node_id, content_sha256=content_sha256)
        if content_type is not None:
            headers["content-type"] = content_type
        return url, headers

    def _timeout(self, deadline: float | None) -> float:
        """How long the next exchange may take: request_timeout_seconds, or less when the
        caller's `deadline` comes sooner; raises DeadlinePassed when it has passed."""
        limit = self._cluster.request_timeout_seconds
        if deadline is None:
            return limit
        left = deadline - self._clock.seconds()
        if left <= 0:
            raise DeadlinePassed("the write's deadline passed before this request")
        return min(limit, left)

    async def _bounded(self, work: Any, timeout: float | None = None) -> Any:
        """`work` (a coroutine), cancelled after `timeout` seconds ([cluster]
        request_timeout_seconds when not given)."""
        exchange = Deferred.fromCoroutine(work)
        exchange.addTimeout(self._cluster.request_timeout_seconds if timeout is None
                            else timeout, cast(Any, self._clock))
        return await exchange

    async def _exchange(self, method: str, url: str, headers: Mapping[str, str],
                        body: bytes | IBodyProducer,
                        max_answer_bytes: int = MAX_ANSWER_BYTES) -> Exchange:
        response = await self._http.request(
            method, url, headers={k: [v] for k, v in headers.items()}, data=body or None)
        return Exchange(response.code, await _bounded_body(response, max_answer_bytes))

    # -- replicated changes ----------------------------------------------------------------
    async def send_object(self, base_url: str, record: ObjectRecord, *,
                          deadline: float | None = None, blob: bytes | None = None
                          ) -> Ack | SendFailure:
        """A row to a peer: with its blob's bytes (`blob`, a small blob: wire.py), or
        after them (`put_blob`), or with none of its own."""
        return await self._acknowledged("POST", base_url, OBJECT_PATH,
                                        encode_row(record, blob), deadline)

    async def send_delete(self, base_url: str, delete: ReplicatedDelete, *,
                          deadline: float | None = None) -> Ack | SendFailure:
        """A deletion of one version (its tombstone's stamp) to a peer."""
        return await self._acknowledged("POST", base_url, DELETE_PATH, encode_delete(delete),
                                        deadline)

    async def put_blob(self, base_url: str, blob_id: str, body: bytes | IBodyProducer,
                       sha256: str, *, deadline: float | None = None) -> Ack | SendFailure:
        """A blob's bytes as stored, before the row that references them. `body`: the
        bytes, or a producer of them that knows its length (a large blob, streamed);
        `sha256`: their hex SHA-256, signed, which the peer checks before keeping them."""
        url, headers = self._signed("PUT", base_url, BLOB_PATH + blob_id, "", True, sha256,
                                    "application/octet-stream")
        try:
            timeout = self._timeout(deadline)
            answer = await self._bounded(self._exchange("PUT", url, headers, body), timeout)
        except CancelledError:
            raise  # the caller gave up: its bound ends this exchange, nothing follows it
        except Exception as error:  # noqa: BLE001 (no answer is a failure, not a crash)
            return SendFailure(f"no answer: {error!r}")
        return _ack_or_failure(answer)

    async def get_blob(self, base_url: str, blob_id: str, sink: Callable[[bytes], object]
                       ) -> BlobFetched | SendFailure:
        """A peer's blob, bytes as stored, each chunk handed to `sink` as it arrives (no
        size cap: the caller's sink decides where they go)."""
        url, headers = self._signed("GET", base_url, BLOB_PATH + blob_id, "", True,
                                    _EMPTY_SHA256, None)
        try:
            return await self._bounded(self._fetch(url, headers, sink))  # type: ignore[no-any-return]
        except Exception as error:  # noqa: BLE001
            return SendFailure(f"no answer: {error!r}")

    async def _fetch(self, url: str, headers: Mapping[str, str],
                     sink: Callable[[bytes], object]) -> BlobFetched | SendFailure:
        response = await self._http.request(
            "GET", url, headers={k: [v] for k, v in headers.items()})
        if response.code != 200:
            return _failure(Exchange(response.code, await _bounded_body(response)))
        digest = hashlib.sha256()
        length = [0]

        def collect(data: bytes) -> None:
            digest.update(data)
            length[0] += len(data)
            sink(data)

        await treq.collect(response, collect)
        return BlobFetched(length[0], digest.hexdigest())

    async def _acknowledged(self, method: str, base_url: str, path: str, body: bytes,
                            deadline: float | None = None) -> Ack | SendFailure:
        try:
            answer = await self.request(method, base_url, path, body=body,
                                        deadline=deadline)
        except CancelledError:
            raise  # the caller gave up (the fan-out's bound): not a peer's answer
        except Exception as error:  # noqa: BLE001
            return SendFailure(f"no answer: {error!r}")
        return _ack_or_failure(answer)

    # -- the control plane -----------------------------------------------------------------
    async def send_op(self, base_url: str, op: ClusterOp) -> bool | SendFailure:
        """A best-effort notice (control_wire.encode_op); True when the peer took it (2xx:
        a row op's ack, or 202 for a notice)."""
        try:
            answer = await self.request("POST", base_url, OP_PATH, body=encode_op(op))
        except Exception as error:  # noqa: BLE001
            return SendFailure(f"no answer: {error!r}")
        if 200 <= answer.status < 300:
            return True
        return _failure(answer)

    async def control_snapshot(self, base_url: str) -> bytes:
        """The peer's control-plane snapshot (JSON, credential secrets included: never
        log it), read up to MAX_CONTROL_SNAPSHOT_BYTES; raises on no answer or a
        refusal."""
        answer = await self.request("POST", base_url, CONTROL_SNAPSHOT_PATH, body=b"{}",
                                    max_answer_bytes=MAX_CONTROL_SNAPSHOT_BYTES)
        if answer.status != 200:
            raise SnapshotRefused(str(_failure(answer)))
        return answer.body

    async def view_query(self, base_url: str, family: str, params: Mapping[str, str]
                         ) -> Exchange:
        """A peer's answer to a per-node view query (POST /cluster/v1/admin/<family>, the
        filter as the JSON body); raises when there is none (node_views.py answers 502)."""
        return await self.request("POST", base_url, VIEW_PATH + family,
                                  body=json.dumps(dict(params)).encode())

    async def manifest(self, base_url: str, since: int, limit: int) -> PulledPage | SendFailure:
        """A page of the peer's changed-since manifest above `since` (anti-entropy)."""
        try:
            answer = await self.request("POST", base_url, MANIFEST_PATH,
                                        body=encode_request(since, limit))
        except Exception as error:  # noqa: BLE001
            return SendFailure(f"no answer: {error!r}")
        if answer.status != 200:
            return _failure(answer)
        try:
            return decode_page(answer.body)
        except WireError as error:
            return SendFailure(f"not a manifest page: {error}", 200)

    async def ping(self, base_url: str, nonce: str) -> ProbeResult:
        """One probe of the peer at `base_url` with a fresh `nonce`."""
        sent_at = self._clock.seconds()
        try:
            answer = await self.request("GET", base_url, PING_PATH, query=f"nonce={nonce}")
        except Exception:  # noqa: BLE001 (any failure to get an answer is "no answer")
            return ProbeResult(status=None)
        received_at = self._clock.seconds()
        if answer.status in (403, 404):
            return ProbeResult(status=answer.status, node_id=await self.public_node_id(base_url),
                           latency_seconds=received_at - sent_at)
        return probe_result(answer, cluster=self._cluster, nonce=nonce, sent_at=sent_at,
                            received_at=received_at)

    async def public_node_id(self, base_url: str) -> str | None:
        """The node id a peer's public health names; None when it names none."""
        try:
            answer = await self.request("GET", base_url, HEALTH_PATH, signed=False)
        except Exception:  # noqa: BLE001
            return None
        document = _json_object(answer.body)
        return _node_id(document.get("node_id")) if document is not None else None


_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def _ack_or_failure(answer: Exchange) -> Ack | SendFailure:
    ack = ack_from_response(answer.status, answer.body)
    return ack if ack is not None else _failure(answer)


def _failure(answer: Exchange) -> SendFailure:
    """A refusal, named by the peer's JSON error when it sent one."""
    document = _json_object(answer.body)
    if document is not None and isinstance(document.get("message"), str):
        return SendFailure(f"{document.get('error')}: {document['message']}", answer.status)
    if answer.status == 200:
        return SendFailure("the answer is not an acknowledgement", 200)
    return SendFailure(f"HTTP {answer.status}", answer.status)


async def _bounded_body(response: IResponse, limit: int = MAX_ANSWER_BYTES) -> bytes:
    chunks: list[bytes] = []
    received = [0]

    def collect(data: bytes) -> None:
        received[0] += len(data)
        if received[0] > limit:
            raise AnswerTooLarge(f"a peer's answer passed {limit} bytes")
        chunks.append(data)

    await treq.collect(response, collect)
    return b"".join(chunks)


# -- the probe's answer, pure ---------------------------------------------------------------


def probe_result(answer: Exchange, *, cluster: Cluster, nonce: str, sent_at: float,
                 received_at: float) -> ProbeResult:
    """What a ping answer says, checked: a 200 that is not a JSON object is unauthenticated;
    figures of the wrong type are left out."""
    latency = max(received_at - sent_at, 0.0)
    if answer.status != 200:
        return ProbeResult(status=answer.status, latency_seconds=latency)
    document = _json_object(answer.body)
    if document is None:
        return ProbeResult(status=200, latency_seconds=latency)
    peer_time = _number(document.get("time"))
    return ProbeResult(
        status=200,
        mac_ok=verify_nonce_mac(ClusterSecrets.from_config(cluster), nonce,
                                document.get("nonce_mac")) is not None,
        fingerprint_ok=fingerprint_matches(cluster, document.get("config_fingerprint")),
        node_id=_node_id(document.get("node_id")),
        disk_total=_count(document.get("disk_total")),
        disk_available=_count(document.get("disk_available")),
        max_seq=_count(document.get("max_seq")),
        clock_offset_seconds=(clock_offset(sent_at, received_at, peer_time)
                              if peer_time is not None else None),
        protocol=_count(document.get("protocol")),
        latency_seconds=latency,
    )


def _json_object(body: bytes) -> dict[str, Any] | None:
    try:
        value = parse_json(body)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def _node_id(value: object) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= 128 else None


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if value == value and abs(value) != float("inf") else None

