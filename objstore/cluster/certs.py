"""Certificates for cluster mutual TLS: a cluster CA and per-node certificates, made in
memory with `cryptography`'s `x509.CertificateBuilder` (`objstore gen-certs` writes them).

The CA: an EC P-256 key, self-signed, basicConstraints CA (path length 0: it signs node
certificates only), keyUsage keyCertSign + cRLSign, subject key identifier. A node
certificate: its own EC P-256 key, signed by the CA, basicConstraints not a CA, keyUsage
digitalSignature + keyEncipherment, extendedKeyUsage serverAuth AND clientAuth (a node is
the server of its peers' requests and the client of its own), subjectAltName from the
node's DNS names and IP addresses (peers verify the address they dialled against it),
authority and subject key identifiers. Validity starts an hour before `now`, so a node
whose clock lags a little accepts a fresh certificate.

Pure: no files, no clock of its own (callers pass `now`), no Twisted.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
NODE_DAYS = 825
BACKDATE = timedelta(hours=1)
CA_COMMON_NAME = "objstore cluster CA"
_NODE_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")
_DNS_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")


class CertificateError(ValueError):
    """A request for a certificate that can not be made as asked."""


@dataclass(frozen=True)
class Issued:
    """A certificate and its private key."""

    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    def certificate_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def key_pem(self) -> bytes:
        # Unencrypted: the daemon reads it at start without a passphrase; the file is 0600.
        return self.key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption())


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "objstore"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _validity(builder: x509.CertificateBuilder, now: datetime,
              days: int) -> x509.CertificateBuilder:
    if days < 1:
        raise CertificateError("a certificate must be valid for at least 1 day")
    return builder.not_valid_before(now - BACKDATE).not_valid_after(now + timedelta(days=days))


def make_ca(*, now: datetime, days: int = CA_DAYS,
            common_name: str = CA_COMMON_NAME) -> Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    public = key.public_key()
    builder = (x509.CertificateBuilder()
               .subject_name(_name(common_name)).issuer_name(_name(common_name))
               .public_key(public).serial_number(x509.random_serial_number())
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(_key_usage(cert_sign=True), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(public),
                              critical=False))
    return Issued(_validity(builder, now, days).sign(key, hashes.SHA256()), key)


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(digital_signature=True, content_commitment=False,
                         key_encipherment=not cert_sign, data_encipherment=False,
                         key_agreement=False, key_cert_sign=cert_sign, crl_sign=cert_sign,
                         encipher_only=False, decipher_only=False)


def subject_alt_names(dns_names: Sequence[str],
                      ip_addresses: Sequence[str]) -> list[x509.GeneralName]:
    """The SAN entries of a node; raises CertificateError on a malformed name or address."""
    names: list[x509.GeneralName] = []
    for dns in dns_names:
        if not valid_dns_name(dns):
            raise CertificateError(f"not a DNS name: {dns!r}")
        names.append(x509.DNSName(dns.lower()))
    for text in ip_addresses:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(text)))
        except ValueError:
            raise CertificateError(f"not an IP address: {text!r}") from None
    if not names:
        raise CertificateError("a node certificate needs at least one DNS name or IP address")
    return names


def valid_dns_name(name: str) -> bool:
    labels = name.rstrip(".").split(".")
    return (0 < len(name) <= 253 and name.isascii()
            and all(_DNS_LABEL.fullmatch(label) for label in labels))


def valid_node_name(name: str) -> bool:
    """A node name becomes a file name: [A-Za-z0-9._-], not starting with a dot."""
    return _NODE_NAME.fullmatch(name) is not None


def make_node(ca: Issued, name: str, *, dns_names: Sequence[str] = (),
              ip_addresses: Sequence[str] = (), now: datetime,
              days: int = NODE_DAYS) -> Issued:
    if not valid_node_name(name):
        raise CertificateError(f"not a node name ([A-Za-z0-9._-], not starting with a dot): "
                               f"{name!r}")
    key = ec.generate_private_key(ec.SECP256R1())
    public = key.public_key()
    usages = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    builder = (x509.CertificateBuilder()
               .subject_name(_name(name)).issuer_name(ca.certificate.subject)
               .public_key(public).serial_number(x509.random_serial_number())
               .add_extension(x509.BasicConstraints(ca=False, path_length=None),
                              critical=True)
               .add_extension(_key_usage(cert_sign=False), critical=True)
               .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
               .add_extension(x509.SubjectAlternativeName(
                   subject_alt_names(dns_names, ip_addresses)), critical=False)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(public),
                              critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                   ca.key.public_key()), critical=False))
    return Issued(_validity(builder, now, days).sign(ca.key, hashes.SHA256()), key)


def load_ca(certificate_pem: bytes, key_pem: bytes) -> Issued:
    """A CA read back from its files: a CA certificate and the key that matches it."""
    try:
        certificate = x509.load_pem_x509_certificate(certificate_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as exc:
        raise CertificateError(f"cannot read the cluster CA: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or (
            key.public_key().public_numbers()
            != _public_numbers(certificate)):
        raise CertificateError("the cluster CA key does not match its certificate")
    try:
        constraints = certificate.extensions.get_extension_for_class(x509.BasicConstraints)
    except x509.ExtensionNotFound:
        raise CertificateError("the cluster CA certificate is not a CA") from None
    if not constraints.value.ca:
        raise CertificateError("the cluster CA certificate is not a CA")
    return Issued(certificate, key)


def _public_numbers(certificate: x509.Certificate) -> ec.EllipticCurvePublicNumbers | None:
    public = certificate.public_key()
    return public.public_numbers() if isinstance(public, ec.EllipticCurvePublicKey) else None
