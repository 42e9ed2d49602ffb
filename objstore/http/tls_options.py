"""The TLS options of the listener (spec: Authentication 7; TWISTED-NOTES f).

The listener ([server.tls]) always presents [server.tls] cert_file. What it asks of the
client depends on the other settings:

* [server.tls] ca_file: every client must present a certificate signed by that CA (the
  handshake fails otherwise);
* [cluster.tls] (which start-up refuses together with [server.tls] ca_file): the
  listener ASKS for a client certificate and verifies one that is sent against the
  cluster CA only (a certificate from any other issuer fails the handshake), but does not
  require one, so S3 and admin clients without certificates still connect; cluster routes
  refuse requests that arrived without one (`cluster/api.py` `certificate_refusal`: 403);
* neither: no client certificate is asked for.

Peers verify this listener against the cluster CA *added to* their system roots
(`cluster/client.py` `ClusterTlsPolicy`, spec Authentication 7), so under [cluster.tls]
the [server.tls] certificate is usually the node certificate itself (the same cert_file
and key_file in both sections), but may be a publicly trusted one that S3 clients verify
without the cluster CA: peers then need its issuer among their system roots, and it must
name the address they dial. `listener_outside_cluster_ca` says so at start (an info
line). Only the node's identity comes from the cluster CA: its client certificate, which
this listener verifies against the cluster CA alone, and the nonce MAC.

Peers refuse a cluster request whose certificate is not issued to the node id it is
signed with (`convergence/cert_binding.py`): `unbound_node_certificate` names that mistake at
start (a warning: the node runs, its peers refuse it).

Start-up only: these functions read files.
"""

from __future__ import annotations

from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from twisted.internet import ssl

from objstore.config import ClusterTLS, ServerTLS
from objstore.convergence.cert_binding import certificate_binds


class TlsSetupError(Exception):
    """A TLS configuration that can not work; one line, for the start-up error."""


def read_certificate(path: str) -> ssl.Certificate:
    with open(path, "rb") as handle:
        return ssl.Certificate.loadPEM(handle.read())


def read_private(cert_file: str, key_file: str) -> ssl.PrivateCertificate:
    with open(cert_file, "rb") as cert, open(key_file, "rb") as key:
        return ssl.PrivateCertificate.loadPEM(cert.read() + b"\n" + key.read())


def issued_by(certificate: x509.Certificate, ca: x509.Certificate) -> bool:
    """`certificate` is signed directly by `ca` (node certificates of `objstore gen-certs`
    always are: the cluster CA has path length 0)."""
    try:
        certificate.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def listener_options(server: ServerTLS, cluster: ClusterTLS | None) -> Any:
    """The `CertificateOptions` of the listener (see the module docstring)."""
    private = read_private(server.cert_file, server.key_file)
    if server.ca_file:
        return private.options(read_certificate(server.ca_file))
    if cluster is not None:
        ca = read_certificate(cluster.ca_file)
        # `trustRoot` forces requireCertificate=True (TWISTED-NOTES f): the older form
        # sets VERIFY_PEER without FAIL_IF_NO_PEER_CERT.
        return ssl.CertificateOptions(privateKey=private.privateKey.original,
                                      certificate=private.original, verify=True,
                                      caCerts=[ca.original], requireCertificate=False)
    return private.options()


def listener_outside_cluster_ca(server: ServerTLS, cluster: ClusterTLS) -> str | None:
    """The start-up note for a [server.tls] certificate not issued by the cluster CA (a
    publicly trusted one, say): what peers need to accept it. None when it is the
    cluster CA's."""
    listener = read_certificate(server.cert_file).original.to_cryptography()
    if issued_by(listener, read_certificate(cluster.ca_file).original.to_cryptography()):
        return None
    return (f"[server.tls] cert_file {server.cert_file} is not issued by the cluster CA "
            f"([cluster.tls] ca_file {cluster.ca_file}): peers verify it against their "
            f"system roots plus the cluster CA, so its issuer must be one of their system "
            f"roots and it must name the address they dial; cluster requests still need "
            f"this node's certificate from the cluster CA ([cluster.tls] cert_file)")


def unbound_node_certificate(cluster: ClusterTLS, node_id: str) -> str | None:
    """The warning for a [cluster.tls] cert_file not issued to `node_id` (neither its CN
    nor a DNS name): every peer would answer this node's cluster requests 403."""
    certificate = read_certificate(cluster.cert_file).original
    if certificate_binds(certificate, node_id):
        return None
    return (f"[cluster.tls] cert_file {cluster.cert_file} is not issued to this node's id "
            f"{node_id!r} (its CN or a DNS name must be the node id): peers will refuse "
            f"this node's cluster requests (403); make it with `objstore gen-certs node "
            f"{node_id}` or add --dns {node_id}")
