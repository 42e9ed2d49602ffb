"""The cluster protocol's server side under /cluster/v1 (Klein): what a peer may ask this
node, and the check every such request passes before a handler runs.

Routes today:

    GET /cluster/v1/health  public: {"status", "node_id"} only (never the fingerprint)
    GET /cluster/v1/ping    cluster auth; the caller's nonce is the query parameter
                            `nonce` (so the request signature covers it); the answer is
                            the authenticated ping response plus two additive fields,
                            `protocol` (PROTOCOL_VERSION) and `time` (this node's clock,
                            float seconds, for the caller's clock-offset estimate)
    POST /cluster/v1/object         a replicated row (wire.py), applied by last-writer-wins;
                                    answers ClusterObjectAck {applied, has_blob}
    POST /cluster/v1/object/delete  a replicated deletion (wire.py); ClusterObjectAck
    POST /cluster/v1/manifest       a page of the changed-since manifest from a cursor
                                    (manifest_routes.py, manifest_wire.py)
    PUT /cluster/v1/blob/<blob_id>  a blob's bytes, streamed (no cap; the spool's SHA-256
                                    is checked against the signed one before the handler);
                                    sent BEFORE the row that references it, so the row's
                                    ack says has_blob: true; answers {"stored", "has_blob"}
    GET /cluster/v1/blob/<blob_id>  a blob's bytes as stored, streamed (repair); 404 when
                                    not here
    POST /cluster/v1/op, /cluster/v1/control-snapshot  the control plane: handled by
                                    `control_routes.ControlRoutes` (503 without one)
    POST /cluster/v1/admin/<family> this node's part of a per-node view (audit,
                                    metrics-history): cluster/admin_proxy_routes.py

Blob ids are path segments that must be canonical UUID strings (400 otherwise) and are
used verbatim; they become paths only through `BlobStore`, which checks them again.

Every other route is declared with `cluster_route`, which wraps Klein's `app.route` so a
handler runs only for a verified peer and receives it (`VerifiedPeer`). The check, in
order: with [cluster.tls], a peer certificate on the connection (403: the handshake makes
it optional, the route requires it; its chain was verified against the cluster CA by the
handshake); the request signature (`auth.verify_request` under secret, then
secret_previous; any outcome but OK is 403); with [cluster.tls], the verified sender id
named by the certificate, as its CN or a DNS SAN (`cert_binding.py`; 403 otherwise: a
node's key speaks for that node only); a verified sender id equal to ours is a loop
(409); the body at most the route's cap (2 MiB for JSON routes: 413) and equal to the
signed hash (`payload_matches`: 400). A request with a body is checked before its body is
read (`admit`, asked by the site through the root resource), so a refused peer never
uploads anything.

Every answer is JSON {"error", "message"} with codes from `errors.ADMIN_ERRORS`; never
HTML. This module must never apply anything itself: handlers call the engine.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import wraps
from typing import TYPE_CHECKING, Any, Protocol

from klein import Klein
from twisted.internet.defer import Deferred

from objstore.admin.api import admin_answer, install_json_errors, json_body, match_route
from objstore.blobs.store import is_valid_blob_id
from objstore.cluster import manifest_routes
from objstore.cluster.admin_proxy_routes import register_admin_proxy_routes
from objstore.cluster.auth import (
    HEADER_CONTENT_SHA256,
    SIGNED_HEADERS,
    AuthOutcome,
    ClusterSecrets,
    RequestLine,
    SecretSlot,
    config_fingerprint,
    nonce_mac,
    payload_matches,
    valid_nonce,
    verify_request,
)
from objstore.cluster.manifest_routes import ManifestSource
from objstore.cluster.wire import (
    PROTOCOL_VERSION,
    WireError,
    decode_delete,
    decode_row_and_blob,
    encode_ack,
)
from objstore.config import Cluster
from objstore.convergence.cert_binding import certificate_binds
from objstore.engine.changes import Caller, Origin
from objstore.errors import AdminError, S3Error
from objstore.http.channel import Refusal
from objstore.http.health import HealthState
from objstore.http.producers import BlobProducer
from objstore.http.ratelimit import peer_address
from objstore.http.site import Admitted, GatekeeperResource, ObjstoreRequest
from objstore.iam.identity import Principal
from objstore.threads import InlinePool, Runner

if TYPE_CHECKING:
    from objstore.cluster.control_routes import ControlRoutes
    from objstore.cluster.node_views import NodeViews
    from objstore.engine.replication_apply import ReplicationApply

__all__ = ["PROTOCOL_VERSION", "ClusterApi", "NodeFigures", "VerifiedPeer", "cluster_route"]
MAX_JSON_BODY_BYTES = 2 * 1024 * 1024
_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_NO_ENDPOINT = "No such cluster endpoint."


@dataclass(frozen=True, slots=True)
class VerifiedPeer:
    """The sender of a verified cluster request."""

    node_id: str
    slot: SecretSlot  # the secret that verified it: key the nonce MAC with it
    certificate: object | None = None  # the peer's certificate (pyOpenSSL X509) under mTLS


@dataclass(frozen=True, slots=True)
class NodeFigures:
    """What the ping reports of this node (`disk_*` of the data volume, in bytes)."""

    disk_total: int
    disk_available: int
    max_seq: int


@dataclass(frozen=True, slots=True)
class ClusterAdmission:
    """What the admission of a cluster request with a body carries to its route: the
    verified peer (None: a public route) and the route's body cap."""

    peer: VerifiedPeer | None
    max_body_bytes: int | None = MAX_JSON_BODY_BYTES

    @property
    def hash_body(self) -> bool:
        return self.peer is not None


# -- the decisions, pure ------------------------------------------------------------------


def certificate_refusal(required: bool, certificate: object | None) -> AdminError | None:
    """Authentication 7: with [cluster.tls] every /cluster/v1 route but public health needs
    a peer certificate. The handshake verified any certificate sent against the cluster CA
    (it fails otherwise), so a certificate present is a verified one."""
    if required and certificate is None:
        return AdminError("AccessDenied", "A cluster request needs a client certificate "
                          "issued by the cluster CA.")
    return None


def binding_refusal(required: bool, certificate: object | None,
                    node_id: str) -> AdminError | None:
    """With [cluster.tls], the certificate must be issued to the node the signature names
    (its CN or a DNS SAN: `cert_binding.py`)."""
    if required and certificate is not None and not certificate_binds(certificate, node_id):
        return AdminError("AccessDenied", f"The client certificate is not issued to node "
                          f"{node_id} (its CN or a DNS name must be the node id).")
    return None


def verify_peer(secrets: ClusterSecrets, line: RequestLine, headers: Mapping[str, str], *,
                now: float, own_node_id: str, certificate_required: bool = False,
                certificate: object | None = None) -> VerifiedPeer:
    """The sender of a cluster request, or the AdminError to answer (403, 409)."""
    refused = certificate_refusal(certificate_required, certificate)
    if refused is not None:
        raise refused
    verification = verify_request(secrets, line, headers, now=now)
    if not verification.ok or verification.slot is None:
        raise AdminError("AccessDenied", _refusal_message(verification.outcome))
    refused = binding_refusal(certificate_required, certificate, verification.node_id)
    if refused is not None:
        raise refused
    if verification.node_id == own_node_id:
        raise AdminError("Conflict", "This request comes from this node itself (a loop: "
                         "the node is listed as its own peer).")
    return VerifiedPeer(verification.node_id, verification.slot, certificate)


def _refusal_message(outcome: AuthOutcome) -> str:
    if outcome is AuthOutcome.STALE:
        return "The request's x-amz-date is more than 15 minutes from this node's clock."
    if outcome is AuthOutcome.BAD_SIGNATURE:
        return "The cluster request signature does not verify under this node's secrets."
    return f"The cluster request is not signed correctly ({outcome.value})."


def body_refusal(declared_length: int | None, max_body_bytes: int | None) -> AdminError | None:
    """The refusal of a body by its declared length (None: chunked, length unknown)."""
    if max_body_bytes is None:
        return None
    if declared_length is None:
        return AdminError("PayloadTooLarge", "A cluster JSON request needs a Content-Length.")
    if declared_length > max_body_bytes:
        return AdminError("PayloadTooLarge",
                          f"A cluster JSON body is at most {max_body_bytes} bytes.")
    return None


# -- reading the request ------------------------------------------------------------------


def request_line(request: ObjstoreRequest) -> RequestLine:
    """The request line as received, which the signature covers."""
    raw_query = request.uri.partition(b"?")[2]
    return RequestLine(request.method.decode("ascii", "replace"),
                       request.path.decode("latin-1"), raw_query.decode("latin-1"))


def signing_headers(request: ObjstoreRequest) -> dict[str, str]:
    """The signing headers, lower-case names; one sent twice is left out (so refused)."""
    found: dict[str, str] = {}
    for name in SIGNED_HEADERS:
        values = request.requestHeaders.getRawHeaders(name.encode("ascii"))
        if values is not None and len(values) == 1:
            found[name] = values[0].decode("latin-1")
    return found


def peer_certificate(request: ObjstoreRequest) -> object | None:
    """The certificate the peer presented on this connection (TWISTED-NOTES f: the TLS
    transport's `getPeerCertificate`); None on plain HTTP or when none was sent."""
    transport = getattr(request.channel, "transport", None)
    getter = getattr(transport, "getPeerCertificate", None)
    if getter is None:
        return None
    try:
        certificate: object | None = getter()
    except Exception:  # noqa: BLE001 (no TLS session: no certificate)
        return None
    return certificate


# -- routes -------------------------------------------------------------------------------

# The body cap of each cluster route, by Klein app and endpoint (the handler's name): read
# to refuse a body before it is read. Public routes are not listed.
_CAPS: dict[int, dict[str, int | None]] = {}
PeerHandler = Callable[..., Awaitable[bytes]]


class _Verifying(Protocol):
    def verified_peer(self, request: ObjstoreRequest) -> VerifiedPeer: ...


def cluster_route(app: Klein, path: str, *, methods: list[str],
                  max_body_bytes: int | None = MAX_JSON_BODY_BYTES
                  ) -> Callable[[PeerHandler], PeerHandler]:
    """`app.route(path, methods=methods)` for `handler(self, request, peer, **url_args)`,
    run only for a verified peer whose body (at most `max_body_bytes`; None: a streamed
    route without cap) is the one it signed."""

    def decorator(handler: PeerHandler) -> PeerHandler:
        _CAPS.setdefault(id(app.url_map), {})[handler.__name__] = max_body_bytes

        @app.route(path, methods=methods)
        @wraps(handler)
        async def verified(self: _Verifying, request: ObjstoreRequest, *args: Any,
                           **kwargs: Any) -> bytes:
            admitted = request.admitted
            if isinstance(admitted, ClusterAdmission) and admitted.peer is not None:
                peer = admitted.peer
            else:
                peer = self.verified_peer(request)
            await _check_body(request, max_body_bytes)
            return await handler(self, request, peer, *args, **kwargs)

        return verified

    return decorator


async def _check_body(request: ObjstoreRequest, max_body_bytes: int | None) -> None:
    spool = request.spool
    claimed = request.requestHeaders.getRawHeaders(HEADER_CONTENT_SHA256.encode())
    if spool is None:  # not through ObjstoreSite: nothing was received
        actual: str | None = _EMPTY_SHA256
    else:
        if max_body_bytes is not None and (spool.too_large or spool.length > max_body_bytes):
            raise AdminError("PayloadTooLarge",
                             f"A cluster JSON body is at most {max_body_bytes} bytes.")
        if isinstance(spool.error, S3Error) and spool.error.status == 507:
            raise AdminError("InsufficientStorage", spool.error.message)
        if spool.error is not None:
            raise AdminError("BadRequest", f"The request body could not be read: "
                             f"{spool.error}")
        await spool.digests_ready()
        actual = spool.sha256_hex
    if not claimed or actual is None or not payload_matches(claimed[0].decode("latin-1"),
                                                             actual):
        raise AdminError("BadRequest", "The body does not match its signed "
                         "x-amz-content-sha256.")


# -- the API ------------------------------------------------------------------------------


class ClusterApi:
    """The /cluster/v1 routes of one node."""

    app = Klein()
    install_json_errors(app, no_endpoint=_NO_ENDPOINT)

    def __init__(self, *, cluster: Cluster, node_id: str, health: HealthState,
                 figures: Callable[[], Awaitable[NodeFigures]],
                 clock: Callable[[], float], apply: ReplicationApply | None = None,
                 io: Runner | None = None, node_views: NodeViews | None = None,
                 control: ControlRoutes | None = None,
                 manifest: ManifestSource | None = None) -> None:
        """`apply`: the receive path of replicated rows and blobs (None: those routes
        answer 503); `io`: the IO pool, which reads a JSON body that spilled to a file;
        `node_views`: this node's per-node views (None: POST /admin/<family> answers 503);
        `manifest`: the changed-since manifest (`MetaStore.changed_since`; None: 503)."""
        self._cluster = cluster
        self._node_id = node_id
        self._secrets = ClusterSecrets.from_config(cluster)
        self._fingerprint = config_fingerprint(cluster)
        self._certificate_required = cluster.tls is not None
        self._health = health
        self._figures = figures
        self._clock = clock
        self._apply = apply
        self._io = io if io is not None else InlinePool()
        self._control = control  # POST /op and /control-snapshot (None: 503)
        self.node_views = node_views
        self.manifest_source = manifest

    def resource(self) -> _ClusterResource:
        return _ClusterResource(self.app.resource(), self)

    def verified_peer(self, request: ObjstoreRequest) -> VerifiedPeer:
        return verify_peer(self._secrets, request_line(request), signing_headers(request),
                           now=self._clock(), own_node_id=self._node_id,
                           certificate_required=self._certificate_required,
                           certificate=peer_certificate(request))

    # -- admission of a request with a body (the site's Gatekeeper, through the root) ----
    def admit(self, request: ObjstoreRequest) -> Deferred[Admitted]:
        try:
            admission: Admitted = self._admission(request)
        except AdminError as error:
            return Deferred.fromCoroutine(_refuse(error))
        done: Deferred[Admitted] = Deferred()
        done.callback(admission)
        return done

    def _admission(self, request: ObjstoreRequest) -> ClusterAdmission:
        endpoint = _endpoint(self.app, _path_below_v1(request),
                             request.method.decode("ascii", "replace"))
        caps = _CAPS.get(id(self.app.url_map), {})
        if endpoint is None or endpoint not in caps:
            return ClusterAdmission(None, None)  # public: the handler decides
        refused = body_refusal(request.body_length, caps[endpoint])
        if refused is not None:
            raise refused
        return ClusterAdmission(self.verified_peer(request), caps[endpoint])

    # -- routes --------------------------------------------------------------------------
    @app.route("/health", methods=["GET", "HEAD"])
    def health(self, request: ObjstoreRequest) -> bytes:
        status, word = self._health.status()
        return json_body(request, status, {"status": word, "node_id": self._node_id})

    @cluster_route(app, "/ping", methods=["GET"])
    async def ping(self, request: ObjstoreRequest, peer: VerifiedPeer) -> bytes:
        nonce = _query_value(request, "nonce")
        if nonce is None or not valid_nonce(nonce):
            raise AdminError("BadRequest", "ping needs a query parameter nonce of 16-128 "
                             "characters of [A-Za-z0-9_-].")
        figures = await self._figures()
        return json_body(request, 200, {
            "node_id": self._node_id,
            "config_fingerprint": self._fingerprint,
            "disk_total": figures.disk_total,
            "disk_available": figures.disk_available,
            "max_seq": figures.max_seq,
            "nonce_mac": nonce_mac(self._secrets.key(peer.slot), nonce),
            "protocol": PROTOCOL_VERSION,
            "time": self._clock(),
        })

    @cluster_route(app, "/object", methods=["POST"])
    async def object_row(self, request: ObjstoreRequest, peer: VerifiedPeer) -> bytes:
        record, data = _decoded(decode_row_and_blob, await self._json_bytes(request))
        caller = peer_caller(request, peer, "Cluster::ApplyObject")
        if data is None:
            work = lambda: self._receiver().apply_replicated(caller, record)  # noqa: E731
        else:
            work = lambda: self._receiver().apply_replicated_bytes(  # noqa: E731
                caller, record, data)
        ack = await _engine(self._bucket_pulled(peer, work))
        return json_body(request, 200, encode_ack(ack))

    @cluster_route(app, "/object/delete", methods=["POST"])
    async def object_delete(self, request: ObjstoreRequest, peer: VerifiedPeer) -> bytes:
        delete = _decoded(decode_delete, await self._json_bytes(request))
        ack = await _engine(self._bucket_pulled(
            peer, lambda: self._receiver().apply_replicated_delete(
                peer_caller(request, peer, "Cluster::ApplyDelete"), delete.bucket,
                delete.key, delete.version_id, delete.deleted_at)))
        return json_body(request, 200, encode_ack(ack))

    @cluster_route(app, "/blob/<blob_id>", methods=["PUT"], max_body_bytes=None)
    async def put_blob(self, request: ObjstoreRequest, peer: VerifiedPeer,
                       blob_id: str) -> bytes:
        _check_blob_id(blob_id)
        stored = await _engine(self._receiver().store_blob(
            peer_caller(request, peer, "Cluster::PutBlob"), blob_id, request.spool))
        return json_body(request, 200, {"stored": stored, "has_blob": True})

    @cluster_route(app, "/blob/<blob_id>", methods=["GET"])
    async def get_blob(self, request: ObjstoreRequest, peer: VerifiedPeer,
                       blob_id: str) -> bytes:
        _check_blob_id(blob_id)
        stream = await _engine(self._receiver().blob_stream(blob_id))
        if stream is None:
            raise AdminError("NotFound", f"Blob {blob_id} is not on this node.")
        request.setResponseCode(200)
        request.setHeader("Content-Type", "application/octet-stream")
        request.setHeader("Content-Length", str(stream.length))
        await BlobProducer(request, stream).start()
        return b""

    def _receiver(self) -> ReplicationApply:
        if self._apply is None:
            raise AdminError("ServiceUnavailable", "This node does not apply replicated "
                             "changes yet.")
        return self._apply

    async def _json_bytes(self, request: ObjstoreRequest) -> bytes:
        """The body (at most MAX_JSON_BODY_BYTES, checked by cluster_route); one that
        spilled to a file is read on the IO pool."""
        spool = request.spool
        if spool is None or spool.length == 0:
            raise AdminError("BadRequest", "The request needs a JSON body.")
        if spool.in_memory:
            return spool.memory_bytes()
        spool.seek(0)
        data: bytes = await self._io.run(spool.read, spool.length)
        return data

    # -- the control plane (cluster/control_routes.py) -----------------------------------
    @cluster_route(app, "/op", methods=["POST"])
    async def op(self, request: ObjstoreRequest, peer: VerifiedPeer) -> bytes:
        return await self._control_routes().op(
            request, peer_caller(request, peer, "Cluster::ApplyOp"), peer,
            await self._json_bytes(request))

    @cluster_route(app, "/control-snapshot", methods=["POST"])
    async def control_snapshot(self, request: ObjstoreRequest, peer: VerifiedPeer) -> bytes:
        return await self._control_routes().snapshot(request)

    async def _bucket_pulled(self, peer: VerifiedPeer, work: Callable[[], Awaitable[Any]]
                             ) -> Any:
        """`work`, once more after pulling the sender's control plane when it found no
        bucket (`ControlRoutes.with_bucket`); as is without control routes."""
        if self._control is None:
            return await work()
        return await self._control.with_bucket(peer, work)

    def _control_routes(self) -> ControlRoutes:
        if self._control is None:
            raise AdminError("ServiceUnavailable", "This node does not reconcile the "
                             "control plane.")
        return self._control

    # POST /admin/<family>: the per-node views' proxied queries (admin_proxy_routes.py).
    register_admin_proxy_routes(app, cluster_route)
    # POST /manifest: anti-entropy's changed-since manifest (cluster/manifest_routes.py)
    manifest = cluster_route(app, "/manifest", methods=["POST"])(manifest_routes.manifest)



def peer_caller(request: ObjstoreRequest, peer: VerifiedPeer, operation: str) -> Caller:
    """The caller of a replicated change: origin PEER, named after the verified peer (so
    sinks that send changes on ignore it and the audit names the node)."""
    principal = Principal(user_id=f"node:{peer.node_id}", username=peer.node_id,
                          is_root=False, access_key="")
    return Caller(principal, origin=Origin.PEER,
                  request_id=str(getattr(request, "request_id", "")),
                  source_address=peer_address(request),
                  operation=operation, details={"peer_node_id": peer.node_id})


def _check_blob_id(blob_id: str) -> None:
    if not is_valid_blob_id(blob_id):
        raise AdminError("BadRequest", "A blob id must be a canonical UUID string.")


def _decoded(decode: Callable[[bytes], Any], body: bytes) -> Any:
    try:
        return decode(body)
    except WireError as error:
        raise AdminError("BadRequest", f"Not a replicated change: {error}") from None


_ADMIN_CODE_OF_STATUS = {400: "BadRequest", 403: "AccessDenied", 404: "NotFound",
                         409: "Conflict", 503: "ServiceUnavailable",
                         507: "InsufficientStorage"}


async def _engine(work: Awaitable[Any]) -> Any:
    """The engine's answer; its S3 refusals (NoSuchBucket, InvalidArgument, ...) as the
    admin JSON error of the same status, the S3 code kept in the message."""
    try:
        return await work
    except S3Error as error:
        code = _ADMIN_CODE_OF_STATUS.get(error.status)
        if code is None:
            raise
        raise AdminError(code, f"{error.code}: {error.message}") from None


async def _refuse(error: AdminError) -> Admitted:
    raise Refusal(admin_answer(error))


class _ClusterResource(GatekeeperResource):
    """The Klein app's resource below /cluster (the root consumed "cluster"; "v1" is
    consumed here), and the cluster API's `Gatekeeper`."""

    def render(self, request: ObjstoreRequest) -> Any:
        assert request.prepath is not None and request.postpath is not None
        if request.postpath[:1] == [b"v1"]:
            request.prepath.append(request.postpath.pop(0))
        return self._klein.render(request)


def _path_below_v1(request: ObjstoreRequest) -> str:
    segments = request.path.split(b"/")[3:]  # "", "cluster", "v1"
    return "/" + "/".join(s.decode("latin-1") for s in segments)


def _endpoint(app: Klein, path_info: str, method: str) -> str | None:
    found = match_route(app, path_info, method, no_endpoint=_NO_ENDPOINT)
    return None if found is None else found[0]


def _query_value(request: ObjstoreRequest, name: str) -> str | None:
    values = (request.args or {}).get(name.encode())
    if not values or len(values) != 1:
        return None
    return bytes(values[0]).decode("utf-8", "replace")
