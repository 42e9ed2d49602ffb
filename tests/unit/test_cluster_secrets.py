"""Start-up validation of cluster secrets and TLS combinations (Authentication 7 and 8)."""

from __future__ import annotations

from pathlib import Path

import pytest

from objstore.cluster import secrets
from objstore.cluster.secrets import Findings
from objstore.config import Cluster, ClusterTLS, Server, ServerTLS

GOOD = "Zx8-k2Lq9@wPm4Rt7Yb1"
OTHER = "Qr5-h7Nc3#vBt8Wd2Kf6"
CLUSTER_TLS = ClusterTLS(ca_file="ca.crt", cert_file="node.crt", key_file="node.key")
SERVER_TLS = ServerTLS(cert_file="server.crt", key_file="server.key")
SAMPLE = Path(__file__).resolve().parents[2] / "etc" / "objstore.toml"


def enabled(**fields: object) -> Cluster:
    values: dict[str, object] = {"enabled": True, "secret": GOOD, **fields}
    return Cluster(**values)  # type: ignore[arg-type]


def shipped_placeholder() -> str:
    with open(SAMPLE, encoding="utf-8") as sample:
        line = next(x for x in sample if x.startswith("secret = "))
    return line.split('"')[1]


# -- secrets --------------------------------------------------------------------------


def test_a_strong_secret_passes_without_warning() -> None:
    assert secrets.validate(enabled(), Server()) == Findings()
    assert secrets.validate(enabled(secret_previous=OTHER), Server()).ok


def test_the_sample_configs_placeholder_is_refused() -> None:
    placeholder = shipped_placeholder()
    assert placeholder == secrets.SHIPPED_PLACEHOLDER_SECRET
    found = secrets.validate(enabled(secret=placeholder), Server())
    assert found.errors == ("[cluster] secret: is the shipped placeholder; generate one "
                            "with `objstore keygen`",)


@pytest.mark.parametrize("secret", ["Change-Me-Please-Now-1234", "my-PLACEHOLDER-value-99",
                                    "example.Secret.Value.42"])
def test_placeholder_lookalikes_are_refused(secret: str) -> None:
    assert "placeholder" in secrets.check_secret("secret", secret).errors[0]


@pytest.mark.parametrize("length, ok", [(0, False), (15, False), (16, True), (64, True)])
def test_a_secret_has_at_least_sixteen_characters(length: int, ok: bool) -> None:
    secret = (GOOD * 4)[:length]
    found = secrets.validate(enabled(secret=secret), Server())
    assert found.ok is ok
    if not ok:
        assert found.errors[0].startswith("[cluster] secret: ")
        assert secret == "" or secret not in found.errors[0]  # never shown


@pytest.mark.parametrize("secret", [
    "abababababababababab",  # 2 distinct characters
    "abcdefghijklmnopqrst",  # a single class
    "12345678901234567890",
    "Aa1!Aa1!Aa1!Aa1!Aa1!",  # four classes, but 4 distinct characters
])
def test_low_entropy_warns_but_does_not_refuse(secret: str) -> None:
    found = secrets.check_secret("secret", secret)
    assert found.ok and len(found.warnings) == 1
    assert found.warnings[0].startswith("[cluster] secret: low entropy")
    assert secret not in found.warnings[0]


def test_eight_distinct_characters_in_two_classes_is_enough() -> None:
    assert secrets.check_secret("secret", "abcdefg1abcdefg1") == Findings()
    assert secrets.low_entropy("abcdefg1abcdefg") is False
    assert secrets.low_entropy("abcdef12abcdef12") is False
    assert secrets.low_entropy("abcdefgabcdefgab") is True  # one class


def test_the_previous_secret_is_checked_the_same_way_and_must_differ() -> None:
    assert secrets.validate(enabled(secret_previous=GOOD), Server()).errors == (
        "[cluster] secret_previous: must differ from [cluster] secret",)
    short = secrets.validate(enabled(secret_previous="short"), Server())
    assert short.errors[0].startswith("[cluster] secret_previous: must be at least 16")
    placeholder = secrets.validate(enabled(secret_previous=shipped_placeholder()), Server())
    assert placeholder.errors[0].startswith("[cluster] secret_previous: is the shipped")
    weak = secrets.validate(enabled(secret_previous="zzzzzzzzzzzzzzzzzzzz"), Server())
    assert weak.ok and weak.warnings[0].startswith("[cluster] secret_previous: low entropy")


def test_a_missing_secret_is_refused_only_when_enabled() -> None:
    assert secrets.validate(enabled(secret=""), Server()).errors[0].startswith(
        "[cluster] secret: required when the cluster is enabled")
    assert secrets.validate(Cluster(secret=shipped_placeholder()), Server()) == Findings()


# -- TLS ------------------------------------------------------------------------------


@pytest.mark.parametrize("fields, key", [
    ({"peers": ("http://b:9000", "https://c:9000")}, "peers"),
    ({"peers": ("HTTPS://c:9000",)}, "peers"),
    ({"advertise_url": "https://a:9000"}, "advertise_url"),
])
def test_an_https_cluster_needs_cluster_tls(fields: dict[str, object], key: str) -> None:
    found = secrets.validate(enabled(**fields), Server())
    assert found.errors[0].startswith(f"[cluster] {key}: [cluster.tls] is required")
    with_tls = secrets.validate(enabled(tls=CLUSTER_TLS, **fields), Server(tls=SERVER_TLS))
    assert with_tls.ok


def test_a_plain_http_cluster_needs_no_tls() -> None:
    assert secrets.validate(enabled(peers=("http://b:9000",)), Server()).ok


@pytest.mark.parametrize("discovery, fields", [
    ("dns", {"dns_name": "objstore.example.com"}),
    ("mdns", {}),
    ("static", {"peers": ("http://b:9000",)}),
])
def test_a_tls_listener_needs_cluster_tls_whatever_the_discovery(
        discovery: str, fields: dict[str, object]) -> None:
    found = secrets.validate(enabled(discovery=discovery, **fields), Server(tls=SERVER_TLS))
    assert found.errors == (
        f"[cluster.tls] is required: the listener serves TLS ([server.tls]), so cluster "
        f"traffic is HTTPS (discovery = {discovery!r}); add [cluster.tls] (see `objstore "
        f"gen-certs`)",)
    assert secrets.validate(enabled(discovery=discovery, tls=CLUSTER_TLS, **fields),
                            Server(tls=SERVER_TLS)).ok
    # a disabled cluster asks nothing of a TLS listener
    assert secrets.validate(Cluster(discovery=discovery, **fields),  # type: ignore[arg-type]
                            Server(tls=SERVER_TLS)).ok


def test_cluster_tls_needs_server_tls() -> None:
    found = secrets.validate(enabled(tls=CLUSTER_TLS), Server())
    assert found.errors == ("[cluster.tls]: requires [server.tls]; cluster traffic uses the "
                            "server listener",)


def test_cluster_tls_can_not_be_combined_with_a_server_client_ca() -> None:
    server = Server(tls=ServerTLS("server.crt", "server.key", ca_file="clients.crt"))
    found = secrets.validate(enabled(tls=CLUSTER_TLS), server)
    assert found.errors[0].startswith("[cluster.tls]: cannot be combined with [server.tls] "
                                      "ca_file")


def test_the_tls_combination_is_checked_even_while_disabled() -> None:
    assert not secrets.validate(Cluster(tls=CLUSTER_TLS), Server()).ok


def test_all_errors_are_collected_the_secret_first() -> None:
    found = secrets.validate(enabled(secret="short", tls=CLUSTER_TLS), Server())
    assert len(found.errors) == 2 and found.errors[0].startswith("[cluster] secret:")
