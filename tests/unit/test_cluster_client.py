"""ClusterClient against other nodes' ClusterApi in memory: every probe outcome of the
verdict table (authenticated, untrusted, rejected with the identity from public health,
legacy, loop, no answer, timeout), secret rotation, config drift and clock offset. Each
"node" is the real root resource behind StubTreq; a router hands each request to the node
its URL names. No socket, no sleep: timeouts run on a Clock."""

from __future__ import annotations

import datetime
import json
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from treq.testing import StubTreq
from twisted.internet.defer import Deferred, fail
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.task import Clock
from twisted.web.resource import Resource

from objstore.cluster import certs
from objstore.cluster.auth import config_fingerprint, new_nonce, nonce_mac
from objstore.cluster.client import (
    MAX_ANSWER_BYTES,
    ClusterClient,
    ClusterTlsPolicy,
    Exchange,
    probe_result,
)
from objstore.cluster.membership import Membership, PeerEvent, Verdict, classify
from objstore.config import Cluster, ClusterTLS, ServerLimits
from objstore.http.root import RootResource
from tests.unit.test_cluster_api import (
    CLUSTER,
    NOW,
    OLD_SECRET,
    SECRET,
    ClusterNode,
    result,
    served,
)


class Router:
    """treq's request, handed to the in-memory node (or stand-in) its URL's host names."""

    def __init__(self) -> None:
        self.hosts: dict[str, Any] = {}
        self.requests: list[tuple[str, str, dict[str, Any]]] = []

    def request(self, method: str, url: str, **kwargs: Any) -> Deferred[Any]:
        self.requests.append((method, url, kwargs))
        target = self.hosts.get(urlsplit(url).netloc)
        if target is None:
            return fail(ConnectionRefusedError())
        if isinstance(target, Deferred):
            return target  # a peer that never answers
        return target.request(method, url, **kwargs)  # type: ignore[no-any-return]


@pytest.fixture
def clock() -> Clock:
    clock = Clock()
    clock.advance(NOW)
    return clock


@pytest.fixture
def router() -> Router:
    return Router()


def client(router: Router, clock: Clock, cluster: Cluster = CLUSTER,
           node_id: str = "node-b") -> ClusterClient:
    return ClusterClient(cluster=cluster, node_id=node_id, http=router, clock=clock)


def peer(router: Router, tmp_path: Path, clock: Clock, node_id: str = "node-a",
         cluster: Cluster = CLUSTER, host: str = "a.test:9000") -> ClusterNode:
    node = ClusterNode(tmp_path / node_id, node_id, cluster, clock=clock)
    router.hosts[host] = node.treq
    return node


def probe(c: ClusterClient, base_url: str = "http://a.test:9000",
          nonce: str | None = None) -> Any:
    return result(Deferred.fromCoroutine(c.ping(base_url, nonce or new_nonce())))


def test_an_authenticated_probe(router: Router, clock: Clock, tmp_path: Path) -> None:
    peer(router, tmp_path, clock)
    found = probe(client(router, clock))
    assert found.status == 200 and found.mac_ok and found.fingerprint_ok
    assert (found.node_id, found.disk_total, found.disk_available, found.max_seq) == (
        "node-a", 1000, 400, 42)
    assert found.clock_offset_seconds == 0.0
    assert classify(found, "node-b") is Verdict.AUTHENTICATED
    # signed: the peer's route saw a verified request, and the nonce travelled in the query
    method, url, kwargs = router.requests[0]
    assert (method, urlsplit(url).path) == ("GET", "/cluster/v1/ping")
    assert "x-objstore-cluster-signature" in kwargs["headers"]


def test_the_peers_clock_offset_is_measured(router: Router, clock: Clock,
                                            tmp_path: Path) -> None:
    ahead = Clock()
    ahead.advance(NOW + 7.5)
    node = ClusterNode(tmp_path, "node-a", clock=ahead)
    router.hosts["a.test:9000"] = node.treq
    assert probe(client(router, clock)).clock_offset_seconds == 7.5


def test_rotation_the_peer_answers_under_the_secret_that_verified(
        router: Router, clock: Clock, tmp_path: Path) -> None:
    # a: already rotated (new secret, old one as previous); b: still on the old secret
    peer(router, tmp_path, clock, cluster=replace(CLUSTER, secret_previous=OLD_SECRET))
    old = replace(CLUSTER, secret=OLD_SECRET)
    found = probe(client(router, clock, old))
    assert found.status == 200 and found.mac_ok
    # b's fingerprint is made under the old secret; a's under the new: b does not know it
    assert not found.fingerprint_ok
    # with both secrets b accepts both MAC and fingerprint
    both = replace(CLUSTER, secret=OLD_SECRET, secret_previous=SECRET)
    assert probe(client(router, clock, both)).fingerprint_ok


def test_a_peer_refusing_our_secret_is_rejected_and_named_by_public_health(
        router: Router, clock: Clock, tmp_path: Path) -> None:
    peer(router, tmp_path, clock)
    stranger = replace(CLUSTER, secret="another-secret-Kd3-x9Lq2!mZ")
    found = probe(client(router, clock, stranger))
    assert (found.status, found.node_id, found.mac_ok) == (403, "node-a", False)
    assert classify(found, "node-b") is Verdict.REJECTED
    assert found.disk_total is None  # nothing learnt from an unauthenticated answer


def test_a_drifted_config_is_authenticated_but_not_config_ok(
        router: Router, clock: Clock, tmp_path: Path) -> None:
    peer(router, tmp_path, clock, cluster=replace(CLUSTER, cluster_size=5))
    found = probe(client(router, clock))
    assert found.mac_ok and not found.fingerprint_ok
    membership = Membership("node-b")
    events = membership.observe("http://a.test:9000", found, now=NOW)
    assert PeerEvent.CONFIG_DRIFT in events and not membership.eligible_peers()


def test_probing_this_node_itself_is_a_loop(router: Router, clock: Clock,
                                            tmp_path: Path) -> None:
    peer(router, tmp_path, clock, node_id="node-b")
    found = probe(client(router, clock))
    assert found.status == 409
    assert classify(found, "node-b") is Verdict.SELF


def test_a_legacy_peer_answers_404(router: Router, clock: Clock, tmp_path: Path) -> None:
    # a node without the cluster API: the root's reserved JSON 404 for /cluster/v1
    legacy = RootResource(s3=Resource(), admin=Resource(), limits=ServerLimits(), domains=())
    router.hosts["a.test:9000"] = served(legacy, tmp_path)
    found = probe(client(router, clock))
    assert (found.status, found.node_id) == (404, None)
    assert classify(found, "node-b") is Verdict.LEGACY


def test_no_answer_is_a_failure(router: Router, clock: Clock) -> None:
    found = probe(client(router, clock), "http://nobody.test:9000")
    assert found.status is None
    assert classify(found, "node-b") is Verdict.FAILED


def test_a_peer_that_never_answers_times_out(router: Router, clock: Clock) -> None:
    router.hosts["a.test:9000"] = Deferred()
    pending = Deferred.fromCoroutine(client(router, clock).ping("http://a.test:9000",
                                                                new_nonce()))
    found: list[Any] = []
    pending.addBoth(found.append)
    clock.advance(CLUSTER.request_timeout_seconds - 0.1)
    assert not found
    clock.advance(0.2)
    assert found and found[0].status is None


def test_an_oversized_answer_is_no_answer(router: Router, clock: Clock) -> None:
    class Huge(Resource):
        isLeaf = True

        def render_GET(self, request: Any) -> bytes:  # noqa: N802
            return b"x" * (MAX_ANSWER_BYTES + 1)

    router.hosts["a.test:9000"] = StubTreq(Huge())
    assert probe(client(router, clock)).status is None


# -- the answer, checked --------------------------------------------------------------------


def answer(**fields: Any) -> Exchange:
    return Exchange(200, json.dumps(fields).encode())


def test_an_impostors_mac_is_not_trusted() -> None:
    nonce = new_nonce()
    forged = answer(node_id="node-a", nonce_mac=nonce_mac(b"guessed-secret-1234", nonce),
                    config_fingerprint=config_fingerprint(CLUSTER), disk_total=1)
    found = probe_result(forged, cluster=CLUSTER, nonce=nonce, sent_at=NOW, received_at=NOW)
    assert (found.status, found.mac_ok) == (200, False)
    assert classify(found, "node-b") is Verdict.UNTRUSTED


def test_a_mac_for_another_nonce_is_not_trusted() -> None:
    other = nonce_mac(SECRET.encode(), new_nonce())
    found = probe_result(answer(nonce_mac=other), cluster=CLUSTER, nonce=new_nonce(),
                         sent_at=NOW, received_at=NOW)
    assert not found.mac_ok


@pytest.mark.parametrize("body", [b"", b"[]", b"not json", b'"text"'])
def test_a_200_that_is_no_document_is_untrusted(body: bytes) -> None:
    found = probe_result(Exchange(200, body), cluster=CLUSTER, nonce=new_nonce(),
                         sent_at=NOW, received_at=NOW)
    assert found == found.__class__(status=200, latency_seconds=0.0)


def test_figures_of_the_wrong_type_are_left_out() -> None:
    nonce = new_nonce()
    found = probe_result(answer(nonce_mac=nonce_mac(SECRET.encode(), nonce),
                                disk_total=True, disk_available=-1, max_seq="9", time="now",
                                node_id=7),
                         cluster=CLUSTER, nonce=nonce, sent_at=NOW, received_at=NOW + 2)
    assert found.mac_ok
    assert (found.disk_total, found.disk_available, found.max_seq, found.node_id,
            found.clock_offset_seconds) == (None, None, None, None, None)


def test_clock_offset_takes_the_answer_as_given_halfway() -> None:
    nonce = new_nonce()
    found = probe_result(answer(time=NOW + 11.0), cluster=CLUSTER, nonce=nonce,
                         sent_at=NOW, received_at=NOW + 2.0)
    assert found.clock_offset_seconds == 10.0


# -- mTLS policy ------------------------------------------------------------------------------


def test_the_tls_policy_loads_cluster_tls_files(tmp_path: Path) -> None:
    now = datetime.datetime.now(datetime.UTC)
    ca = certs.make_ca(now=now)
    node = certs.make_node(ca, "node-b", dns_names=["node-b"], now=now)
    paths = {}
    for name, data in (("ca.pem", ca.certificate_pem()), ("node.pem", node.certificate_pem()),
                       ("node.key", node.key_pem())):
        (tmp_path / name).write_bytes(data)
        paths[name] = str(tmp_path / name)
    policy = ClusterTlsPolicy.from_files(ClusterTLS(paths["ca.pem"], paths["node.pem"],
                                                    paths["node.key"]))
    creator = policy.creatorForNetloc(b"node-a", 9000)
    assert creator is not None
    assert creator._hostname == "node-a"  # verified against the name dialled


def test_peers_listeners_are_verified_against_the_cluster_ca_added_to_the_system_roots(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Authentication 7: a peer may serve a publicly trusted certificate (its issuer among
    the system roots, here SSL_CERT_FILE) or one of the cluster CA; a third CA's fails."""
    from OpenSSL import crypto  # noqa: PLC0415
    from twisted.web.iweb import IPolicyForHTTPS  # noqa: PLC0415

    now = datetime.datetime.now(datetime.UTC)
    ca, public, stranger = (certs.make_ca(now=now) for _ in range(3))
    node = certs.make_node(ca, "node-b", dns_names=["node-b"], now=now)
    (tmp_path / "system-roots.pem").write_bytes(public.certificate_pem())
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "system-roots.pem"))
    for name, data in (("ca.pem", ca.certificate_pem()), ("node.pem", node.certificate_pem()),
                       ("node.key", node.key_pem())):
        (tmp_path / name).write_bytes(data)
    policy = ClusterTlsPolicy.from_files(ClusterTLS(*(str(tmp_path / name) for name in (
        "ca.pem", "node.pem", "node.key"))))
    assert IPolicyForHTTPS.providedBy(policy)  # what Agent asks of it
    creator = policy.creatorForNetloc(b"node-a", 9000)
    assert policy.creatorForNetloc(b"node-a", 9000) is creator  # one context per name
    store = creator._createConnection.__self__.getContext().get_cert_store()

    def verifies(issuer: certs.Issued) -> bool:
        leaf = certs.make_node(issuer, "node-a", dns_names=["node-a"], now=now)
        pem = crypto.load_certificate(crypto.FILETYPE_PEM, leaf.certificate_pem())
        try:
            crypto.X509StoreContext(store, pem).verify_certificate()
        except crypto.X509StoreContextError:
            return False
        return True

    assert verifies(ca) and verifies(public) and not verifies(stranger)
