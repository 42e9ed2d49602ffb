"""The listener's TLS options (http/tls_options.py): which client certificate it asks for
under [server.tls] alone, with [server.tls] ca_file, and with [cluster.tls] (the
listener's certificate may come from another CA: a note at start). No sockets: the
options' OpenSSL contexts are inspected."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from OpenSSL import SSL

from objstore.cluster import certs
from objstore.config import ClusterTLS, ServerTLS
from objstore.http.tls_options import (
    listener_options,
    listener_outside_cluster_ca,
    unbound_node_certificate,
)

NOW = datetime(2026, 11, 25, tzinfo=UTC)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    """A cluster CA and node-a's certificate and key; a foreign CA's node certificate."""
    ca, foreign = certs.make_ca(now=NOW), certs.make_ca(now=NOW)
    node = certs.make_node(ca, "node-a", ip_addresses=["127.0.0.1"], now=NOW)
    stranger = certs.make_node(foreign, "node-a", ip_addresses=["127.0.0.1"], now=NOW)
    contents = {"ca": ca.certificate_pem(), "cert": node.certificate_pem(),
                "key": node.key_pem(), "foreign_cert": stranger.certificate_pem(),
                "foreign_key": stranger.key_pem()}
    for name, content in contents.items():
        (tmp_path / name).write_bytes(content)
    return {name: str(tmp_path / name) for name in contents}


def verify_mode(options: object) -> int:
    context: SSL.Context = options.getContext()  # type: ignore[attr-defined]
    return context.get_verify_mode()


def test_plain_server_tls_asks_for_no_client_certificate(files: dict[str, str]) -> None:
    options = listener_options(ServerTLS(files["cert"], files["key"]), None)
    assert verify_mode(options) == SSL.VERIFY_NONE


def test_server_tls_ca_file_requires_a_client_certificate(files: dict[str, str]) -> None:
    options = listener_options(ServerTLS(files["cert"], files["key"], ca_file=files["ca"]),
                               None)
    mode = verify_mode(options)
    assert mode & SSL.VERIFY_PEER and mode & SSL.VERIFY_FAIL_IF_NO_PEER_CERT


def test_cluster_tls_asks_for_a_client_certificate_without_requiring_it(
        files: dict[str, str]) -> None:
    options = listener_options(ServerTLS(files["cert"], files["key"]),
                               ClusterTLS(files["ca"], files["cert"], files["key"]))
    mode = verify_mode(options)
    assert mode & SSL.VERIFY_PEER
    assert not mode & SSL.VERIFY_FAIL_IF_NO_PEER_CERT


def test_a_listener_certificate_of_another_ca_is_served_and_named_at_start(
        files: dict[str, str]) -> None:
    # a publicly trusted certificate for S3 clients (Authentication 7: peers verify it
    # against their system roots plus the cluster CA); client certificates are still
    # verified against the cluster CA alone
    cluster = ClusterTLS(files["ca"], files["cert"], files["key"])
    public = ServerTLS(files["foreign_cert"], files["foreign_key"])
    options = listener_options(public, cluster)
    mode = verify_mode(options)
    assert mode & SSL.VERIFY_PEER and not mode & SSL.VERIFY_FAIL_IF_NO_PEER_CERT
    note = listener_outside_cluster_ca(public, cluster)
    assert note is not None and "not issued by the cluster CA" in note
    assert "system roots" in note
    assert listener_outside_cluster_ca(ServerTLS(files["cert"], files["key"]), cluster) is None


def test_a_node_certificate_not_issued_to_the_node_id_is_named(files: dict[str, str]) -> None:
    cluster = ClusterTLS(files["ca"], files["cert"], files["key"])
    assert unbound_node_certificate(cluster, "node-a") is None
    warning = unbound_node_certificate(cluster, "node-b")
    assert warning is not None and "'node-b'" in warning and "403" in warning
