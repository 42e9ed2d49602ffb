"""The binding of a peer's certificate to the node id it signs with (Authentication 7).

Under [cluster.tls] a cluster request carries two proofs: the certificate the peer
presented in the handshake (verified against the cluster CA by the handshake) and the
request signature (the shared secret) naming the sender in `x-objstore-node-id`. This
module decides whether the certificate is issued to that node: the node id is the
certificate's subject CN (exactly: `objstore gen-certs node NAME` makes NAME the CN) or
one of its DNS subject alternative names (DNS names compare case-insensitively;
`gen-certs` writes them lower-case). So a stolen node key and the secret let a thief speak
as that node only, not as any node of the cluster.

Pure: no Twisted, no I/O. The certificate is pyOpenSSL's X509 (what a TLS transport's
`getPeerCertificate` gives) or a `cryptography` certificate.
"""

from __future__ import annotations

from dataclasses import dataclass

from cryptography import x509
from cryptography.x509.oid import NameOID


@dataclass(frozen=True, slots=True)
class CertificateNames:
    """The names a certificate is issued to."""

    common_names: tuple[str, ...] = ()
    dns_names: tuple[str, ...] = ()


def certificate_names(certificate: object) -> CertificateNames:
    """The subject CNs and DNS SANs of `certificate` (empty for anything unreadable: a
    certificate whose names can not be read binds no node)."""
    parsed = _cryptography(certificate)
    if parsed is None:
        return CertificateNames()
    try:
        common = tuple(str(attribute.value) for attribute in
                       parsed.subject.get_attributes_for_oid(NameOID.COMMON_NAME))
    except ValueError:
        common = ()
    try:
        extension = parsed.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        dns = tuple(extension.value.get_values_for_type(x509.DNSName))
    except (x509.ExtensionNotFound, ValueError):
        dns = ()
    return CertificateNames(common, dns)


def _cryptography(certificate: object) -> x509.Certificate | None:
    if isinstance(certificate, x509.Certificate):
        return certificate
    convert = getattr(certificate, "to_cryptography", None)
    if convert is None:
        return None
    try:
        converted = convert()
    except Exception:  # noqa: BLE001 (an unreadable certificate binds nothing)
        return None
    return converted if isinstance(converted, x509.Certificate) else None


def names_bind(node_id: str, names: CertificateNames) -> bool:
    """`node_id` is the CN (exactly) or a DNS SAN (case-insensitively) of the names."""
    if not node_id:
        return False
    if node_id in names.common_names:
        return True
    wanted = node_id.lower()
    return any(name.lower() == wanted for name in names.dns_names)


def certificate_binds(certificate: object, node_id: str) -> bool:
    """The certificate is issued to the node `node_id` (module docstring)."""
    return names_bind(node_id, certificate_names(certificate))


__all__ = ["CertificateNames", "certificate_binds", "certificate_names", "names_bind"]
