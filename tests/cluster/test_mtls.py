"""A real three-node cluster over HTTPS with mutual TLS (Authentication 7): certificates
made by `objstore gen-certs`, one listener per node serving S3, admin and cluster traffic.
Peers present their node certificates and authenticate; S3 clients without a certificate
connect; a certificate from another CA fails the handshake; a cluster route without a
client certificate answers 403 even to a request signed with the right secret, and so
does one signed as node-b presenting node-c's certificate (a node's key speaks for that
node only). A node
whose listener certificate is not issued by the cluster CA is refused at start."""

from __future__ import annotations

import hashlib
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import urllib3

from objstore.cluster.auth import ClusterSecrets, RequestLine, sign_request
from tests.cluster.harness import (
    SECRET,
    Node,
    all_trusted,
    cluster_section,
    gen_certs,
    start_cluster,
    wait_for,
)
from tests.integration.daemon import Daemon

pytestmark = pytest.mark.timeout(90)

NAMES = ("a", "b", "c")
BUCKET = "secured"
NONCE = "n" * 32


@pytest.fixture(scope="module")
def nodes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[dict[str, Node]]:
    with start_cluster(request, tmp_path_factory, NAMES, scheme="https") as started:
        yield started


def signed_ping_headers(node_id: str) -> dict[str, str]:
    """The headers of GET /cluster/v1/ping signed with the cluster's secret, as a peer
    named `node_id` sends them."""
    secrets = ClusterSecrets(SECRET.encode())
    line = RequestLine("GET", "/cluster/v1/ping", f"nonce={NONCE}")
    return sign_request(secrets, line, now=time.time(), node_id=node_id,
                        content_sha256=hashlib.sha256(b"").hexdigest())


def pool(node: Node, cert: Path | None = None, key: Path | None = None
         ) -> urllib3.HTTPSConnectionPool:
    return urllib3.HTTPSConnectionPool(
        "127.0.0.1", node.daemon.port, retries=False, timeout=10.0, ca_certs=str(node.ca),
        cert_file=None if cert is None else str(cert),
        key_file=None if key is None else str(key))


def certs_dir(node: Node) -> Path:
    assert node.ca is not None
    return node.ca.parent


def test_peers_authenticate_over_mutual_tls(nodes: dict[str, Node]) -> None:
    for name, node in nodes.items():
        assert node.daemon.endpoint.startswith("https://")
        wait_for(f"node {name} trusts both peers", lambda node=node: all_trusted(node, 2))
        assert node.admin.get("/cluster").json["gate"] == "open"


def test_a_put_on_one_node_is_read_on_another(nodes: dict[str, Node]) -> None:
    for name in NAMES:
        wait_for(f"node {name} trusts both peers", lambda name=name: all_trusted(nodes[name], 2))
        nodes[name].s3.create_bucket(Bucket=BUCKET)  # buckets are not replicated yet
    body = b"over mutual TLS " * 70000
    nodes["a"].s3.put_object(Bucket=BUCKET, Key="object", Body=body)
    for name in ("b", "c"):
        assert nodes[name].s3.get_object(Bucket=BUCKET, Key="object")["Body"].read() == body


def test_s3_clients_need_no_certificate(nodes: dict[str, Node]) -> None:
    # boto3 verifies the node's certificate against the cluster CA and shows none itself.
    names = [bucket["Name"] for bucket in nodes["b"].s3.list_buckets()["Buckets"]]
    assert isinstance(names, list)
    # 200 once its first anti-entropy pass toward the peers it trusts is done (syncing)
    wait_for("node c answers its health without a certificate",
             lambda: pool(nodes["c"]).request("GET", "/admin/health").status == 200)


def test_a_cluster_route_without_a_client_certificate_is_refused(
        nodes: dict[str, Node]) -> None:
    a = nodes["a"]
    unsigned = pool(a).request("GET", f"/cluster/v1/ping?nonce={NONCE}")
    assert unsigned.status == 403
    # The right secret is not enough: the certificate is checked first.
    signed = pool(a).request("GET", f"/cluster/v1/ping?nonce={NONCE}",
                             headers=signed_ping_headers("node-b"))
    assert signed.status == 403, signed.data
    assert b"certificate" in signed.data
    # The public health needs neither.
    assert pool(a).request("GET", "/cluster/v1/health").status == 200


def test_a_peer_certificate_and_the_secret_are_accepted(nodes: dict[str, Node]) -> None:
    a, certs = nodes["a"], certs_dir(nodes["a"])
    answer = pool(a, certs / "node-b.crt", certs / "node-b.key").request(
        "GET", f"/cluster/v1/ping?nonce={NONCE}", headers=signed_ping_headers("node-b"))
    assert answer.status == 200, answer.data
    assert answer.json()["node_id"] == "node-a"
    # A certificate of the cluster without the secret is refused all the same.
    unsigned = pool(a, certs / "node-b.crt", certs / "node-b.key").request(
        "GET", f"/cluster/v1/ping?nonce={NONCE}")
    assert unsigned.status == 403


def test_a_certificate_of_another_node_than_the_signer_is_refused(
        nodes: dict[str, Node]) -> None:
    a, certs = nodes["a"], certs_dir(nodes["a"])
    as_c = pool(a, certs / "node-c.crt", certs / "node-c.key")
    answer = as_c.request("GET", f"/cluster/v1/ping?nonce={NONCE}",
                          headers=signed_ping_headers("node-b"))
    assert answer.status == 403, answer.data
    assert b"not issued to node node-b" in answer.data
    # the same certificate signing as its own node passes
    own = as_c.request("GET", f"/cluster/v1/ping?nonce={NONCE}",
                       headers=signed_ping_headers("node-c"))
    assert own.status == 200, own.data


def test_a_certificate_from_a_foreign_ca_is_refused(
        nodes: dict[str, Node], tmp_path: Path) -> None:
    gen_certs(tmp_path, "ca")
    gen_certs(tmp_path, "node", "node-b", "--dns", "node-b", "--ip", "127.0.0.1")
    foreign = pool(nodes["a"], tmp_path / "node-b.crt", tmp_path / "node-b.key")
    try:
        answer = foreign.request("GET", f"/cluster/v1/ping?nonce={NONCE}",
                                 headers=signed_ping_headers("node-b"))
    except (urllib3.exceptions.SSLError, urllib3.exceptions.ProtocolError,
            ssl.SSLError, ConnectionError):
        return  # the handshake failed: unknown CA
    assert answer.status == 403, answer.data


def test_a_listener_certificate_of_another_ca_is_refused_at_start(
        nodes: dict[str, Node], tmp_path: Path) -> None:
    certs = certs_dir(nodes["a"])
    gen_certs(tmp_path, "ca")
    gen_certs(tmp_path, "node", "stranger", "--ip", "127.0.0.1")
    tls = (f'[server.tls]\ncert_file = "{tmp_path / "stranger.crt"}"\n'
           f'key_file = "{tmp_path / "stranger.key"}"\n'
           f'[cluster.tls]\nca_file = "{certs / "cluster-ca.crt"}"\n'
           f'cert_file = "{certs / "node-c.crt"}"\nkey_file = "{certs / "node-c.key"}"\n')
    section = cluster_section("node-x", [nodes["a"].daemon.endpoint], size=3)
    daemon = Daemon(tmp_path / "node-x", workers=1, tls_ca=certs / "cluster-ca.crt",
                    extra_config=section + tls)
    try:
        with pytest.raises(RuntimeError, match="not issued by the cluster CA"):
            daemon.start(timeout=30)
    finally:
        daemon.cleanup()
