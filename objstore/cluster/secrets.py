"""Start-up validation of the cluster's secrets and TLS settings (spec: Authentication 7
and 8, Errors 6).

Secrets, checked when the cluster is enabled:
* [cluster] secret is required, at least 16 characters, and not a shipped placeholder
  (the sample's `change-me-to-a-long-random-secret`, or anything carrying a placeholder
  marker such as "change-me" or "example");
* [cluster] secret_previous, when set, passes the same checks and differs from secret;
* a secret with fewer than 8 distinct characters, or of a single character class (lower
  case, upper case, digits, others), is accepted with a low-entropy warning.

TLS:
* when the cluster is enabled, an https:// peer or advertise_url needs [cluster.tls];
* so does a listener that serves TLS ([server.tls]) whatever the discovery: peers
  found by DNS or mDNS carry no scheme of their own, and cluster traffic arrives on that
  listener (Authentication 7);
* [cluster.tls] needs [server.tls] (cluster traffic arrives on the server listener);
* [cluster.tls] can not be combined with [server.tls] ca_file, which would demand client
  certificates of every S3 client; cluster routes check the peer certificate themselves.
  (All three [cluster.tls] files together: the typed section requires them.)

Each function returns `Findings`: errors abort start-up (the first one is the one-line
message), warnings are logged. Messages name the `[section] key` and never show a secret.
Pure: no I/O, no Twisted, and no run-time import of `objstore.config`, so that
`config.parse_config` can call `validate` (see docs/CLUSTER.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # config.py calls this module while it is being imported
    from objstore.config import Cluster, Server

SHIPPED_PLACEHOLDER_SECRET = "change-me-to-a-long-random-secret"
PLACEHOLDER_MARKERS = ("change-me", "changeme", "change_me", "placeholder", "example",
                       "secret-secret")
MIN_SECRET_LENGTH = 16
MIN_DISTINCT_CHARACTERS = 8
_KEYGEN_HINT = "generate one with `objstore keygen`"


@dataclass(frozen=True, slots=True)
class Findings:
    errors: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def __add__(self, other: Findings) -> Findings:
        return Findings(self.errors + other.errors, self.warnings + other.warnings)

    @property
    def ok(self) -> bool:
        return not self.errors


def _error(message: str) -> Findings:
    return Findings(errors=(message,))


def is_placeholder(secret: str) -> bool:
    lowered = secret.lower()
    return lowered == SHIPPED_PLACEHOLDER_SECRET or any(m in lowered
                                                        for m in PLACEHOLDER_MARKERS)


def character_classes(secret: str) -> int:
    """How many of: lower case, upper case, digits, anything else."""
    tests = (str.islower, str.isupper, str.isdigit, lambda c: not c.isalnum())
    return sum(any(test(c) for c in secret) for test in tests)


def low_entropy(secret: str) -> bool:
    return len(set(secret)) < MIN_DISTINCT_CHARACTERS or character_classes(secret) < 2


def check_secret(key: str, secret: str) -> Findings:
    """One secret, named by its key (`secret` or `secret_previous`)."""
    where = f"[cluster] {key}"
    if is_placeholder(secret):
        return _error(f"{where}: is the shipped placeholder; {_KEYGEN_HINT}")
    if len(secret) < MIN_SECRET_LENGTH:
        return _error(f"{where}: must be at least {MIN_SECRET_LENGTH} characters, got "
                      f"{len(secret)}; {_KEYGEN_HINT}")
    if low_entropy(secret):
        return Findings(warnings=(f"{where}: low entropy (fewer than "
                                  f"{MIN_DISTINCT_CHARACTERS} distinct characters or a "
                                  f"single character class); {_KEYGEN_HINT}",))
    return Findings()


def check_secrets(secret: str, previous: str | None) -> Findings:
    if not secret:
        return _error(f"[cluster] secret: required when the cluster is enabled; {_KEYGEN_HINT}")
    found = check_secret("secret", secret)
    if previous is None:
        return found
    found += check_secret("secret_previous", previous)
    if previous == secret:
        found += _error("[cluster] secret_previous: must differ from [cluster] secret")
    return found


def check_https_peers(cluster: Cluster) -> Findings:
    if cluster.tls is not None:
        return Findings()
    urls: Iterable[tuple[str, str]] = [*(("peers", url) for url in cluster.peers),
                                       ("advertise_url", cluster.advertise_url)]
    for key, url in urls:
        if url.lower().startswith("https://"):
            return _error(f"[cluster] {key}: [cluster.tls] is required for an HTTPS cluster "
                          f"(found {url!r})")
    return Findings()


def check_tls_listener(cluster: Cluster, server: Server) -> Findings:
    if cluster.tls is not None or server.tls is None:
        return Findings()
    return _error(f"[cluster.tls] is required: the listener serves TLS ([server.tls]), so "
                  f"cluster traffic is HTTPS (discovery = {cluster.discovery!r}); add "
                  f"[cluster.tls] (see `objstore gen-certs`)")


def check_tls_combination(cluster: Cluster, server: Server) -> Findings:
    if cluster.tls is None:
        return Findings()
    if server.tls is None:
        return _error("[cluster.tls]: requires [server.tls]; cluster traffic uses the "
                      "server listener")
    if server.tls.ca_file is not None:
        return _error("[cluster.tls]: cannot be combined with [server.tls] ca_file (client "
                      "certificates for every connection); remove one of them")
    return Findings()


def validate(cluster: Cluster, server: Server) -> Findings:
    """Everything above for a parsed configuration; the TLS combination is checked even
    while the cluster is disabled, so a prepared [cluster.tls] is known good."""
    found = check_tls_combination(cluster, server)
    if cluster.enabled:
        found = (check_secrets(cluster.secret, cluster.secret_previous)
                 + check_https_peers(cluster) + check_tls_listener(cluster, server) + found)
    return found
