"""Cluster request signing, the replay window, secret rotation, the nonce MAC and the
configuration fingerprint (spec: Authentication 5 and 6)."""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import replace

import pytest

from objstore.cluster import auth
from objstore.cluster.auth import AuthOutcome, ClusterSecrets, RequestLine, SecretSlot
from objstore.config import Cluster

NOW = 1_900_000_000.0
OLD = "old-secret-Zx8-k2Lq9@wPm4"
NEW = "new-secret-Qr5-h7Nc3#vBt8"
BODY = hashlib.sha256(b'{"row": 1}').hexdigest()
LINE = RequestLine("POST", "/cluster/v1/object", "")


def keys(current: str, previous: str | None = None) -> ClusterSecrets:
    return ClusterSecrets.from_config(Cluster(secret=current, secret_previous=previous))


def signed(secrets: ClusterSecrets, line: RequestLine = LINE, *, at: float = NOW,
           node: str = "node-a", body: str = BODY) -> dict[str, str]:
    return auth.sign_request(secrets, line, now=at, node_id=node, content_sha256=body)


def check(secrets: ClusterSecrets, headers: dict[str, str], line: RequestLine = LINE,
          now: float = NOW) -> auth.Verification:
    return auth.verify_request(secrets, line, headers, now=now)


# -- signing --------------------------------------------------------------------------


def test_a_signed_request_verifies_and_names_its_sender() -> None:
    result = check(keys(NEW), signed(keys(NEW)))
    assert result == auth.Verification(AuthOutcome.OK, SecretSlot.CURRENT, "node-a")
    assert result.ok


def test_the_secret_never_goes_on_the_wire() -> None:
    headers = signed(keys(NEW))
    assert set(headers) == set(auth.SIGNED_HEADERS)
    assert not any(NEW in value or value in NEW for value in headers.values())
    assert NEW not in repr(keys(NEW, OLD)) and OLD not in repr(keys(NEW, OLD))


@pytest.mark.parametrize("changed", [
    RequestLine("PUT", "/cluster/v1/object", ""),
    RequestLine("POST", "/cluster/v1/object/delete", ""),
    RequestLine("POST", "/cluster/v1/object", "x=1"),
])
def test_the_signature_covers_method_path_and_query(changed: RequestLine) -> None:
    assert check(keys(NEW), signed(keys(NEW)), line=changed).outcome is \
        AuthOutcome.BAD_SIGNATURE


@pytest.mark.parametrize("header, value", [
    (auth.HEADER_NODE, "node-b"),
    (auth.HEADER_CONTENT_SHA256, hashlib.sha256(b"other").hexdigest()),
    (auth.HEADER_DATE, auth.format_amz_date_at(NOW + 1)),
    (auth.HEADER_SIGNATURE, "0" * 64),
])
def test_the_signature_covers_date_node_and_body_hash(header: str, value: str) -> None:
    headers = {**signed(keys(NEW)), header: value}
    assert check(keys(NEW), headers).outcome is AuthOutcome.BAD_SIGNATURE


def test_query_order_and_percent_encoding_do_not_matter() -> None:
    sent = RequestLine("GET", "/cluster/v1/ping", "nonce=abc&b=%7E")
    received = RequestLine("GET", "/cluster/v1/%70ing", "b=~&nonce=abc")
    assert check(keys(NEW), signed(keys(NEW), sent), line=received).ok
    assert not check(keys(NEW), signed(keys(NEW), sent),
                     line=RequestLine("GET", "/cluster/v1/ping", "nonce=abd&b=~")).ok


def test_another_secret_does_not_verify() -> None:
    assert check(keys(NEW), signed(keys(OLD))).outcome is AuthOutcome.BAD_SIGNATURE


# -- rotation -------------------------------------------------------------------------


def test_inbound_accepts_the_previous_secret_during_rotation() -> None:
    result = check(keys(NEW, OLD), signed(keys(OLD)))
    assert result.ok and result.slot is SecretSlot.PREVIOUS


def test_outbound_signs_with_the_current_secret_only() -> None:
    headers = signed(keys(NEW, OLD))
    assert not check(keys(OLD), headers).ok
    assert check(keys(OLD, NEW), headers).slot is SecretSlot.PREVIOUS


def test_every_secret_is_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    compared: list[tuple[object, object]] = []
    real = hmac.compare_digest

    def spy(a: str, b: str) -> bool:
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", spy)
    assert check(keys(NEW, OLD), signed(keys(NEW))).slot is SecretSlot.CURRENT
    assert len(compared) == 2  # the previous secret is tried even after a match


# -- replay window --------------------------------------------------------------------


@pytest.mark.parametrize("skew, outcome", [
    (0, AuthOutcome.OK), (900, AuthOutcome.OK), (-900, AuthOutcome.OK),
    (901, AuthOutcome.STALE), (-901, AuthOutcome.STALE),
    (86400 * 365, AuthOutcome.STALE), (-86400 * 365, AuthOutcome.STALE),
])
def test_the_replay_window_is_fifteen_minutes_either_way(skew: int, outcome: AuthOutcome
                                                         ) -> None:
    assert check(keys(NEW), signed(keys(NEW), at=NOW + skew)).outcome is outcome


@pytest.mark.parametrize("date", ["2030-03-17T12:00:00Z", "20301317T120000Z", "yesterday",
                                  "20300317T126000Z", "２０３００３１７T120000Z"])
def test_an_unparseable_date_is_refused(date: str) -> None:
    headers = {**signed(keys(NEW)), auth.HEADER_DATE: date}
    assert check(keys(NEW), headers).outcome is AuthOutcome.BAD_DATE


@pytest.mark.parametrize("header", auth.SIGNED_HEADERS)
def test_a_missing_header_is_refused(header: str) -> None:
    headers = signed(keys(NEW))
    del headers[header]
    assert check(keys(NEW), headers).outcome is AuthOutcome.MISSING_HEADERS
    assert check(keys(NEW), {**headers, header: ""}).outcome is AuthOutcome.MISSING_HEADERS


@pytest.mark.parametrize("header, value", [
    (auth.HEADER_SIGNATURE, "é" * 64), (auth.HEADER_SIGNATURE, "A" * 64),
    (auth.HEADER_SIGNATURE, "0" * 63), (auth.HEADER_CONTENT_SHA256, "UNSIGNED-PAYLOAD"),
    (auth.HEADER_NODE, "../etc"), (auth.HEADER_NODE, "n" * 129),
])
def test_malformed_headers_are_refused_without_an_exception(header: str, value: str) -> None:
    headers = {**signed(keys(NEW)), header: value}
    assert check(keys(NEW), headers).outcome is AuthOutcome.MALFORMED


def test_the_body_is_checked_against_its_signed_hash() -> None:
    assert auth.payload_matches(BODY, hashlib.sha256(b'{"row": 1}').hexdigest())
    assert not auth.payload_matches(BODY, hashlib.sha256(b'{"row": 2}').hexdigest())
    assert not auth.payload_matches(BODY, "é")


# -- nonce MAC ------------------------------------------------------------------------


def test_a_nonce_is_fresh_and_well_formed() -> None:
    first, second = auth.new_nonce(), auth.new_nonce()
    assert first != second and auth.valid_nonce(first) and auth.valid_nonce(second)


def test_the_nonce_mac_is_domain_separated() -> None:
    key, nonce = NEW.encode(), auth.new_nonce()
    mac = auth.nonce_mac(key, nonce)
    expected = hmac.new(key, b"objstore-cluster-v1 nonce\n" + nonce.encode(), hashlib.sha256)
    assert mac == expected.hexdigest()
    assert mac != hmac.new(key, nonce.encode(), hashlib.sha256).hexdigest()


def test_the_prober_accepts_a_mac_under_either_of_its_secrets() -> None:
    nonce = auth.new_nonce()
    assert auth.verify_nonce_mac(keys(NEW, OLD), nonce,
                                 auth.nonce_mac(NEW.encode(), nonce)) is SecretSlot.CURRENT
    assert auth.verify_nonce_mac(keys(NEW, OLD), nonce,
                                 auth.nonce_mac(OLD.encode(), nonce)) is SecretSlot.PREVIOUS
    assert auth.verify_nonce_mac(keys(NEW), nonce, auth.nonce_mac(OLD.encode(), nonce)) is None


def test_the_responder_keys_the_mac_with_the_secret_that_verified_the_probe() -> None:
    # B has not rotated yet (old only); A has (new, previous old). B probes A.
    prober, responder, nonce = keys(OLD), keys(NEW, OLD), auth.new_nonce()
    line = RequestLine("GET", "/cluster/v1/ping", f"nonce={nonce}")
    verified = check(responder, signed(prober, line, body=auth_empty()), line=line)
    assert verified.slot is SecretSlot.PREVIOUS
    answer = auth.nonce_mac(responder.key(verified.slot), nonce)
    assert auth.verify_nonce_mac(prober, nonce, answer) is SecretSlot.CURRENT


def auth_empty() -> str:
    return hashlib.sha256(b"").hexdigest()


@pytest.mark.parametrize("mac", [None, "", 42, "0" * 64, "zz" * 32, "é" * 64])
def test_a_missing_or_wrong_mac_is_rejected(mac: object) -> None:
    assert auth.verify_nonce_mac(keys(NEW, OLD), auth.new_nonce(), mac) is None


@pytest.mark.parametrize("nonce", ["short", "x" * 129, "has space" * 3, "ünïcode" * 4])
def test_a_malformed_nonce_gets_no_mac(nonce: str) -> None:
    with pytest.raises(ValueError):
        auth.nonce_mac(NEW.encode(), nonce)
    assert auth.verify_nonce_mac(keys(NEW), nonce, "0" * 64) is None


def test_a_request_signature_is_never_a_nonce_mac() -> None:
    secrets = keys(NEW)
    nonce = auth.new_nonce()
    line = RequestLine("GET", "/cluster/v1/ping", f"nonce={nonce}")
    signature = signed(secrets, line)[auth.HEADER_SIGNATURE]
    assert auth.verify_nonce_mac(secrets, nonce, signature) is None


def test_the_previous_key_is_only_there_when_configured() -> None:
    with pytest.raises(ValueError):
        keys(NEW).key(SecretSlot.PREVIOUS)
    assert keys(NEW).slots() == (SecretSlot.CURRENT,)


# -- configuration fingerprint --------------------------------------------------------

BASE = Cluster(enabled=True, node_id="a", secret=NEW, cluster_size=3)


def test_equal_shared_settings_give_equal_fingerprints() -> None:
    other_node = replace(BASE, node_id="b", peers=("http://a:9000",), discovery="static",
                         request_timeout_seconds=3.0, advertise_url="http://b:9000")
    assert auth.config_fingerprint(BASE) == auth.config_fingerprint(other_node)
    assert auth.fingerprint_matches(BASE, auth.config_fingerprint(other_node))


@pytest.mark.parametrize("drift", [{"secret": OLD}, {"cluster_size": 5},
                                   {"consistency": "available"}])
def test_drift_changes_the_fingerprint(drift: dict[str, object]) -> None:
    drifted = replace(BASE, **drift)  # type: ignore[arg-type]
    assert auth.config_fingerprint(BASE) != auth.config_fingerprint(drifted)
    assert not auth.fingerprint_matches(BASE, auth.config_fingerprint(drifted))


def test_the_fingerprint_reveals_nothing_of_the_secret() -> None:
    fingerprint = auth.config_fingerprint(BASE)
    assert len(fingerprint) == 64 and NEW not in fingerprint
    plain = hashlib.sha256(auth.canonical_config(BASE)).hexdigest()
    assert fingerprint != plain  # keyed, not a hash anyone can recompute
    assert NEW.encode() not in auth.canonical_config(BASE)


def test_fingerprints_match_across_a_rotation_in_both_directions() -> None:
    rotated = replace(BASE, secret=NEW, secret_previous=OLD)
    not_yet = replace(BASE, secret=OLD, secret_previous=NEW)
    assert auth.fingerprint_matches(rotated, auth.config_fingerprint(not_yet))
    assert auth.fingerprint_matches(not_yet, auth.config_fingerprint(rotated))
    assert not auth.fingerprint_matches(replace(BASE, secret=OLD),
                                        auth.config_fingerprint(BASE))


@pytest.mark.parametrize("value", [None, 7, "", "A" * 64, "é" * 64])
def test_a_malformed_peer_fingerprint_never_matches(value: object) -> None:
    assert not auth.fingerprint_matches(BASE, value)
