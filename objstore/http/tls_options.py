"""The TLS options of the listener and the trust of the cluster's outbound connections
(spec: Authentication 7; TWISTED-NOTES f).

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

Outbound cluster requests (`cluster/client.py` `ClusterTlsPolicy`) trust the cluster CA
added to the system roots (`ClusterTrust`), so a node's [server.tls] certificate may be
its node certificate from `objstore gen-certs` (the usual case) or one from a public CA;
peers are always checked by the name or address dialled.

Start-up only: these functions read files.
"""

from __future__ import annotations

from typing import Any, cast

from OpenSSL import SSL
from twisted.internet import ssl
from twisted.internet._sslverify import IOpenSSLTrustRoot
from zope.interface import implementer

from objstore.config import ClusterTLS, ServerTLS


def read_certificate(path: str) -> ssl.Certificate:
    with open(path, "rb") as handle:
        return ssl.Certificate.loadPEM(handle.read())


def read_private(cert_file: str, key_file: str) -> ssl.PrivateCertificate:
    with open(cert_file, "rb") as cert, open(key_file, "rb") as key:
        return ssl.PrivateCertificate.loadPEM(cert.read() + b"\n" + key.read())


def listener_options(server: ServerTLS, cluster: ClusterTLS | None) -> Any:
    """The `CertificateOptions` of the listener (see the module docstring)."""
    private = read_private(server.cert_file, server.key_file)
    if server.ca_file:
        return private.options(read_certificate(server.ca_file))
    if cluster is not None:
        # `trustRoot` forces requireCertificate=True (TWISTED-NOTES f): the older form
        # sets VERIFY_PEER without FAIL_IF_NO_PEER_CERT.
        return ssl.CertificateOptions(privateKey=private.privateKey.original,
                                      certificate=private.original, verify=True,
                                      caCerts=[read_certificate(cluster.ca_file).original],
                                      requireCertificate=False)
    return private.options()


@implementer(IOpenSSLTrustRoot)
class ClusterTrust:
    """The cluster CA added to the platform's default roots (Authentication 7)."""

    def __init__(self, ca: ssl.Certificate) -> None:
        self._ca = ca

    def _addCACertsToContext(self, context: SSL.Context) -> None:  # noqa: N802
        context.set_default_verify_paths()
        store = context.get_cert_store()
        assert store is not None  # a context always has its store
        store.add_cert(self._ca.original)

    @classmethod
    def of(cls, ca: ssl.Certificate) -> IOpenSSLTrustRoot:
        """As the interface Twisted's options take (mypy does not read `implementer`)."""
        return cast(IOpenSSLTrustRoot, cls(ca))
