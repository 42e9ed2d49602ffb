"""The configuration file: TOML parsed once into frozen dataclasses, validated at load time.

This module owns reading and validating objstore.toml. Every other module receives the typed
`Config` (or one of its sections) and must never read configuration as dicts, re-read the file
or consult environment variables for settings. Any problem -- unknown key, wrong type, value out
of range, contradictory sections, missing TLS file, weak cluster secret -- raises `ConfigError`
whose message is one line naming the `[section] key`. Softer problems (a low-entropy secret,
fsync disabled) are collected in `Config.warnings` for the daemon to log at start.

Relative paths ([storage] data_dir, sqlite_path, TLS and key files) are resolved against the
CURRENT WORKING DIRECTORY of the process, not the directory of the config file, so that the
quick start's `./data` means the directory the daemon was started in.

Each section is described by a small table of fields, one checker per field; defaults live on
the dataclasses. This module imports nothing from Twisted.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from objstore.cluster import secrets as cluster_secrets
from objstore.notify import targets as target_kinds

__all__ = [
    "Audit", "Cluster", "ClusterTLS", "Config", "ConfigError", "Encryption", "Lifecycle",
    "Logging", "Metrics", "NotificationTarget", "Notifications", "Outbox", "Server",
    "ServerCache", "ServerLimits", "ServerTLS", "Storage", "default_config", "load_config",
    "parse_config",
]

SECONDS_PER_DAY = 86400.0


class ConfigError(Exception):
    """A configuration problem; str() is one line naming the offending `[section] key`."""


# --- the typed configuration ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ServerLimits:
    max_body_size: int = 5 * 1024**3
    max_header_count: int = 100
    max_metadata_size: int = 2048  # bytes of x-amz-meta-* names + values, as AWS counts them
    rate_limit_per_second: float = 0.0
    rate_limit_burst: int = 0
    rate_limit_per_ip_per_second: float = 0.0
    rate_limit_per_ip_burst: int = 0


@dataclass(frozen=True, slots=True)
class ServerCache:
    size: int = 10000
    ttl_seconds: float = 5.0
    objects: int = 10000  # object records kept for GET/HEAD per worker; 0: none
    # None: 60 s on SQLite, ttl_seconds on PostgreSQL (meta/object_cache.py)
    objects_ttl_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class ServerTLS:
    cert_file: str
    key_file: str
    ca_file: str | None = None  # when set, clients must present a certificate signed by it


def default_workers() -> int:
    """One worker process per CPU this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@dataclass(frozen=True, slots=True)
class Server:
    host: str = "0.0.0.0"
    port: int = 9000  # 0 = any free port
    region: str = "us-east-1"
    domains: tuple[str, ...] = ()  # virtual-host domains; () disables the vhost rewrite
    drain_timeout_seconds: float = 30.0
    workers: int = field(default_factory=lambda: default_workers())  # one per CPU
    server_header: str = "objstore"
    # Accept AWS Signature Version 2 (header and presigned URLs); false: SigV4 only.
    signature_v2: bool = True
    # Origins (one "*" each at most) whose pages may call the admin API and the console
    # from a browser (CORS); () allows none. Buckets have their own CORS configuration.
    cors_allowed_origins: tuple[str, ...] = ()
    # A request line and headers not complete this long after their first byte: 400
    # RequestTimeout and the connection closed (a client trickling headers holds nothing).
    header_timeout_seconds: float = 20.0
    # A connection that sends nothing for this long (between requests, or in the middle of
    # a body) is closed.
    idle_timeout_seconds: float = 60.0
    # Send plain (unencrypted, uncompressed) objects with os.sendfile on plain-TCP
    # connections (http/sendfile.py); false: always through Python reads.
    sendfile: bool = True
    limits: ServerLimits = field(default_factory=ServerLimits)
    cache: ServerCache = field(default_factory=ServerCache)
    tls: ServerTLS | None = None
    # The public access block of every bucket without its own (all four switches on, or
    # all off); a bucket's PutPublicAccessBlock overrides it.
    block_public_access: bool = False


@dataclass(frozen=True, slots=True)
class Storage:
    data_dir: str = "./data"  # absolute after loading
    metadata_backend: str = "sqlite"
    postgres_url: str | None = None
    sqlite_path: str | None = None  # after loading: always set, default <data_dir>/meta/objstore.db
    fsync: bool = True  # False loses the durability guarantee; throwaway test runs only
    # How concurrent writes share their syncs (blobs/barrier.py): "auto" lets the writes in
    # flight together share one syncfs(2) of the data volume where the kernel reports
    # writeback errors to it (Linux 5.8+); "fsync" syncs each write's own files only (a
    # volume shared with other busy writers: syncfs would wait for their dirty data too).
    sync_method: str = "auto"
    # Threads of the IO pool (blob writes and their syncs, reads of cold blobs, file
    # removal): each small PUT holds one through its sync rounds, so this bounds how many
    # writes can share one round.
    io_threads: int = 8
    db_pool_size: int = 4
    # Concurrent object-row writes (and audit batches) share one transaction and one
    # COMMIT (meta/group_commit.py); False: one transaction each.
    group_commit: bool = True
    # Writes are refused (507 InsufficientStorage) while less than this stays free on the
    # data volume; deletes never are.
    min_free_bytes: int = 1024 * 1024 * 1024
    # Preallocated beside the SQLite database and given up when a delete finds the disk
    # full, so that space can always be freed through the API (blobs/space.py).
    db_reserve_bytes: int = 32 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Lifecycle:
    interval_seconds: float = 3600.0
    day_seconds: float = SECONDS_PER_DAY  # testing aid: how long a lifecycle "day" lasts


@dataclass(frozen=True, slots=True)
class ClusterTLS:
    ca_file: str
    cert_file: str
    key_file: str


@dataclass(frozen=True, slots=True)
class Cluster:
    enabled: bool = False
    node_id: str = ""  # empty: generated and stored by the server
    secret: str = ""
    secret_previous: str | None = None
    consistency: str = "quorum"
    cluster_size: int = 1
    discovery: str = "static"
    peers: tuple[str, ...] = ()  # base URLs, without trailing slash
    dns_name: str = ""
    advertise_url: str = ""
    request_timeout_seconds: float = 10.0
    # A replicated row or deletion stamped further ahead of this node's clock is refused
    # (convergence/lww.py `too_far_ahead`): a peer whose clock runs fast.
    max_clock_ahead_seconds: float = 300.0
    probe_interval_seconds: float = 5.0
    anti_entropy_interval_seconds: float = 30.0
    blob_repair_budget: int = 100
    # The capacity guard refuses a write (507) that would leave the smallest eligible node
    # with less than this free (cluster/gate.py `capacity_ok`).
    capacity_reserve_bytes: int = 256 * 1024**2
    tombstone_grace_days: float = 7.0
    tombstone_grace_seconds: float | None = None
    peer_prune_days: float | None = None
    peer_prune_seconds: float | None = None  # overrides peer_prune_days (tests)
    tls: ClusterTLS | None = None
    # Not a config key: the ids (never the keys) of this node's master key versions, filled
    # in at start from [encryption] (service.py `with_key_ids`); part of the fingerprint, so
    # a node holding other master keys is config drift (cluster/auth.py).
    encryption_key_ids: tuple[str, ...] = ()

    @property
    def write_quorum(self) -> int:
        return self.cluster_size // 2 + 1

    @property
    def tombstone_grace_total_seconds(self) -> float:
        if self.tombstone_grace_seconds is not None:
            return self.tombstone_grace_seconds
        return self.tombstone_grace_days * SECONDS_PER_DAY

    @property
    def peer_prune_total_seconds(self) -> float:
        if self.peer_prune_seconds is not None:
            return self.peer_prune_seconds
        if self.peer_prune_days is not None:
            return self.peer_prune_days * SECONDS_PER_DAY
        return self.tombstone_grace_total_seconds


@dataclass(frozen=True, slots=True)
class Notifications:
    channel_size: int = 10000
    max_retries: int = 8
    retry_base_seconds: float = 1.0
    webhook_timeout_seconds: float = 10.0
    event_retention_days: float = 7.0
    # [notifications.targets.<name>] tables: their kind is checked here, their keys by the
    # kind's own `validate` at start (notify/targets, through startup.checked_config).
    targets: tuple[NotificationTarget, ...] = ()


@dataclass(frozen=True, slots=True)
class NotificationTarget:
    name: str
    kind: str
    table: tuple[tuple[str, Any], ...]  # the table as written, `kind` included

    def settings(self) -> dict[str, Any]:
        return dict(self.table)


@dataclass(frozen=True, slots=True)
class Encryption:
    enabled: bool = False
    kms_provider: str = "local"
    # Created (0600) at first start when absent; None: <data_dir>/control/keys/master.key
    master_key_file: str | None = None
    vault_url: str = ""
    vault_token_file: str | None = None
    vault_key_name: str = "objstore"
    vault_mount: str = "transit"  # the transit engine's mount path
    vault_ca_file: str | None = None  # None: the system roots verify Vault's certificate
    # SSE-C requests over plain HTTP (tests, a TLS-terminating proxy in front); AWS refuses
    # them: the customer's key would cross the network in clear.
    allow_ssec_over_http: bool = False


@dataclass(frozen=True, slots=True)
class Audit:
    enabled: bool = True
    retention_days: float = 30.0
    # No answer of an audited request leaves before its record is committed (audit/strict.py).
    strict: bool = False


@dataclass(frozen=True, slots=True)
class Metrics:
    history_interval_seconds: float = 60.0
    history_retention_hours: float = 24.0
    # A file holding a token GET /admin/metrics then requires as "Authorization: Bearer".
    bearer_token_file: str | None = None
    # false drops the per-bucket families (objstore_bucket_*): bucket names stay private.
    bucket_labels: bool = True


@dataclass(frozen=True, slots=True)
class Logging:
    level: str = "info"
    format: str = "text"
    # One line per request: "" off, "-" standard output, else a file path (appended).
    access_log: str = ""
    access_log_format: str = "text"


@dataclass(frozen=True, slots=True)
class Outbox:
    # Undelivered outbox entries (engine/outbox.py) past which client writes are refused
    # with 503 SlowDown rather than an event being dropped; only while a consumer is
    # registered.
    max_backlog: int = 100000


@dataclass(frozen=True, slots=True)
class Replication:
    # Bucket replication on this node: the journal's outbox consumer and the worker (off:
    # rules are still stored, nothing is journaled or sent, writes skip the outbox entry).
    enabled: bool = True
    # The bucket replication worker (replication/worker.py), on every node: seconds between
    # journal passes, the retry backoff (base doubling per failure, capped), the attempts
    # after which an entry is FAILED, the destination request timeout and the entries
    # sent at once.
    tick_seconds: float = 1.0
    retry_base_seconds: float = 5.0
    retry_max_seconds: float = 3600.0
    max_attempts: int = 25
    timeout_seconds: float = 60.0
    concurrency: int = 4
    # COMPLETED and SKIPPED journal entries are purged this long after their last change.
    journal_retention_days: float = 7.0


@dataclass(frozen=True, slots=True)
class Config:
    server: Server
    storage: Storage
    lifecycle: Lifecycle
    cluster: Cluster
    notifications: Notifications
    outbox: Outbox
    encryption: Encryption
    audit: Audit
    metrics: Metrics
    logging: Logging
    replication: Replication = Replication()
    warnings: tuple[str, ...] = ()
    source_path: str | None = None
    # The node-local switch a migrate-db job wrote (meta/db_copy.py), when one was applied
    # over [storage] metadata_backend and postgres_url.
    metadata_override_path: str | None = None


# --- checkers: each takes (value, context) and returns the typed value or raises _Invalid ---


class _Invalid(Exception):
    """A value failed its check; `show_value` appends ", got <value>" to the message."""

    def __init__(self, message: str, *, show_value: bool = True) -> None:
        super().__init__(message)
        self.message = message
        self.show_value = show_value


@dataclass
class _Context:
    base_dir: str
    warnings: list[str] = field(default_factory=list)

    def resolve(self, path: str) -> str:
        return os.path.normpath(os.path.join(self.base_dir, os.path.expanduser(path)))


Checker = Callable[[Any, _Context], Any]


def _int(lo: int, hi: int | None = None) -> Checker:
    wanted = f"an integer between {lo} and {hi}" if hi is not None else f"an integer >= {lo}"

    def check(value: Any, ctx: _Context) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Invalid(f"must be {wanted}")
        if value < lo or (hi is not None and value > hi):
            raise _Invalid(f"must be {wanted}")
        return value

    return check


def _num(lo: float, *, above: bool = False) -> Checker:
    """A float; ints are accepted. `above` makes the bound strict (> lo instead of >= lo)."""
    wanted = f"a number {'>' if above else '>='} {lo:g}"

    def check(value: Any, ctx: _Context) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _Invalid(f"must be {wanted}")
        if not math.isfinite(value) or value < lo or (above and value == lo):
            raise _Invalid(f"must be {wanted}")
        return float(value)

    return check


def _bool(value: Any, ctx: _Context) -> bool:
    if not isinstance(value, bool):
        raise _Invalid("must be true or false")
    return value


def _str(pattern: str | None = None, wanted: str = "a string") -> Checker:
    compiled = re.compile(pattern) if pattern else None

    def check(value: Any, ctx: _Context) -> str:
        if not isinstance(value, str) or (compiled and not compiled.fullmatch(value)):
            raise _Invalid(f"must be {wanted}")
        return value

    return check


def _choice(*allowed: str) -> Checker:
    wanted = "one of " + ", ".join(repr(a) for a in allowed)

    def check(value: Any, ctx: _Context) -> str:
        if value not in allowed or not isinstance(value, str):
            raise _Invalid(f"must be {wanted}")
        return value

    return check


def _path(*, must_exist: bool) -> Checker:
    def check(value: Any, ctx: _Context) -> str:
        if not isinstance(value, str) or not value.strip():
            raise _Invalid("must be a non-empty path")
        path = ctx.resolve(value)
        if must_exist:
            if not os.path.exists(path):
                raise _Invalid(f"no such file: {path}", show_value=False)
            if not os.path.isfile(path):
                raise _Invalid(f"not a regular file: {path}", show_value=False)
            if not os.access(path, os.R_OK):
                raise _Invalid(f"not readable: {path}", show_value=False)
        return path

    return check


def _log_destination(value: Any, ctx: _Context) -> str:
    """"" (off), "-" (standard output) or a file path, resolved; its directory must exist."""
    if not isinstance(value, str):
        raise _Invalid('must be "" (off), "-" (standard output) or a file path')
    if value in ("", "-"):
        return value
    path = ctx.resolve(value)
    if not os.path.isdir(os.path.dirname(path) or "."):
        raise _Invalid(f"no such directory: {os.path.dirname(path)}", show_value=False)
    return path


def _url(value: Any, ctx: _Context) -> str:
    """An http:// or https:// base URL; returned without a trailing slash."""
    wanted = "an http:// or https:// URL such as 'https://node1.example.com:9000'"
    if not isinstance(value, str):
        raise _Invalid(f"must be {wanted}")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 -- raises ValueError on a bad port
    except ValueError:
        raise _Invalid(f"must be {wanted}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or \
            parts.fragment or parts.username or parts.password:
        raise _Invalid(f"must be {wanted}")
    return value.rstrip("/")


def _optional(check: Checker) -> Checker:
    """The empty string means "not set" (keeps its default of "")."""
    return lambda value, ctx: value if value == "" else check(value, ctx)


def _array(item: Checker) -> Checker:
    def check(value: Any, ctx: _Context) -> tuple[Any, ...]:
        if not isinstance(value, list):
            raise _Invalid("must be an array")
        items = []
        for index, element in enumerate(value, 1):
            try:
                items.append(item(element, ctx))
            except _Invalid as exc:
                raise _Invalid(f"item {index} {exc.message}, got {_show(element)}",
                               show_value=False) from None
        duplicates = sorted({i for i in items if items.count(i) > 1})
        if duplicates:
            raise _Invalid(f"duplicate entry {_show(duplicates[0])}", show_value=False)
        return tuple(items)

    return check


_LABEL = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
_HOSTNAME = rf"(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*"
_DNS_NAME = r"[A-Za-z0-9_]([A-Za-z0-9_.-]{0,252})"
_NODE_ID = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"

_non_empty = _str(r"\S(.*\S)?", "a non-empty string without surrounding spaces")
_domain = _str(_HOSTNAME, "a lowercase host name such as 's3.example.com' (no scheme or port)")
_origin = _str(r"\*|https?://[^*\s/]*\*?[^*\s/]*",
               "an origin such as 'https://console.example.com' (one '*' at most) or '*'")


# --- the field tables ----------------------------------------------------------------------


class _F(NamedTuple):
    name: str
    check: Checker
    sensitive: bool = False  # never echo the value in an error message
    check_default: bool = False  # run the checker on the default too (paths to resolve)


@dataclass(frozen=True)
class _Section:
    name: str  # dotted, as written in the file: "server.limits"
    cls: type
    fields: tuple[_F, ...]
    subsections: tuple[_Section, ...] = ()
    finish: Callable[[dict[str, Any], _Context], None] | None = None

    @property
    def key(self) -> str:
        return self.name.rpartition(".")[2]


_SERVER_LIMITS = _Section("server.limits", ServerLimits, (
    _F("max_body_size", _int(1)),
    _F("max_header_count", _int(1)),
    _F("max_metadata_size", _int(1)),
    _F("rate_limit_per_second", _num(0)),
    _F("rate_limit_burst", _int(0)),
    _F("rate_limit_per_ip_per_second", _num(0)),
    _F("rate_limit_per_ip_burst", _int(0)),
))

_SERVER_CACHE = _Section("server.cache", ServerCache, (
    _F("size", _int(0)),
    _F("ttl_seconds", _num(0)),
    _F("objects", _int(0)),
    _F("objects_ttl_seconds", _num(0)),
))

_SERVER_TLS = _Section("server.tls", ServerTLS, (
    _F("cert_file", _path(must_exist=True)),
    _F("key_file", _path(must_exist=True)),
    _F("ca_file", _path(must_exist=True)),
))

_SERVER = _Section("server", Server, (
    _F("host", _str(r"\S+", "a non-empty host name or address")),
    _F("port", _int(0, 65535)),
    _F("region", _str(r"[a-z0-9-]+", "a non-empty region name of [a-z0-9-]")),
    _F("domains", _array(_domain)),
    _F("drain_timeout_seconds", _num(0)),
    _F("workers", _int(1)),
    _F("server_header", _str(r"[!-~]([ -~]*[!-~])?", "a non-empty printable ASCII string")),
    _F("signature_v2", _bool),
    _F("cors_allowed_origins", _array(_origin)),
    _F("header_timeout_seconds", _num(0, above=True)),
    _F("idle_timeout_seconds", _num(0, above=True)),
    _F("sendfile", _bool),
    _F("block_public_access", _bool),
), subsections=(_SERVER_LIMITS, _SERVER_CACHE, _SERVER_TLS))


def _finish_storage(values: dict[str, Any], ctx: _Context) -> None:
    if values["sqlite_path"] is None:
        values["sqlite_path"] = os.path.join(values["data_dir"], "meta", "objstore.db")
    if values["metadata_backend"] == "postgres" and values["postgres_url"] is None:
        raise ConfigError('[storage] postgres_url: required when metadata_backend = "postgres"')
    if not values["fsync"]:
        ctx.warnings.append("[storage] fsync = false: acknowledged writes are not durable; "
                            "use it only for throwaway test runs")


def _postgres_url(value: Any, ctx: _Context) -> str:
    if not isinstance(value, str) or not value.startswith("postgresql"):
        raise _Invalid("must be a URL starting with 'postgresql' "
                       "(e.g. postgresql://user:pass@host/db)")
    return value


_STORAGE = _Section("storage", Storage, (
    _F("data_dir", _path(must_exist=False), check_default=True),
    _F("metadata_backend", _choice("sqlite", "postgres")),
    _F("postgres_url", _postgres_url, sensitive=True),
    _F("sqlite_path", _path(must_exist=False)),
    _F("fsync", _bool),
    _F("sync_method", _choice("auto", "fsync")),
    _F("io_threads", _int(1, 256)),
    _F("db_pool_size", _int(1)),
    _F("group_commit", _bool),
    _F("min_free_bytes", _int(0)),
    _F("db_reserve_bytes", _int(0)),
), finish=_finish_storage)


def _finish_lifecycle(values: dict[str, Any], ctx: _Context) -> None:
    if values["day_seconds"] != SECONDS_PER_DAY:
        ctx.warnings.append(f"[lifecycle] day_seconds = {values['day_seconds']:g}: a lifecycle "
                            "day is not 24 hours (testing aid)")


_LIFECYCLE = _Section("lifecycle", Lifecycle, (
    _F("interval_seconds", _num(1)),
    _F("day_seconds", _num(0, above=True)),
), finish=_finish_lifecycle)

_CLUSTER_TLS = _Section("cluster.tls", ClusterTLS, (
    _F("ca_file", _path(must_exist=True)),
    _F("cert_file", _path(must_exist=True)),
    _F("key_file", _path(must_exist=True)),
))

def _finish_cluster(values: dict[str, Any], ctx: _Context) -> None:
    if not values["enabled"]:
        return
    # Secrets and TLS combinations are cluster/secrets.py's rules (parse_config).
    if values["discovery"] == "dns" and not values["dns_name"]:
        raise ConfigError('[cluster] dns_name: required when discovery = "dns"')
    if values["discovery"] == "static" and not values["peers"] and values["cluster_size"] > 1:
        ctx.warnings.append(f"[cluster] peers: empty with discovery = \"static\" and "
                            f"cluster_size = {values['cluster_size']}; this node can never "
                            "reach a write quorum")


_CLUSTER = _Section("cluster", Cluster, (
    _F("enabled", _bool),
    _F("node_id", _optional(_str(_NODE_ID, "a node id of [A-Za-z0-9._-] (at most 128)"))),
    _F("secret", _str(wanted="a string"), sensitive=True),
    _F("secret_previous", _str(wanted="a string"), sensitive=True),
    _F("consistency", _choice("quorum", "available")),
    _F("cluster_size", _int(1)),
    _F("discovery", _choice("static", "dns", "mdns")),
    _F("peers", _array(_url)),
    _F("dns_name", _optional(_str(_DNS_NAME, "a DNS name such as 'objstore.example.com'"))),
    _F("advertise_url", _optional(_url)),
    _F("request_timeout_seconds", _num(0, above=True)),
    _F("max_clock_ahead_seconds", _num(1)),
    _F("probe_interval_seconds", _num(0, above=True)),
    _F("anti_entropy_interval_seconds", _num(0, above=True)),
    _F("blob_repair_budget", _int(1)),
    _F("capacity_reserve_bytes", _int(0)),
    _F("tombstone_grace_days", _num(0, above=True)),
    _F("tombstone_grace_seconds", _num(1)),
    _F("peer_prune_days", _num(1)),
    _F("peer_prune_seconds", _num(1)),
), subsections=(_CLUSTER_TLS,), finish=_finish_cluster)

_TARGET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def _notification_targets(value: Any, ctx: _Context) -> tuple[NotificationTarget, ...]:
    if not isinstance(value, Mapping):
        raise _Invalid("must be tables [notifications.targets.<name>]")
    kinds = tuple(target_kinds.KIND_MODULES)
    found = []
    for name, table in value.items():
        where = f"[notifications.targets.{name}]"
        if not _TARGET_NAME.fullmatch(name):
            raise ConfigError(f"{where}: a target name is 1-64 letters, digits, '.', '_' "
                              "or '-'")
        if not isinstance(table, Mapping):
            raise ConfigError(f"{where}: must be a table")
        kind = table.get("kind")
        if kind not in kinds:
            raise ConfigError(f"{where} kind: must be one of {', '.join(kinds)}, got "
                              f"{_show(kind)}")
        found.append(NotificationTarget(name, kind, tuple(table.items())))
    return tuple(found)


_NOTIFICATIONS = _Section("notifications", Notifications, (
    _F("channel_size", _int(1)),
    _F("max_retries", _int(0)),
    _F("retry_base_seconds", _num(0, above=True)),
    _F("webhook_timeout_seconds", _num(0, above=True)),
    _F("event_retention_days", _num(0, above=True)),
    _F("targets", _notification_targets),
))


def _finish_encryption(values: dict[str, Any], ctx: _Context) -> None:
    if not values["enabled"]:
        return
    if values["kms_provider"] == "vault":
        for key in ("vault_url", "vault_token_file"):
            if not values[key]:
                raise ConfigError(f'[encryption] {key}: required when encryption is enabled '
                                  f'with kms_provider = "vault"')


_ENCRYPTION = _Section("encryption", Encryption, (
    _F("enabled", _bool),
    _F("kms_provider", _choice("local", "vault")),
    _F("master_key_file", _path(must_exist=False)),
    _F("vault_url", _optional(_url)),
    _F("vault_token_file", _path(must_exist=True)),
    _F("vault_key_name", _non_empty),
    _F("vault_mount", _non_empty),
    _F("vault_ca_file", _path(must_exist=True)),
    _F("allow_ssec_over_http", _bool),
), finish=_finish_encryption)

_OUTBOX = _Section("outbox", Outbox, (
    _F("max_backlog", _int(1)),
))

_REPLICATION = _Section("replication", Replication, (
    _F("enabled", _bool),
    _F("tick_seconds", _num(0, above=True)),
    _F("retry_base_seconds", _num(0, above=True)),
    _F("retry_max_seconds", _num(0, above=True)),
    _F("max_attempts", _int(1)),
    _F("timeout_seconds", _num(0, above=True)),
    _F("concurrency", _int(1, 64)),
    _F("journal_retention_days", _num(0, above=True)),
))

_AUDIT = _Section("audit", Audit, (
    _F("enabled", _bool),
    _F("retention_days", _num(0, above=True)),
    _F("strict", _bool),
))

_METRICS = _Section("metrics", Metrics, (
    _F("history_interval_seconds", _num(0, above=True)),
    _F("history_retention_hours", _num(0, above=True)),
    _F("bearer_token_file", _path(must_exist=True)),
    _F("bucket_labels", _bool),
))

_LOGGING = _Section("logging", Logging, (
    _F("level", _choice("debug", "info", "warn", "error")),
    _F("format", _choice("text", "json")),
    _F("access_log", _log_destination),
    _F("access_log_format", _choice("text", "json")),
))

_TOP_LEVEL = (_SERVER, _STORAGE, _LIFECYCLE, _CLUSTER, _NOTIFICATIONS, _OUTBOX, _ENCRYPTION,
              _AUDIT, _METRICS, _LOGGING, _REPLICATION)


def _all_sections(sections: tuple[_Section, ...] = _TOP_LEVEL) -> list[_Section]:
    found = []
    for section in sections:
        found.append(section)
        found.extend(_all_sections(section.subsections))
    return found


_SECTIONS_BY_NAME = {s.name: s for s in _all_sections()}
# Fields filled in at start, never read from the file (an unknown key there).
NOT_FROM_FILE = {"cluster": frozenset({"encryption_key_ids"})}


# --- the generic builder -------------------------------------------------------------------


def _show(value: Any) -> str:
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, Mapping):
        text = "a table"
    else:
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _unknown(section: str | None, key: str, value: Any) -> ConfigError:
    """The error for a key or table that no section declares, with a suggestion if any."""
    if isinstance(value, Mapping):
        name = f"{section}.{key}" if section else key
        close = difflib.get_close_matches(name, list(_SECTIONS_BY_NAME), n=1)
        close = close or [n for n in _SECTIONS_BY_NAME if n.rpartition(".")[2] == key]
        hint = " or ".join(f"[{n}]" for n in close)
        return ConfigError(f"unknown section [{name}]" + (f" (did you mean {hint}?)" if hint
                                                           else ""))
    owners = [s.name for s in _SECTIONS_BY_NAME.values() if key in {f.name for f in s.fields}]
    if section is None:
        hint = f" (did you mean [{owners[0]}] {key}?)" if owners else ""
        return ConfigError(f"unknown key {key} at the top level; keys belong in a [section]"
                           + hint)
    spec = _SECTIONS_BY_NAME[section]
    candidates = [f.name for f in spec.fields] + [s.key for s in spec.subsections]
    close = difflib.get_close_matches(key, candidates, n=1)
    if close:
        hint = f" (did you mean {close[0]!r}?)"
    elif owners:
        hint = f" (it belongs in [{owners[0]}])"
    else:
        hint = ""
    return ConfigError(f"unknown key [{section}] {key}{hint}")


def _build(spec: _Section, table: Mapping[str, Any], ctx: _Context) -> Any:
    subsections = {s.key: s for s in spec.subsections}
    field_names = {f.name for f in spec.fields}
    for key, value in table.items():
        if key not in field_names and key not in subsections:
            raise _unknown(spec.name, key, value)
    defaults = {
        f.name: f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
        for f in dataclasses.fields(spec.cls)
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
    }
    values: dict[str, Any] = {}
    for f in spec.fields:
        where = f"[{spec.name}] {f.name}"
        if f.name not in table:
            if f.name not in defaults:
                raise ConfigError(f"{where}: required when [{spec.name}] is present")
            value = defaults[f.name]
            values[f.name] = f.check(value, ctx) if f.check_default else value
            continue
        try:
            values[f.name] = f.check(table[f.name], ctx)
        except _Invalid as exc:
            shown = f", got {_show(table[f.name])}" if exc.show_value and not f.sensitive else ""
            raise ConfigError(f"{where}: {exc.message}{shown}") from None
    for key, sub in subsections.items():
        if key in table:
            values[key] = _build(sub, _table(sub.name, table[key]), ctx)
        elif defaults.get(key) is not None:
            values[key] = _build(sub, {}, ctx)  # a section that always exists: all defaults
        else:
            values[key] = None  # an optional section, absent
    if spec.finish is not None:
        spec.finish(values, ctx)
    return spec.cls(**values)


def _table(name: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"[{name}]: must be a table (a [{name}] section), got {_show(value)}")
    return value


# --- entry points --------------------------------------------------------------------------


def parse_config(data: Mapping[str, Any], *, base_dir: str = ".") -> Config:
    """Validate parsed TOML; relative paths are resolved against `base_dir`."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"configuration must be a table, got {_show(data)}")
    ctx = _Context(base_dir=os.path.abspath(base_dir))
    top = {s.name: s for s in _TOP_LEVEL}
    for key, value in data.items():
        if key not in top:
            raise _unknown(None, key, value)
    sections = {name: _build(spec, _table(name, data.get(name, {})), ctx)
                for name, spec in top.items()}
    found = cluster_secrets.validate(sections["cluster"], sections["server"])
    if found.errors:
        raise ConfigError(found.errors[0])
    return Config(**sections, warnings=tuple(ctx.warnings) + tuple(found.warnings))


def load_config(path: str | os.PathLike[str] | None) -> Config:
    """Read and validate a config file; None gives all defaults.

    Relative paths inside the file are resolved against the current working directory.
    """
    return config_from_data(read_config_file(path), path)


def config_from_data(data: Mapping[str, Any], path: str | os.PathLike[str] | None) -> Config:
    """Validate what `read_config_file(path)` returned."""
    config = apply_metadata_override(parse_config(data, base_dir=os.getcwd()))
    if path is None:
        return config
    return dataclasses.replace(config, source_path=os.path.abspath(os.fspath(path)))


METADATA_OVERRIDE = os.path.join("control", "metadata-backend.json")


def apply_metadata_override(config: Config) -> Config:
    """`config` with the metadata backend a migrate-db job switched this node to
    (`<data_dir>/control/metadata-backend.json`, meta/db_copy.py), when that file exists:
    it wins over [storage] metadata_backend and postgres_url until the operator removes it
    (after copying its two values into the config file)."""
    path = os.path.join(config.storage.data_dir, METADATA_OVERRIDE)
    try:
        with open(path, encoding="utf-8") as handle:
            document = json.loads(handle.read(65536))
    except FileNotFoundError:
        return config
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: the metadata backend switch written by migrate-db can "
                          f"not be read ({exc})") from None
    backend = document.get("metadata_backend") if isinstance(document, dict) else None
    url = document.get("postgres_url") if isinstance(document, dict) else None
    if backend not in ("sqlite", "postgres") or (backend == "postgres"
                                                 and not isinstance(url, str)):
        raise ConfigError(f"{path}: not a metadata backend switch (metadata_backend "
                          "sqlite or postgres, postgres_url)")
    storage = dataclasses.replace(config.storage, metadata_backend=backend,
                                  postgres_url=url if backend == "postgres"
                                  else config.storage.postgres_url)
    return dataclasses.replace(config, storage=storage, metadata_override_path=path)


def read_config_file(path: str | os.PathLike[str] | None) -> Mapping[str, Any]:
    """The parsed TOML of a config file, not yet validated; None gives an empty table."""
    if path is None:
        return {}
    name = os.fspath(path)
    try:
        with open(name, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        raise ConfigError(f"{name}: no such config file") from None
    except OSError as exc:
        raise ConfigError(f"{name}: cannot read config file: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{name}: invalid TOML at line {line}: not valid UTF-8") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{name}: {_describe_toml_error(str(exc), text)}") from None
    return data


def default_config() -> Config:
    """All defaults, paths resolved against the current working directory."""
    return load_config(None)


def _describe_toml_error(message: str, text: str) -> str:
    match = re.fullmatch(r"(.*) \(at line (\d+), column (\d+)\)", message, re.DOTALL)
    if match:
        return f"invalid TOML at line {match[2]}: {match[1]} (column {match[3]})"
    match = re.fullmatch(r"(.*) \(at end of document\)", message, re.DOTALL)
    if match:
        line = text.count("\n") + (0 if text.endswith("\n") else 1)
        return f"invalid TOML at line {max(line, 1)} (end of file): {match[1]}"
    return f"invalid TOML: {message}"
