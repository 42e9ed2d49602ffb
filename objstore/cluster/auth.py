"""Cluster authentication: request signing with the shared secret, the nonce MAC that
authenticates a peer, and the configuration fingerprint.

The secret never goes on the wire; it only keys HMAC-SHA256. Each use has its own domain
label, so that no MAC made for one purpose is valid for another (a peer answering a probe
MACs any nonce it is sent: that answer must never pass as a request signature).

A request is signed over this canonical form (UTF-8, lines joined by "\\n"):

    objstore-cluster-v1 request
    <METHOD, upper case>
    <path: decoded, then percent-encoded the AWS way, "/" kept>
    <query: decoded pairs, re-encoded the AWS way, sorted by key then value>
    <x-amz-date: YYYYMMDDTHHMMSSZ>
    <x-objstore-node-id: the sending node's id>
    <x-amz-content-sha256: lower-case hex SHA-256 of the body>

and sent in these headers: `x-amz-date`, `x-objstore-node-id`, `x-amz-content-sha256` and
`x-objstore-cluster-signature` (lower-case hex HMAC-SHA256 under [cluster] secret). The
signature covers the body's claimed hash, not the body: a receiver that streams a blob
checks the bytes against the claim (`payload_matches`) before it keeps them, as SigV4 does.
The sender's node id is signed so that loop detection (409) acts on an authenticated claim.

Inbound requests verify under [cluster] secret, then [cluster] secret_previous; outbound
requests and the published fingerprint use only secret. x-amz-date further than 15 minutes
from the receiver's clock, or unparseable, is refused. Every outcome other than OK is a
403 for the caller. Within the window a captured request can be replayed; the receivers
are idempotent (last-writer-wins), and HTTPS clusters use mutual TLS on top.

The nonce MAC is HMAC-SHA256(key, "objstore-cluster-v1 nonce\\n" || nonce), keyed with
whichever secret verified the probe's request; the prober accepts it under either of its
own secrets. The config fingerprint is HMAC-SHA256(secret, "objstore-cluster-v1 config\\n"
|| canonical JSON of the settings every node must share, and, with [encryption] enabled,
the ids of the node's master key versions, never a key): equal configurations give equal
fingerprints and nothing about the secret can be read from one; a node holding other master
keys (it could not read its peers' encrypted objects) is config drift. The public health
document never carries it.

Pure: no I/O, no Twisted, no clock of its own (callers pass `now`, float seconds since the
epoch). Never a secret in a repr, a message or a log line.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from objstore.config import Cluster
from objstore.http.sigv4.canonical import (
    aws_uri_path,
    canonical_query_string,
    format_amz_date,
    parse_amz_date,
    payload_hash_is_hex,
)

REPLAY_WINDOW_SECONDS = 15 * 60
HEADER_DATE = "x-amz-date"
HEADER_NODE = "x-objstore-node-id"
HEADER_CONTENT_SHA256 = "x-amz-content-sha256"
HEADER_SIGNATURE = "x-objstore-cluster-signature"
SIGNED_HEADERS = (HEADER_DATE, HEADER_NODE, HEADER_CONTENT_SHA256, HEADER_SIGNATURE)

_REQUEST_DOMAIN = b"objstore-cluster-v1 request\n"
_NONCE_DOMAIN = b"objstore-cluster-v1 nonce\n"
_CONFIG_DOMAIN = b"objstore-cluster-v1 config\n"
# The settings a node must share with its peers to be trusted with writes; node-local
# ones (node_id, peers, discovery, timeouts, TLS files) differ by design.
FINGERPRINT_FIELDS = ("consistency", "cluster_size")

_HEX_MAC = re.compile(r"[0-9a-f]{64}")
_NODE_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")
_NONCE = re.compile(r"[A-Za-z0-9_-]{16,128}")
NONCE_BYTES = 32


class SecretSlot(enum.Enum):
    CURRENT = "secret"
    PREVIOUS = "secret_previous"


@dataclass(frozen=True, slots=True)
class ClusterSecrets:
    """[cluster] secret and secret_previous as HMAC keys; the repr shows neither."""

    current: bytes = field(repr=False)
    previous: bytes | None = field(default=None, repr=False)

    @classmethod
    def from_config(cls, cluster: Cluster) -> ClusterSecrets:
        previous = cluster.secret_previous
        return cls(cluster.secret.encode("utf-8"),
                   previous.encode("utf-8") if previous else None)

    def slots(self) -> tuple[SecretSlot, ...]:
        """The secrets inbound verification tries, in order."""
        if self.previous is None:
            return (SecretSlot.CURRENT,)
        return (SecretSlot.CURRENT, SecretSlot.PREVIOUS)

    def key(self, slot: SecretSlot) -> bytes:
        if slot is SecretSlot.PREVIOUS:
            if self.previous is None:
                raise ValueError("no [cluster] secret_previous is configured")
            return self.previous
        return self.current


class AuthOutcome(enum.Enum):
    OK = "ok"
    MISSING_HEADERS = "missing_headers"  # a signing header is absent or empty
    MALFORMED = "malformed"  # a header's value has the wrong shape
    BAD_DATE = "bad_date"  # x-amz-date does not parse
    STALE = "stale"  # x-amz-date outside the replay window (past or future)
    BAD_SIGNATURE = "bad_signature"  # under neither secret


@dataclass(frozen=True, slots=True)
class Verification:
    outcome: AuthOutcome
    slot: SecretSlot | None = None  # the secret that verified it; key the nonce MAC with it
    node_id: str = ""  # the sender's id, once verified

    @property
    def ok(self) -> bool:
        return self.outcome is AuthOutcome.OK


@dataclass(frozen=True, slots=True)
class RequestLine:
    """What the signature covers besides the headers: as received (raw, percent-encoded)."""

    method: str
    raw_path: str
    raw_query: str = ""


# -- requests -------------------------------------------------------------------------


def canonical_request(line: RequestLine, amz_date: str, node_id: str,
                      content_sha256: str) -> bytes:
    parts = (line.method.upper(), aws_uri_path(line.raw_path),
             canonical_query_string(line.raw_query), amz_date, node_id, content_sha256)
    return _REQUEST_DOMAIN + "\n".join(parts).encode("utf-8")


def _mac(key: bytes, message: bytes) -> str:
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def sign_request(secrets_: ClusterSecrets, line: RequestLine, *, now: float, node_id: str,
                 content_sha256: str) -> dict[str, str]:
    """The headers of an outbound cluster request, signed under [cluster] secret only."""
    amz_date = format_amz_date_at(now)
    message = canonical_request(line, amz_date, node_id, content_sha256)
    return {HEADER_DATE: amz_date, HEADER_NODE: node_id, HEADER_CONTENT_SHA256: content_sha256,
            HEADER_SIGNATURE: _mac(secrets_.current, message)}


def format_amz_date_at(now: float) -> str:
    return format_amz_date(datetime.fromtimestamp(now, UTC))


def verify_request(secrets_: ClusterSecrets, line: RequestLine, headers: Mapping[str, str],
                   *, now: float) -> Verification:
    """Check an inbound request's signing headers (names in lower case)."""
    values = [headers.get(name, "") for name in SIGNED_HEADERS]
    if not all(values):
        return Verification(AuthOutcome.MISSING_HEADERS)
    amz_date, node_id, content_sha256, signature = values
    if not (_NODE_ID.fullmatch(node_id) and payload_hash_is_hex(content_sha256)
            and _HEX_MAC.fullmatch(signature)):
        return Verification(AuthOutcome.MALFORMED)
    moment = parse_amz_date(amz_date)
    if moment is None:
        return Verification(AuthOutcome.BAD_DATE)
    if abs(moment.timestamp() - now) > REPLAY_WINDOW_SECONDS:
        return Verification(AuthOutcome.STALE)
    message = canonical_request(line, amz_date, node_id, content_sha256)
    slot = _verifying_slot(secrets_, message, signature)
    if slot is None:
        return Verification(AuthOutcome.BAD_SIGNATURE)
    return Verification(AuthOutcome.OK, slot, node_id)


def _verifying_slot(secrets_: ClusterSecrets, message: bytes, mac: str) -> SecretSlot | None:
    # Every configured secret is tried, so the time taken does not tell which one matched.
    found = None
    for slot in secrets_.slots():
        if hmac.compare_digest(_mac(secrets_.key(slot), message), mac) and found is None:
            found = slot
    return found


def payload_matches(claimed_sha256: str, body_sha256: str) -> bool:
    """The body received is the one the signature vouched for (both lower-case hex)."""
    return hmac.compare_digest(claimed_sha256.encode("ascii", "replace"),
                               body_sha256.encode("ascii", "replace"))


# -- peer authentication --------------------------------------------------------------


def new_nonce() -> str:
    return secrets.token_urlsafe(NONCE_BYTES)


def valid_nonce(nonce: str) -> bool:
    return _NONCE.fullmatch(nonce) is not None


def nonce_mac(key: bytes, nonce: str) -> str:
    """The answer to a probe: keyed with the secret that verified the probe's request
    (`ClusterSecrets.key(verification.slot)`)."""
    if not valid_nonce(nonce):
        raise ValueError("a nonce is 16-128 characters of [A-Za-z0-9_-]")
    return _mac(key, _NONCE_DOMAIN + nonce.encode("ascii"))


def verify_nonce_mac(secrets_: ClusterSecrets, nonce: str, mac: object) -> SecretSlot | None:
    """The prober's check of a peer's answer: under either of its own secrets; None when
    the MAC is missing, malformed or wrong."""
    if not isinstance(mac, str) or not _HEX_MAC.fullmatch(mac) or not valid_nonce(nonce):
        return None
    return _verifying_slot(secrets_, _NONCE_DOMAIN + nonce.encode("ascii"), mac)


# -- configuration fingerprint --------------------------------------------------------


def canonical_config(cluster: Cluster) -> bytes:
    shared: dict[str, object] = {name: getattr(cluster, name) for name in FINGERPRINT_FIELDS}
    if cluster.encryption_key_ids:  # absent without encryption: older fingerprints hold
        shared["encryption_key_ids"] = list(cluster.encryption_key_ids)
    shared["protocol"] = "cluster/v1"
    return json.dumps(shared, sort_keys=True, separators=(",", ":")).encode("utf-8")


def config_fingerprint(cluster: Cluster, slot: SecretSlot = SecretSlot.CURRENT) -> str:
    """This node's fingerprint as published in the authenticated ping (under secret)."""
    key = ClusterSecrets.from_config(cluster).key(slot)
    return _mac(key, _CONFIG_DOMAIN + canonical_config(cluster))


def fingerprint_matches(cluster: Cluster, peer_fingerprint: object) -> bool:
    """A peer's fingerprint equals ours under either rotation secret, so that nodes
    mid-rotation (one already on the new secret, one not yet) still agree."""
    if not isinstance(peer_fingerprint, str) or not _HEX_MAC.fullmatch(peer_fingerprint):
        return False
    message = _CONFIG_DOMAIN + canonical_config(cluster)
    return _verifying_slot(ClusterSecrets.from_config(cluster), message,
                           peer_fingerprint) is not None
