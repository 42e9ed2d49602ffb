"""The cluster CA and node certificates (objstore.cluster.certs) and `objstore gen-certs`:
the chain verifies for server and client use (cryptography's verifier and an in-memory
OpenSSL mutual-TLS handshake, no sockets), SANs and usages are as asked, a foreign CA is
refused, keys are written 0600 and nothing is overwritten without --force."""

from __future__ import annotations

import ipaddress
import os
import ssl
import stat
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from objstore.cli.main import main
from objstore.cluster import certs
from objstore.cluster.certs import CertificateError, Issued

NOW = datetime.now(UTC).replace(microsecond=0)


@pytest.fixture(scope="module")
def ca() -> Issued:
    return certs.make_ca(now=NOW)


@pytest.fixture(scope="module")
def node(ca: Issued) -> Issued:
    return certs.make_node(ca, "node1", dns_names=["node1.example.net", "Node1.Local"],
                           ip_addresses=["10.0.0.1", "::1"], now=NOW)


def verifier(ca: Issued) -> PolicyBuilder:
    return PolicyBuilder().store(Store([ca.certificate])).time(NOW)


def extension(cert: x509.Certificate, kind: type[x509.ExtensionType]) -> x509.Extension:
    return cert.extensions.get_extension_for_class(kind)  # type: ignore[type-var]


# -- the chain ------------------------------------------------------------------------


@pytest.mark.parametrize("subject", [x509.DNSName("node1.example.net"),
                                     x509.DNSName("node1.local"),
                                     x509.IPAddress(ipaddress.ip_address("10.0.0.1")),
                                     x509.IPAddress(ipaddress.ip_address("::1"))])
def test_a_node_certificate_verifies_as_a_server_for_each_of_its_addresses(
        ca: Issued, node: Issued, subject: x509.DNSName | x509.IPAddress) -> None:
    chain = verifier(ca).build_server_verifier(subject).verify(node.certificate, [])
    assert chain[-1] == ca.certificate


def test_a_node_certificate_verifies_as_a_client(ca: Issued, node: Issued) -> None:
    verified = verifier(ca).build_client_verifier().verify(node.certificate, [])
    assert verified.chain[-1] == ca.certificate


def test_an_address_not_asked_for_does_not_verify(ca: Issued, node: Issued) -> None:
    with pytest.raises(VerificationError):
        verifier(ca).build_server_verifier(x509.DNSName("node2.example.net")).verify(
            node.certificate, [])


def test_a_foreign_ca_is_refused(ca: Issued) -> None:
    foreign = certs.make_node(certs.make_ca(now=NOW), "node1", dns_names=["node1.example.net"],
                              now=NOW)
    with pytest.raises(VerificationError):
        verifier(ca).build_client_verifier().verify(foreign.certificate, [])
    with pytest.raises(VerificationError):
        verifier(ca).build_server_verifier(x509.DNSName("node1.example.net")).verify(
            foreign.certificate, [])


def test_sans_and_usages_are_as_asked(ca: Issued, node: Issued) -> None:
    cert = node.certificate
    sans = extension(cert, x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["node1.example.net", "node1.local"]
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.0.0.1"),
                                                        ipaddress.ip_address("::1")]
    assert list(extension(cert, x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    usage = extension(cert, x509.KeyUsage).value
    assert usage.digital_signature and not usage.key_cert_sign
    assert extension(cert, x509.BasicConstraints).value.ca is False
    assert cert.issuer == ca.certificate.subject
    assert cert.not_valid_before_utc <= NOW - timedelta(minutes=59)
    assert cert.not_valid_after_utc == NOW + timedelta(days=certs.NODE_DAYS)


def test_the_ca_signs_node_certificates_only(ca: Issued) -> None:
    constraints = extension(ca.certificate, x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca and constraints.value.path_length == 0
    assert extension(ca.certificate, x509.KeyUsage).value.key_cert_sign


# -- mutual TLS with OpenSSL, in memory -----------------------------------------------


@pytest.fixture
def files(tmp_path: Path, ca: Issued, node: Issued) -> Iterator[Path]:
    for name, issued in (("ca", ca), ("node", node)):
        (tmp_path / f"{name}.crt").write_bytes(issued.certificate_pem())
        (tmp_path / f"{name}.key").write_bytes(issued.key_pem())
    yield tmp_path


def context(side: int, files: Path, cert: str, ca: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(side)
    ctx.load_cert_chain(files / f"{cert}.crt", files / f"{cert}.key")
    ctx.load_verify_locations(files / f"{ca}.crt")
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def handshake(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext, hostname: str
              ) -> ssl.SSLObject:
    """Both ends of a TLS handshake over memory buffers; returns the server's end."""
    buffers = [ssl.MemoryBIO() for _ in range(4)]
    server = server_ctx.wrap_bio(buffers[0], buffers[1], server_side=True)
    client = client_ctx.wrap_bio(buffers[2], buffers[3], server_hostname=hostname)
    done = {"server": False, "client": False}
    for _ in range(10):
        for name, end, outgoing, incoming in (("client", client, buffers[3], buffers[0]),
                                              ("server", server, buffers[1], buffers[2])):
            if not done[name]:
                try:
                    end.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
            incoming.write(outgoing.read())
        if all(done.values()):
            return server
    raise AssertionError("handshake did not finish")


def test_two_nodes_complete_a_mutual_tls_handshake(files: Path) -> None:
    server = handshake(context(ssl.PROTOCOL_TLS_SERVER, files, "node", "ca"),
                       context(ssl.PROTOCOL_TLS_CLIENT, files, "node", "ca"),
                       "node1.example.net")
    peer = server.getpeercert()
    assert peer is not None and ("commonName", "node1") in [
        item for rdn in peer["subject"] for item in rdn]


def test_a_client_certificate_of_a_foreign_ca_fails_the_handshake(files: Path) -> None:
    foreign_ca = certs.make_ca(now=NOW)
    intruder = certs.make_node(foreign_ca, "intruder", dns_names=["x.example"], now=NOW)
    (files / "intruder.crt").write_bytes(intruder.certificate_pem())
    (files / "intruder.key").write_bytes(intruder.key_pem())
    with pytest.raises(ssl.SSLError):
        handshake(context(ssl.PROTOCOL_TLS_SERVER, files, "node", "ca"),
                  context(ssl.PROTOCOL_TLS_CLIENT, files, "intruder", "ca"),
                  "node1.example.net")


# -- refusals -------------------------------------------------------------------------


@pytest.mark.parametrize("dns, ips", [
    ([], []), (["bad name"], []), (["-lead.example"], []), (["a..b"], []),
    (["ü.example"], []), ([], ["10.0.0.256"]), ([], ["node1"]),
])
def test_malformed_names_and_addresses_are_refused(ca: Issued, dns: list[str],
                                                   ips: list[str]) -> None:
    with pytest.raises(CertificateError):
        certs.make_node(ca, "node1", dns_names=dns, ip_addresses=ips, now=NOW)


@pytest.mark.parametrize("name", ["", ".hidden", "../x", "a/b", "n" * 129, "sp ace"])
def test_a_node_name_that_is_no_file_name_is_refused(ca: Issued, name: str) -> None:
    with pytest.raises(CertificateError):
        certs.make_node(ca, name, dns_names=["a.example"], now=NOW)


def test_a_validity_below_a_day_is_refused(ca: Issued) -> None:
    with pytest.raises(CertificateError):
        certs.make_node(ca, "n", dns_names=["a.example"], now=NOW, days=0)


def test_loading_a_ca_checks_key_and_kind(ca: Issued, node: Issued) -> None:
    assert certs.load_ca(ca.certificate_pem(), ca.key_pem()).certificate == ca.certificate
    with pytest.raises(CertificateError, match="does not match"):
        certs.load_ca(ca.certificate_pem(), node.key_pem())
    with pytest.raises(CertificateError, match="not a CA"):
        certs.load_ca(node.certificate_pem(), node.key_pem())
    with pytest.raises(CertificateError, match="cannot read"):
        certs.load_ca(b"garbage", ca.key_pem())


# -- the command ----------------------------------------------------------------------


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    previous = os.umask(0)  # the modes must not depend on the caller's umask
    yield
    os.umask(previous)


def test_gen_certs_writes_a_ca_and_node_files_with_private_keys_0600(
        tmp_path: Path, open_umask: None, capsys: pytest.CaptureFixture[str]) -> None:
    tls = tmp_path / "tls"
    assert main(["gen-certs", "ca", "--dir", str(tls)]) == 0
    assert main(["gen-certs", "node", "node2", "--dir", str(tls), "--dns", "node2.example",
                 "--ip", "192.0.2.7"]) == 0
    names = {p.name: mode(p) for p in tls.iterdir()}
    assert names == {"cluster-ca.crt": 0o644, "cluster-ca.key": 0o600,
                     "node2.crt": 0o644, "node2.key": 0o600}
    assert f"wrote {tls / 'node2.key'}" in capsys.readouterr().out
    ca = certs.load_ca((tls / "cluster-ca.crt").read_bytes(),
                       (tls / "cluster-ca.key").read_bytes())
    leaf = x509.load_pem_x509_certificate((tls / "node2.crt").read_bytes())
    builder = PolicyBuilder().store(Store([ca.certificate]))
    builder.build_server_verifier(x509.IPAddress(ipaddress.ip_address("192.0.2.7"))).verify(
        leaf, [])
    builder.build_client_verifier().verify(leaf, [])


def test_gen_certs_refuses_to_overwrite_without_force(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gen-certs", "ca", "--dir", str(tmp_path)]) == 0
    first = (tmp_path / "cluster-ca.key").read_bytes()
    assert main(["gen-certs", "ca", "--dir", str(tmp_path)]) == 1
    assert "exists; give --force" in capsys.readouterr().err
    assert (tmp_path / "cluster-ca.key").read_bytes() == first
    assert main(["gen-certs", "ca", "--dir", str(tmp_path), "--force"]) == 0
    assert (tmp_path / "cluster-ca.key").read_bytes() != first
    args = ["gen-certs", "node", "n", "--dir", str(tmp_path), "--dns", "n.example"]
    assert main(args) == 0
    node_key = (tmp_path / "n.key").read_bytes()
    assert main(args) == 1 and (tmp_path / "n.key").read_bytes() == node_key
    assert main([*args, "--force"]) == 0 and (tmp_path / "n.key").read_bytes() != node_key


def test_gen_certs_node_needs_the_ca_and_a_safe_name(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gen-certs", "node", "n", "--dir", str(tmp_path), "--dns", "n.example"]) == 1
    assert "no cluster CA here" in capsys.readouterr().err
    assert main(["gen-certs", "ca", "--dir", str(tmp_path / "tls")]) == 0
    assert main(["gen-certs", "node", "../escape", "--dir", str(tmp_path / "tls"),
                 "--dns", "n.example"]) == 1
    assert main(["gen-certs", "node", "n", "--dir", str(tmp_path / "tls")]) == 1
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == [
        "cluster-ca.crt", "cluster-ca.key"]
