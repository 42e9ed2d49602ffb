"""The /cluster/v1 routes in memory: public health, the authenticated ping, and the
cluster_route check (signature under either secret, replay window, loop, mTLS peer
certificate, body cap and body hash), through the real root resource and site behind
StubTreq, with a Clock. No socket, no thread."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from treq.testing import StubTreq
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.web.resource import Resource

from objstore.cluster import api as cluster_api
from objstore.cluster.api import ClusterApi, NodeFigures, certificate_refusal, verify_peer
from objstore.cluster.auth import (
    ClusterSecrets,
    RequestLine,
    SecretSlot,
    config_fingerprint,
    new_nonce,
    nonce_mac,
    sign_request,
)
from objstore.config import Cluster, ClusterTLS, ServerLimits
from objstore.http.health import HealthState
from objstore.http.root import RootResource
from objstore.http.site import ObjstoreSite

NOW = 1_700_000_000.0
SECRET = "cluster-secret-Zx8-k2Lq9@wPm4"
OLD_SECRET = "older-secret-Qr5-h7Nc3#vBt8"
CLUSTER = Cluster(enabled=True, secret=SECRET, consistency="quorum", cluster_size=3)
FIGURES = NodeFigures(disk_total=1000, disk_available=400, max_seq=42)


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class ClusterNode:
    """One node's HTTP side in memory: the real root resource with the cluster API mounted
    (the S3 and admin APIs are empty resources), behind StubTreq."""

    def __init__(self, tmp_path: Path, node_id: str, cluster: Cluster = CLUSTER, *,
                 clock: Clock | None = None, figures: NodeFigures = FIGURES) -> None:
        self.node_id = node_id
        self.cluster = cluster
        if clock is None:
            clock = Clock()
            clock.advance(NOW)
        self.clock = clock
        self.figures = figures
        self.health = HealthState()
        self.api = ClusterApi(cluster=cluster, node_id=node_id, health=self.health,
                              figures=self._figures, clock=clock.seconds)
        root = RootResource(s3=Resource(), admin=Resource(), limits=ServerLimits(),
                            domains=(), cluster=self.api.resource())
        self.treq = served(root, tmp_path)

    async def _figures(self) -> NodeFigures:
        return self.figures

    def send(self, method: str, path: str, *, sender: str | None = "node-b",
             secret: str = SECRET, body: bytes = b"", at: float | None = None,
             headers: dict[str, str] | None = None) -> Answer:
        """A request to this node signed as `sender` (None: unsigned)."""
        url = "http://node-a.test" + path
        sent = dict(headers or {})
        if sender is not None:
            split = urlsplit(url)
            sent.update(sign_request(
                ClusterSecrets(secret.encode()), RequestLine(method, split.path, split.query),
                now=self.clock.seconds() if at is None else at, node_id=sender,
                content_sha256=hashlib.sha256(body).hexdigest()))
        response = result(self.treq.request(method, url, headers={k: [v] for k, v in sent.items()},
                                            data=body or None))
        content = result(response.content())
        return Answer(response.code, {k.decode().lower(): v[-1].decode()
                                      for k, v in response.headers.getAllRawHeaders()}, content)


def served(root: Resource, tmp_path: Path) -> StubTreq:
    """StubTreq serving `root` from the node's own site (its request class carries the
    request id, the body spool and the API the root chose)."""
    site = ObjstoreSite(root, tmp_dir=str(tmp_path), limits=ServerLimits(),
                        server_header="objstore")
    site.timeOut = None  # no idle timer on the global reactor
    stub = StubTreq(root)
    stub._agent._serverFactory = site
    return stub


def result(deferred: Deferred[Any]) -> Any:
    found: list[Any] = []
    deferred.addBoth(found.append)
    assert found, "the request did not complete in memory"
    if hasattr(found[0], "raiseException"):
        found[0].raiseException()
    return found[0]


@pytest.fixture
def node(tmp_path: Path) -> ClusterNode:
    return ClusterNode(tmp_path, "node-a")


# -- public health --------------------------------------------------------------------------


def test_public_health_names_status_and_node_only(node: ClusterNode) -> None:
    answer = node.send("GET", "/cluster/v1/health", sender=None)
    assert answer.status == 200
    assert answer.headers["content-type"] == "application/json"
    assert answer.json() == {"status": "ok", "node_id": "node-a"}


def test_public_health_follows_the_drain(node: ClusterNode) -> None:
    node.health.draining = True
    answer = node.send("GET", "/cluster/v1/health", sender=None)
    assert (answer.status, answer.json()["status"]) == (503, "draining")


# -- ping -----------------------------------------------------------------------------------


def test_ping_answers_the_authenticated_document(node: ClusterNode) -> None:
    nonce = new_nonce()
    answer = node.send("GET", f"/cluster/v1/ping?nonce={nonce}")
    assert answer.status == 200
    document = answer.json()
    assert document == {
        "node_id": "node-a", "config_fingerprint": config_fingerprint(CLUSTER),
        "disk_total": 1000, "disk_available": 400, "max_seq": 42,
        "nonce_mac": nonce_mac(SECRET.encode(), nonce), "protocol": 1, "time": NOW}


def test_ping_signed_with_the_previous_secret_is_answered_under_it(tmp_path: Path) -> None:
    node = ClusterNode(tmp_path, "node-a", replace(CLUSTER, secret_previous=OLD_SECRET))
    nonce = new_nonce()
    answer = node.send("GET", f"/cluster/v1/ping?nonce={nonce}", secret=OLD_SECRET)
    assert answer.status == 200
    assert answer.json()["nonce_mac"] == nonce_mac(OLD_SECRET.encode(), nonce)


@pytest.mark.parametrize("query", ["", "?nonce=short", "?nonce=" + "a" * 129,
                                   "?nonce=abc%21defghijklmnopq"])
def test_ping_without_a_valid_nonce_is_a_bad_request(node: ClusterNode, query: str) -> None:
    answer = node.send("GET", "/cluster/v1/ping" + query)
    assert (answer.status, answer.json()["error"]) == (400, "BadRequest")


def test_unsigned_ping_is_refused_without_anything_secret(node: ClusterNode) -> None:
    answer = node.send("GET", f"/cluster/v1/ping?nonce={new_nonce()}", sender=None)
    assert (answer.status, answer.json()["error"]) == (403, "AccessDenied")
    assert b"fingerprint" not in answer.body and b"nonce_mac" not in answer.body


def test_ping_under_another_secret_is_refused(node: ClusterNode) -> None:
    answer = node.send("GET", f"/cluster/v1/ping?nonce={new_nonce()}", secret=OLD_SECRET)
    assert answer.status == 403


@pytest.mark.parametrize("skew", [-15 * 60 - 1, 15 * 60 + 1])
def test_a_date_outside_the_window_is_refused(node: ClusterNode, skew: float) -> None:
    answer = node.send("GET", f"/cluster/v1/ping?nonce={new_nonce()}", at=NOW + skew)
    assert answer.status == 403
    assert "15 minutes" in answer.json()["message"]


def test_a_changed_nonce_breaks_the_signature(node: ClusterNode) -> None:
    url = "/cluster/v1/ping?nonce=" + new_nonce()
    headers = sign_request(ClusterSecrets(SECRET.encode()), RequestLine("GET", "/cluster/v1/ping",
                           "nonce=" + new_nonce()), now=NOW, node_id="node-b",
                           content_sha256=hashlib.sha256(b"").hexdigest())
    answer = node.send("GET", url, sender=None, headers=headers)
    assert answer.status == 403


def test_a_request_from_this_node_itself_is_a_loop(node: ClusterNode) -> None:
    answer = node.send("GET", f"/cluster/v1/ping?nonce={new_nonce()}", sender="node-a")
    assert (answer.status, answer.json()["error"]) == (409, "Conflict")


def test_unknown_routes_and_methods_answer_json(node: ClusterNode) -> None:
    missing = node.send("GET", "/cluster/v1/nothing")
    assert (missing.status, missing.json()["error"]) == (404, "NotFound")
    wrong = node.send("DELETE", "/cluster/v1/ping")
    assert (wrong.status, wrong.json()["error"]) == (405, "MethodNotAllowed")


def test_a_signed_body_is_refused_before_it_is_read(node: ClusterNode) -> None:
    # The ping takes no body; its route still caps one (the check every cluster route has).
    answer = node.send("GET", f"/cluster/v1/ping?nonce={new_nonce()}",
                       body=b"x" * (2 * 1024 * 1024 + 1))
    assert (answer.status, answer.json()["error"]) == (413, "PayloadTooLarge")


def test_an_unsigned_body_is_refused_before_it_is_read(node: ClusterNode) -> None:
    answer = node.send("GET", f"/cluster/v1/ping?nonce={new_nonce()}", sender=None,
                       body=b"{}")
    assert (answer.status, answer.json()["error"]) == (403, "AccessDenied")


def test_a_body_that_is_not_the_signed_one_is_refused(node: ClusterNode) -> None:
    url = f"/cluster/v1/ping?nonce={new_nonce()}"
    split = urlsplit("http://x" + url)
    headers = sign_request(ClusterSecrets(SECRET.encode()),
                           RequestLine("GET", split.path, split.query), now=NOW,
                           node_id="node-b", content_sha256=hashlib.sha256(b"{}").hexdigest())
    answer = node.send("GET", url, sender=None, headers=headers, body=b'{"a": 1}')
    assert (answer.status, answer.json()["error"]) == (400, "BadRequest")


# -- mTLS: a peer certificate per route -------------------------------------------------------


def test_certificate_decision() -> None:
    assert certificate_refusal(False, None) is None
    assert certificate_refusal(True, object()) is None
    refused = certificate_refusal(True, None)
    assert refused is not None and refused.status == 403


TLS_CLUSTER = replace(CLUSTER, tls=ClusterTLS("ca.pem", "node.pem", "node.key"))


def test_with_cluster_tls_a_request_without_certificate_is_refused(tmp_path: Path) -> None:
    node = ClusterNode(tmp_path, "node-a", TLS_CLUSTER)
    answer = node.send("GET", f"/cluster/v1/ping?nonce={new_nonce()}")
    assert answer.status == 403
    assert "certificate" in answer.json()["message"]
    assert node.send("GET", "/cluster/v1/health", sender=None).status == 200


def test_with_cluster_tls_a_request_with_a_certificate_passes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.unit.test_cluster_cert_binding import node as certificate

    node = ClusterNode(tmp_path, "node-a", TLS_CLUSTER)
    monkeypatch.setattr(cluster_api, "peer_certificate",
                        lambda request: certificate("node-b", "node-b"))
    assert node.send("GET", f"/cluster/v1/ping?nonce={new_nonce()}").status == 200
    # signed as node-b, node-c's certificate: the key of one node speaks for it only
    monkeypatch.setattr(cluster_api, "peer_certificate",
                        lambda request: certificate("node-c", "node-c"))
    answer = node.send("GET", f"/cluster/v1/ping?nonce={new_nonce()}")
    assert answer.status == 403 and "node-b" in answer.json()["message"]


def test_verify_peer_names_the_sender_and_its_secret() -> None:
    secrets = ClusterSecrets(SECRET.encode(), OLD_SECRET.encode())
    line = RequestLine("POST", "/cluster/v1/object")
    headers = sign_request(ClusterSecrets(OLD_SECRET.encode()), line, now=NOW,
                           node_id="node-c", content_sha256=hashlib.sha256(b"").hexdigest())
    peer = verify_peer(secrets, line, headers, now=NOW, own_node_id="node-a")
    assert (peer.node_id, peer.slot) == ("node-c", SecretSlot.PREVIOUS)


def test_every_outcome_but_ok_is_403() -> None:
    line = RequestLine("GET", "/cluster/v1/ping")
    for headers in ({}, {"x-amz-date": "x", "x-objstore-node-id": "b",
                         "x-amz-content-sha256": "0" * 64,
                         "x-objstore-cluster-signature": "0" * 64}):
        with pytest.raises(cluster_api.AdminError) as refused:
            verify_peer(ClusterSecrets(SECRET.encode()), line, headers, now=NOW,
                        own_node_id="node-a")
        assert refused.value.status == 403


# -- the node's seam ---------------------------------------------------------------------------


def test_the_node_mounts_the_api_only_when_the_cluster_is_enabled(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from objstore.blobs.store import BlobStore
    from objstore.cluster.wiring import cluster_api
    from objstore.engine.changes import ChangeHook
    from objstore.engine.versioning import KeyLocks
    from objstore.threads import InlinePool

    class Meta:
        async def max_seq(self) -> int:
            return 9

        async def changed_since(self, since: int, limit: int) -> Any:
            raise AssertionError("not asked")

    def config(enabled: bool) -> Any:
        return SimpleNamespace(cluster=replace(CLUSTER, enabled=enabled),
                               storage=SimpleNamespace(data_dir=str(tmp_path)))

    clock = Clock()
    clock.advance(NOW)
    parts: Any = {"blobs": BlobStore(str(tmp_path / "data"), fsync=False),
                  "locks": KeyLocks(), "changes": ChangeHook()}
    assert cluster_api(config(False), "node-a", HealthState(), Meta(),  # type: ignore[arg-type]
                       InlinePool(), clock.seconds, **parts) is None
    api = cluster_api(config(True), "node-a", HealthState(), Meta(),  # type: ignore[arg-type]
                      InlinePool(), clock.seconds, **parts)
    root = RootResource(s3=Resource(), admin=Resource(), limits=ServerLimits(), domains=(),
                        cluster=api)
    node = ClusterNode(tmp_path, "node-a")
    node.treq = served(root, tmp_path)
    answer = node.send("GET", f"/cluster/v1/ping?nonce={new_nonce()}")
    assert answer.status == 200
    document = answer.json()
    assert document["max_seq"] == 9 and document["disk_total"] > 0
