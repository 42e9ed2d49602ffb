"""The binding of a peer's certificate to the node id it signs with (cluster/
cert_binding.py): certificates made as `objstore gen-certs` makes them, in memory, as
`cryptography` and as pyOpenSSL (what a TLS transport gives) objects."""

from __future__ import annotations

from datetime import UTC, datetime
from functools import cache

import pytest
from cryptography import x509
from OpenSSL import crypto

from objstore.cluster import certs
from objstore.cluster.api import binding_refusal
from objstore.convergence.cert_binding import (
    CertificateNames,
    certificate_binds,
    certificate_names,
    names_bind,
)

NOW = datetime(2026, 11, 25, tzinfo=UTC)


@cache
def ca() -> certs.Issued:
    return certs.make_ca(now=NOW)


def node(name: str, *dns: str, ips: tuple[str, ...] = ()) -> x509.Certificate:
    return certs.make_node(ca(), name, dns_names=dns, ip_addresses=ips, now=NOW).certificate


def test_the_cn_binds_exactly() -> None:
    names = CertificateNames(common_names=("node_1",))
    assert names_bind("node_1", names)
    assert not names_bind("Node_1", names) and not names_bind("node_2", names)
    assert not names_bind("", CertificateNames(common_names=("",)))


def test_a_dns_san_binds_case_insensitively() -> None:
    names = CertificateNames(common_names=("host-1",), dns_names=("node-b", "b.example"))
    assert names_bind("node-b", names) and names_bind("NODE-B", names)
    assert names_bind("b.example", names)
    assert not names_bind("node-c", names) and not names_bind("example", names)


def test_the_names_of_a_gen_certs_certificate() -> None:
    made = node("host-1", "node-b", "b.example", ips=("127.0.0.1",))
    assert certificate_names(made) == CertificateNames(("host-1",), ("node-b", "b.example"))
    assert certificate_names(crypto.X509.from_cryptography(made)) == certificate_names(made)


@pytest.mark.parametrize("convert", [lambda c: c, crypto.X509.from_cryptography])
def test_a_certificate_binds_its_cn_and_dns_names_only(convert: object) -> None:
    made = convert(node("node-b", "b.internal", ips=("10.0.0.2",)))  # type: ignore[operator]
    assert certificate_binds(made, "node-b") and certificate_binds(made, "b.internal")
    assert not certificate_binds(made, "node-c")
    assert not certificate_binds(made, "10.0.0.2")  # an address is no node id


def test_anything_unreadable_binds_nothing() -> None:
    assert certificate_names(object()) == CertificateNames()
    assert not certificate_binds(object(), "node-b")

    class Broken:
        def to_cryptography(self) -> x509.Certificate:
            raise ValueError("garbled")

    assert not certificate_binds(Broken(), "node-b")


def test_the_refusal_only_under_cluster_tls_with_a_certificate() -> None:
    theirs = crypto.X509.from_cryptography(node("node-c", "node-c"))
    refused = binding_refusal(True, theirs, "node-b")
    assert refused is not None and refused.status == 403
    assert "node-b" in refused.message
    assert binding_refusal(True, theirs, "node-c") is None
    assert binding_refusal(False, theirs, "node-b") is None  # no [cluster.tls]
    assert binding_refusal(True, None, "node-b") is None  # certificate_refusal's case
