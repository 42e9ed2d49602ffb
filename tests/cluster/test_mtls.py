"""A real three-node cluster over HTTPS with mutual TLS (Authentication 7): certificates
made by `objstore gen-certs`, one listener per node serving S3, admin and cluster traffic.
Peers present their node certificates and authenticate; S3 clients without a certificate
connect; a certificate from another CA fails the handshake; a cluster route without a
client certificate answers 403 even to a request signed with the right secret, and so
does one signed as node-b presenting node-c's certificate (a node's key speaks for that
node only). A node may serve a publicly trusted listener certificate: peers verify it
against the cluster CA added to their system roots, cluster routes still want the
cluster CA's client certificate."""

from __future__ import annotations

import contextlib
import hashlib
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass
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
from tests.integration.conftest import running_daemon
from tests.integration.daemon import Daemon, free_port

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


@dataclass
class TrustingDaemon(Daemon):
    """A daemon whose system roots are `system_roots` (SSL_CERT_FILE: OpenSSL reads it
    in place of the distribution's bundle)."""

    system_roots: Path | None = None

    def env(self) -> dict[str, str]:
        env = super().env()
        if self.system_roots is not None:
            env["SSL_CERT_FILE"] = str(self.system_roots)
        return env


def test_a_node_may_serve_a_publicly_trusted_certificate(
        request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """Authentication 7: peers verify a listener against the cluster CA added to their
    system roots. x serves S3 clients a certificate of a "public" CA (one of its peers'
    system roots, through SSL_CERT_FILE); y trusts x and x trusts y; cluster routes
    still need a client certificate of the cluster CA: a public one naming node-y is
    refused."""
    cluster_ca, public = tmp_path / "cluster", tmp_path / "public"
    for directory in (cluster_ca, public):
        directory.mkdir()
        gen_certs(directory, "ca")
    for name in ("node-x", "node-y"):
        gen_certs(cluster_ca, "node", name, "--dns", name, "--ip", "127.0.0.1")
    gen_certs(public, "node", "www-x", "--ip", "127.0.0.1")  # x's listener, for S3 clients
    gen_certs(public, "node", "node-y", "--dns", "node-y", "--ip", "127.0.0.1")
    roots = tmp_path / "system-roots.pem"
    bundle = Path("/etc/ssl/certs/ca-certificates.crt")
    roots.write_bytes((bundle.read_bytes() if bundle.exists() else b"")
                      + (public / "cluster-ca.crt").read_bytes())
    ports = {"x": free_port(), "y": free_port()}

    def daemon(name: str, listener: str, listener_ca: Path) -> TrustingDaemon:
        other = "y" if name == "x" else "x"
        section = cluster_section(f"node-{name}", [f"https://127.0.0.1:{ports[other]}"],
                                  size=2)
        tls = (f'[server.tls]\ncert_file = "{listener}.crt"\nkey_file = "{listener}.key"\n'
               f'[cluster.tls]\nca_file = "{cluster_ca / "cluster-ca.crt"}"\n'
               f'cert_file = "{cluster_ca / f"node-{name}.crt"}"\n'
               f'key_file = "{cluster_ca / f"node-{name}.key"}"\n')
        return TrustingDaemon(tmp_path / f"node-{name}", workers=1, port=ports[name],
                              tls_ca=listener_ca, extra_config=section + tls,
                              system_roots=roots)

    x_daemon = daemon("x", str(public / "www-x"), public / "cluster-ca.crt")
    y_daemon = daemon("y", str(cluster_ca / "node-y"), cluster_ca / "cluster-ca.crt")
    with contextlib.ExitStack() as stack:
        x = Node(stack.enter_context(running_daemon(request, x_daemon)), "node-x")
        y = Node(stack.enter_context(running_daemon(request, y_daemon)), "node-y")
        wait_for("y trusts x (x's listener verified through the system roots)",
                 lambda: all_trusted(y, 1), deadline=60)
        wait_for("x trusts y", lambda: all_trusted(x, 1), deadline=60)
        # an S3 client that knows only the public CA talks to x
        assert isinstance(x.s3.list_buckets()["Buckets"], list)
        # a cluster route: y's certificate of the cluster CA passes ...
        ok = pool(x, cluster_ca / "node-y.crt", cluster_ca / "node-y.key").request(
            "GET", f"/cluster/v1/ping?nonce={NONCE}", headers=signed_ping_headers("node-y"))
        assert ok.status == 200, ok.data
        # ... a public certificate naming node-y does not, though x trusts its CA as a root
        impostor = pool(x, public / "node-y.crt", public / "node-y.key")
        try:
            refused = impostor.request("GET", f"/cluster/v1/ping?nonce={NONCE}",
                                       headers=signed_ping_headers("node-y"))
        except (urllib3.exceptions.SSLError, urllib3.exceptions.ProtocolError,
                ssl.SSLError, ConnectionError):
            pass  # the handshake failed: not the cluster CA
        else:
            assert refused.status == 403, refused.data
        assert "not issued by the cluster CA" in x_daemon.log_path.read_text()
