"""Unit tests for objstore.config: defaults, the shipped sample, and every validation rule."""

from __future__ import annotations

import dataclasses
import os
import tomllib
from pathlib import Path

import pytest

from objstore.config import (
    NOT_FROM_FILE,
    ClusterTLS,
    Config,
    ConfigError,
    ServerCache,
    ServerLimits,
    ServerTLS,
    default_config,
    load_config,
    parse_config,
)

SAMPLE = Path(__file__).resolve().parents[2] / "etc" / "objstore.toml"
GOOD_SECRET = "f3K9x-Qm2Lp7Zr8Tw4Vb6Nc1"  # 24 chars, 4 classes, many distinct characters


def parse(text: str, base_dir: str = ".") -> Config:
    return parse_config(tomllib.loads(text), base_dir=base_dir)


def write(tmp_path: Path, text: str, name: str = "objstore.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(text: str, base_dir: str = ".") -> str:
    with pytest.raises(ConfigError) as info:
        parse(text, base_dir)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.fixture
def certs(tmp_path: Path) -> Path:
    for name in ("server.crt", "server.key", "ca.crt", "node.crt", "node.key"):
        (tmp_path / name).write_text("pem\n")
    return tmp_path


def cluster(extra: str = "", secret: str = GOOD_SECRET) -> str:
    return f'[cluster]\nenabled = true\nsecret = "{secret}"\n{extra}\n'


# --- defaults and the sample ---------------------------------------------------------------


def test_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config(None)
    assert config == default_config()
    assert config.source_path is None and config.warnings == ()
    assert config.server.port == 9000 and config.server.host == "0.0.0.0"
    assert config.server.region == "us-east-1" and config.server.domains == ()
    assert config.server.limits == ServerLimits()
    assert config.server.limits.max_body_size == 5 * 1024**3
    assert config.server.cache.size == 10000 and config.server.cache.ttl_seconds == 5.0
    assert config.server.cache.objects == 10000
    assert config.server.tls is None
    assert config.storage.data_dir == str(tmp_path / "data")
    assert config.storage.sqlite_path == str(tmp_path / "data" / "meta" / "objstore.db")
    assert config.storage.metadata_backend == "sqlite" and config.storage.fsync is True
    assert config.storage.sync_method == "auto" and config.storage.io_threads == 8
    assert config.lifecycle.interval_seconds == 3600 and config.lifecycle.day_seconds == 86400
    assert config.cluster.enabled is False and config.cluster.tls is None
    assert config.cluster.write_quorum == 1
    assert config.cluster.tombstone_grace_total_seconds == 7 * 86400
    assert config.cluster.peer_prune_total_seconds == 7 * 86400
    assert config.notifications.max_retries == 8
    assert config.encryption.enabled is False and config.encryption.kms_provider == "local"
    assert config.audit.enabled is True and config.metrics.history_retention_hours == 24
    assert config.logging.level == "info" and config.logging.format == "text"


def test_config_is_frozen() -> None:
    config = parse("")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.server.port = 1  # type: ignore[misc]


def test_shipped_sample_loads_and_equals_defaults(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config(SAMPLE)
    assert config.source_path == str(SAMPLE)
    assert config.warnings == ()
    # The sample only sets defaults, plus the (disabled) placeholder secret.
    sample_cluster = dataclasses.replace(config.cluster, secret="")
    assert dataclasses.replace(config, cluster=sample_cluster, source_path=None) == \
        default_config()
    # data_dir is relative to the working directory, not to etc/.
    assert config.storage.data_dir == str(tmp_path / "data")


def test_shipped_sample_placeholder_refused_when_cluster_enabled(tmp_path: Path) -> None:
    text = SAMPLE.read_text().replace("enabled = false\n# This node", "enabled = true\n# This node")
    assert text != SAMPLE.read_text()
    with pytest.raises(ConfigError, match="is the shipped placeholder; generate one with"):
        load_config(write(tmp_path, text))


def test_sample_documents_every_key() -> None:
    text = SAMPLE.read_text()
    for section in ("server", "storage", "lifecycle", "cluster", "notifications", "encryption",
                    "audit", "metrics", "logging"):
        cls = type(getattr(default_config(), section))
        for f in dataclasses.fields(cls):
            if f.name in ("limits", "cache", "tls", "targets"):
                continue  # subsections: checked by their own [section.name] header below
            if f.name in NOT_FROM_FILE.get(section, ()):
                continue
            assert f"{f.name} =" in text, f"[{section}] {f.name} missing from the sample"
    for header in ("[server.limits]", "[server.cache]", "[server.tls]", "[cluster.tls]"):
        assert header in text
    for cls in (ServerTLS, ClusterTLS):
        for f in dataclasses.fields(cls):
            assert f"#{f.name} =" in text
    for f in dataclasses.fields(ServerCache):
        assert f"{f.name} =" in text, f"[server.cache] {f.name} missing from the sample"


def test_full_file(certs: Path) -> None:
    text = f"""
[server]
host = "127.0.0.1"
port = 0
region = "eu-west-3"
domains = ["s3.example.com", "s3.local"]
drain_timeout_seconds = 0
workers = 4
server_header = "objstore/1.0"
[server.limits]
max_body_size = 1048576
rate_limit_per_second = 10
rate_limit_burst = 20
[server.cache]
size = 0
ttl_seconds = 0
[server.tls]
cert_file = "server.crt"
key_file = "server.key"
[storage]
data_dir = "store"
metadata_backend = "postgres"
postgres_url = "postgresql://u:p@localhost/objstore"
fsync = true
db_pool_size = 8
[lifecycle]
interval_seconds = 1
[cluster]
enabled = true
node_id = "node-1"
secret = "{GOOD_SECRET}"
secret_previous = "{GOOD_SECRET[::-1]}"
consistency = "available"
cluster_size = 3
peers = ["https://node2:9000/", "https://node3:9000"]
advertise_url = "https://node1:9000"
tombstone_grace_seconds = 60
peer_prune_days = 2
[cluster.tls]
ca_file = "ca.crt"
cert_file = "node.crt"
key_file = "node.key"
[notifications]
max_retries = 0
[encryption]
enabled = true
master_key_file = "keys/master.key"
[logging]
level = "debug"
format = "json"
"""
    config = parse(text, base_dir=str(certs))
    assert config.server.port == 0 and config.server.domains == ("s3.example.com", "s3.local")
    assert config.server.limits.rate_limit_per_second == 10.0
    assert isinstance(config.server.limits.rate_limit_per_second, float)
    assert config.server.tls is not None
    assert config.server.tls.cert_file == str(certs / "server.crt")
    assert config.server.tls.ca_file is None
    assert config.storage.data_dir == str(certs / "store")
    assert config.storage.sqlite_path == str(certs / "store" / "meta" / "objstore.db")
    assert config.cluster.peers == ("https://node2:9000", "https://node3:9000")
    assert config.cluster.tls is not None and config.cluster.tls.ca_file == str(certs / "ca.crt")
    assert config.cluster.write_quorum == 2
    assert config.cluster.tombstone_grace_total_seconds == 60
    assert config.cluster.peer_prune_total_seconds == 2 * 86400
    assert config.encryption.master_key_file == str(certs / "keys" / "master.key")
    assert config.logging == type(config.logging)(level="debug", format="json")
    assert config.warnings == ()


def test_load_config_resolves_relative_paths_against_cwd(monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    path = write(tmp_path / "etc", '[storage]\ndata_dir = "d"\nsqlite_path = "m.db"\n')
    monkeypatch.chdir(tmp_path)
    config = load_config(os.path.join("etc", "objstore.toml"))
    assert config.storage.data_dir == str(tmp_path / "d")
    assert config.storage.sqlite_path == str(tmp_path / "m.db")
    assert config.source_path == str(path)


def test_capacity_reserve_bytes_defaults_to_256_mib() -> None:
    assert parse("").cluster.capacity_reserve_bytes == 268435456
    assert parse(cluster()).cluster.capacity_reserve_bytes == 268435456


@pytest.mark.parametrize("value", [0, 1048576, 10 * 1024**4])
def test_capacity_reserve_bytes_is_read(value: int) -> None:
    config = parse(cluster(f"capacity_reserve_bytes = {value}"))
    assert config.cluster.capacity_reserve_bytes == value and config.warnings == ()


def test_ints_accepted_for_floats() -> None:
    config = parse("[lifecycle]\ninterval_seconds = 5\nday_seconds = 0.5\n")
    assert config.lifecycle.interval_seconds == 5.0
    assert isinstance(config.lifecycle.interval_seconds, float)
    assert config.lifecycle.day_seconds == 0.5


# --- validation rules ----------------------------------------------------------------------


BAD = [
    # types and ranges
    ('[server]\nport = "abc"', "[server] port: must be an integer between 0 and 65535, got 'abc'"),
    ("[server]\nport = 65536", "[server] port: must be an integer between 0 and 65535, got 65536"),
    ("[server]\nport = true", "[server] port: must be an integer between 0 and 65535, got true"),
    ("[server]\nport = 9000.0", "[server] port: must be an integer"),
    ('[server]\nhost = ""', "[server] host: must be a non-empty host name"),
    ('[server]\nregion = "US-East"', "[server] region: must be a non-empty region name"),
    ('[server]\nregion = ""', "[server] region:"),
    ('[server]\ndomains = "a.com,b.com"', "[server] domains: must be an array, got 'a.com,b.com'"),
    ('[server]\ndomains = ["http://s3.example.com"]', "[server] domains: item 1 must be"),
    ('[server]\ndomains = ["s3.example.com:9000"]', "[server] domains: item 1 must be"),
    ('[server]\ndomains = ["a.com", "a.com"]', "[server] domains: duplicate entry 'a.com'"),
    ("[server]\ndrain_timeout_seconds = -1", "[server] drain_timeout_seconds: must be a number "
                                             ">= 0, got -1"),
    ("[server]\nworkers = 0", "[server] workers: must be an integer >= 1, got 0"),
    ('[server]\nserver_header = ""', "[server] server_header: must be a non-empty printable"),
    ('[server]\nserver_header = "a\\r\\nX: y"', "[server] server_header:"),
    ("[server.limits]\nmax_body_size = 0", "[server.limits] max_body_size: must be an integer"),
    ("[server.limits]\nmax_header_count = 0", "[server.limits] max_header_count:"),
    ("[server.limits]\nmax_metadata_size = 0", "[server.limits] max_metadata_size:"),
    ("[server.limits]\nrate_limit_per_second = -0.5", "[server.limits] rate_limit_per_second: "
                                                      "must be a number >= 0, got -0.5"),
    ("[server.limits]\nrate_limit_burst = -1", "[server.limits] rate_limit_burst:"),
    ("[server.limits]\nrate_limit_per_ip_per_second = nan",
     "[server.limits] rate_limit_per_ip_per_second: must be a number >= 0, got nan"),
    ("[server.limits]\nrate_limit_per_ip_burst = 1.5", "[server.limits] rate_limit_per_ip_burst"),
    ("[server.cache]\nsize = -1", "[server.cache] size: must be an integer >= 0, got -1"),
    ("[server.cache]\nttl_seconds = inf", "[server.cache] ttl_seconds: must be a number >= 0"),
    ("[server.cache]\nobjects = -5", "[server.cache] objects: must be an integer >= 0, got -5"),
    ("[server.cache]\nttl_seconds = false", "[server.cache] ttl_seconds: must be a number >= 0, "
                                            "got false"),
    ("[server]\nlimits = 5", "[server.limits]: must be a table"),
    ("server = 5", "[server]: must be a table"),
    ('[server.tls]\ncert_file = "server.crt"', "[server.tls] key_file: required when "
                                                "[server.tls] is present"),
    # storage
    ('[storage]\nmetadata_backend = "mysql"', "[storage] metadata_backend: must be one of "
                                              "'sqlite', 'postgres', got 'mysql'"),
    ('[storage]\nmetadata_backend = "postgres"', "[storage] postgres_url: required when "
                                                 'metadata_backend = "postgres"'),
    ('[storage]\npostgres_url = "mysql://u:hunter2@h/db"', "[storage] postgres_url: must be a URL "
                                                           "starting with 'postgresql'"),
    ('[storage]\ndata_dir = ""', "[storage] data_dir: must be a non-empty path"),
    ("[storage]\ndata_dir = 5", "[storage] data_dir: must be a non-empty path, got 5"),
    ('[storage]\nfsync = "yes"', "[storage] fsync: must be true or false, got 'yes'"),
    ("[storage]\nfsync = 1", "[storage] fsync: must be true or false, got 1"),
    ('[storage]\nsync_method = "syncfs"', "[storage] sync_method: must be one of 'auto', "
                                          "'fsync', got 'syncfs'"),
    ("[storage]\nio_threads = 0", "[storage] io_threads: must be an integer between 1 and "
                                  "256, got 0"),
    ("[storage]\ndb_pool_size = 0", "[storage] db_pool_size: must be an integer >= 1, got 0"),
    # lifecycle
    ("[lifecycle]\ninterval_seconds = 0.5", "[lifecycle] interval_seconds: must be a number >= 1"),
    ("[lifecycle]\nday_seconds = 0", "[lifecycle] day_seconds: must be a number > 0, got 0"),
    # cluster: types and ranges
    ('[cluster]\nenabled = "true"', "[cluster] enabled: must be true or false, got 'true'"),
    ('[cluster]\nconsistency = "strong"', "[cluster] consistency: must be one of 'quorum', "
                                          "'available', got 'strong'"),
    ("[cluster]\ncluster_size = 0", "[cluster] cluster_size: must be an integer >= 1, got 0"),
    ('[cluster]\ndiscovery = "consul"', "[cluster] discovery: must be one of 'static', 'dns', "
                                        "'mdns'"),
    ('[cluster]\npeers = "http://a:9000"', "[cluster] peers: must be an array"),
    ('[cluster]\npeers = ["ftp://a"]', "[cluster] peers: item 1 must be an http:// or https:// "
                                       "URL"),
    ('[cluster]\npeers = ["http://a:99999"]', "[cluster] peers: item 1 must be an http://"),
    ('[cluster]\npeers = ["http://a:9000", 5]', "[cluster] peers: item 2 must be"),
    ('[cluster]\nadvertise_url = "node1:9000"', "[cluster] advertise_url: must be an http://"),
    ('[cluster]\nnode_id = "has space"', "[cluster] node_id: must be a node id"),
    ("[cluster]\nrequest_timeout_seconds = 0", "[cluster] request_timeout_seconds: must be a "
                                               "number > 0, got 0"),
    ("[cluster]\nprobe_interval_seconds = -1", "[cluster] probe_interval_seconds:"),
    ("[cluster]\nanti_entropy_interval_seconds = 0", "[cluster] anti_entropy_interval_seconds:"),
    ("[cluster]\nblob_repair_budget = 0", "[cluster] blob_repair_budget: must be an integer >= 1"),
    ("[cluster]\ncapacity_reserve_bytes = -1", "[cluster] capacity_reserve_bytes: must be an "
                                               "integer >= 0, got -1"),
    ("[cluster]\ncapacity_reserve_bytes = 1.5", "[cluster] capacity_reserve_bytes: must be an "
                                                "integer >= 0, got 1.5"),
    ("[cluster]\ncapacity_reserve_bytes = true", "[cluster] capacity_reserve_bytes: must be an "
                                                 "integer >= 0, got true"),
    ('[cluster]\ncapacity_reserve_bytes = "256MiB"', "[cluster] capacity_reserve_bytes: must be "
                                                     "an integer >= 0, got '256MiB'"),
    ("[cluster]\ntombstone_grace_days = 0", "[cluster] tombstone_grace_days: must be a number > 0"),
    ("[cluster]\ntombstone_grace_seconds = 0.5", "[cluster] tombstone_grace_seconds: must be a "
                                                 "number >= 1, got 0.5"),
    ("[cluster]\npeer_prune_days = 0.5", "[cluster] peer_prune_days: must be a number >= 1"),
    ("[cluster]\npeer_prune_seconds = 0", "[cluster] peer_prune_seconds: must be a number >= 1"),
    ("[cluster]\nsecret = 12345678901234567", "[cluster] secret: must be a string"),
    ('[cluster.tls]\nca_file = "x"', "[cluster.tls] ca_file: no such file:"),
    # cluster: enabled-only rules
    ('[cluster]\nenabled = true', "[cluster] secret: required when the cluster is enabled"),
    (cluster('discovery = "dns"'), '[cluster] dns_name: required when discovery = "dns"'),
    (cluster(f'secret_previous = "{GOOD_SECRET}"'), "[cluster] secret_previous: must differ "
                                                    "from [cluster] secret"),
    (cluster('secret_previous = "short"'), "[cluster] secret_previous: must be at least 16 "
                                           "characters"),
    (cluster('secret_previous = "change-me-to-a-long-random-secret"'),
     "[cluster] secret_previous: is the shipped placeholder"),
    (cluster('peers = ["http://a:9000", "https://b:9000"]'),
     "[cluster] peers: [cluster.tls] is required for an HTTPS cluster"),
    (cluster('advertise_url = "https://me:9000"'),
     "[cluster] advertise_url: [cluster.tls] is required for an HTTPS cluster"),
    # notifications, encryption, audit, metrics, logging
    ("[notifications]\nchannel_size = 0", "[notifications] channel_size: must be an integer >= 1"),
    ("[notifications]\nmax_retries = -1", "[notifications] max_retries: must be an integer >= 0"),
    ("[notifications]\nretry_base_seconds = 0", "[notifications] retry_base_seconds: must be a "
                                                "number > 0"),
    ("[notifications]\nwebhook_timeout_seconds = 0", "[notifications] webhook_timeout_seconds:"),
    ("[notifications]\nevent_retention_days = 0", "[notifications] event_retention_days:"),
    ('[encryption]\nkms_provider = "aws"', "[encryption] kms_provider: must be one of 'local', "
                                           "'vault', got 'aws'"),
    ('[encryption]\nenabled = true\nkms_provider = "vault"', "[encryption] vault_url: required"),
    ('[encryption]\nenabled = true\nkms_provider = "vault"\nvault_url = "https://v:8200"',
     "[encryption] vault_token_file: required"),
    ('[encryption]\nvault_url = "vault:8200"', "[encryption] vault_url: must be an http://"),
    ('[encryption]\nvault_token_file = "missing-token"', "[encryption] vault_token_file: no such "
                                                         "file:"),
    ('[encryption]\nvault_key_name = ""', "[encryption] vault_key_name: must be a non-empty"),
    ("[audit]\nenabled = 0", "[audit] enabled: must be true or false, got 0"),
    ("[audit]\nretention_days = 0", "[audit] retention_days: must be a number > 0, got 0"),
    ("[metrics]\nhistory_interval_seconds = 0", "[metrics] history_interval_seconds:"),
    ("[metrics]\nhistory_retention_hours = -1", "[metrics] history_retention_hours:"),
    ('[logging]\nlevel = "trace"', "[logging] level: must be one of 'debug', 'info', 'warn', "
                                   "'error', got 'trace'"),
    ('[logging]\nformat = "xml"', "[logging] format: must be one of 'text', 'json', got 'xml'"),
    ("[logging]\naccess_log = 1", "[logging] access_log: must be"),
    ('[logging]\naccess_log = "/no/such/dir/access.log"', "[logging] access_log: no such "
                                                          "directory: /no/such/dir"),
    ('[logging]\naccess_log_format = "csv"', "[logging] access_log_format: must be one of"),
    ('[metrics]\nbearer_token_file = "missing-token"', "[metrics] bearer_token_file: no such "
                                                        "file:"),
    ('[metrics]\nbucket_labels = "no"', "[metrics] bucket_labels: must be true or false"),
    # unknown keys and sections
    ("[server]\nprot = 9000", "unknown key [server] prot (did you mean 'port'?)"),
    ('[server]\ndomain = "s3.example.com"', "unknown key [server] domain (did you mean "
                                            "'domains'?)"),
    ('[server]\ndata_dir = "x"', "unknown key [server] data_dir (it belongs in [storage])"),
    ("[server]\nzzz = 1", "unknown key [server] zzz"),
    ("[sever]\nport = 1", "unknown section [sever] (did you mean [server]?)"),
    ("[server.limit]\nmax_body_size = 1", "unknown section [server.limit] (did you mean "
                                          "[server.limits]?)"),
    ('[tls]\ncert_file = "x"', "unknown section [tls] (did you mean [server.tls] or "
                               "[cluster.tls]?)"),
    ("port = 9000", "unknown key port at the top level; keys belong in a [section] (did you "
                    "mean [server] port?)"),
    ("[cluster.tls.extra]\na = 1", "unknown section [cluster.tls.extra]"),
]


@pytest.mark.parametrize(("snippet", "expected"), BAD, ids=[b[1][:60] for b in BAD])
def test_invalid_values(snippet: str, expected: str, tmp_path: Path) -> None:
    (tmp_path / "server.crt").write_text("pem\n")
    message = error_of(snippet, base_dir=str(tmp_path))
    assert expected in message


def test_sensitive_values_are_not_echoed() -> None:
    message = error_of('[storage]\npostgres_url = "mysql://u:hunter2@h/db"')
    assert "hunter2" not in message
    message = error_of("[cluster]\nsecret = 12345678901234567")
    assert "12345678901234567" not in message


def test_misspelled_key_in_file_suggests(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown key \[storage\] data_dri \(did you mean "
                                          r"'data_dir'\?\)"):
        load_config(write(tmp_path, '[storage]\ndata_dri = "x"\n'))


# --- the file itself -----------------------------------------------------------------------


def test_toml_syntax_error_has_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, '[server]\nhost = "a"\nport 9000\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}: invalid TOML at line 3: ")


def test_toml_error_at_end_of_document_has_line(tmp_path: Path) -> None:
    path = write(tmp_path, '[server]\nhost = "unterminated')
    with pytest.raises(ConfigError, match=r"invalid TOML at line 2"):
        load_config(path)


def test_toml_duplicate_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"invalid TOML at line 3"):
        load_config(write(tmp_path, "[server]\nport = 1\nport = 2\n"))


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "objstore.toml"
    path.write_bytes(b'[server]\nhost = "\xff"\n')
    with pytest.raises(ConfigError, match=r"invalid TOML at line 2: not valid UTF-8"):
        load_config(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "absent.toml")


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path)


# --- TLS files -----------------------------------------------------------------------------


def test_missing_tls_file(tmp_path: Path) -> None:
    (tmp_path / "server.crt").write_text("pem")
    message = error_of('[server.tls]\ncert_file = "server.crt"\nkey_file = "nope.key"\n',
                       base_dir=str(tmp_path))
    assert message == f"[server.tls] key_file: no such file: {tmp_path / 'nope.key'}"


def test_tls_file_that_is_a_directory(tmp_path: Path) -> None:
    (tmp_path / "server.crt").mkdir()
    message = error_of('[server.tls]\ncert_file = "server.crt"\nkey_file = "server.crt"\n',
                       base_dir=str(tmp_path))
    assert message.startswith("[server.tls] cert_file: not a regular file:")


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root reads anything")
def test_unreadable_tls_file(certs: Path) -> None:
    (certs / "server.key").chmod(0)
    message = error_of('[server.tls]\ncert_file = "server.crt"\nkey_file = "server.key"\n',
                       base_dir=str(certs))
    assert message.startswith("[server.tls] key_file: not readable:")


def test_server_tls_with_ca(certs: Path) -> None:
    config = parse('[server.tls]\ncert_file = "server.crt"\nkey_file = "server.key"\n'
                   'ca_file = "ca.crt"\n', base_dir=str(certs))
    assert config.server.tls is not None and config.server.tls.ca_file == str(certs / "ca.crt")


CLUSTER_TLS = '[cluster.tls]\nca_file = "ca.crt"\ncert_file = "node.crt"\nkey_file = "node.key"\n'
SERVER_TLS = '[server.tls]\ncert_file = "server.crt"\nkey_file = "server.key"\n'


def test_cluster_tls_requires_all_three(certs: Path) -> None:
    message = error_of('[cluster.tls]\nca_file = "ca.crt"\ncert_file = "node.crt"\n',
                       base_dir=str(certs))
    assert message == "[cluster.tls] key_file: required when [cluster.tls] is present"


def test_cluster_tls_requires_server_tls(certs: Path) -> None:
    message = error_of(cluster('peers = ["https://b:9000"]') + CLUSTER_TLS, base_dir=str(certs))
    assert message.startswith("[cluster.tls]: requires [server.tls]")


def test_cluster_tls_conflicts_with_server_client_ca(certs: Path) -> None:
    text = cluster() + CLUSTER_TLS + SERVER_TLS + 'ca_file = "ca.crt"\n'
    message = error_of(text, base_dir=str(certs))
    assert message.startswith("[cluster.tls]: cannot be combined with [server.tls] ca_file")


@pytest.mark.parametrize("discovery", ['discovery = "dns"\ndns_name = "objstore.test"',
                                       'discovery = "mdns"'])
def test_a_dns_or_mdns_cluster_on_a_tls_listener_needs_cluster_tls(certs: Path,
                                                                   discovery: str) -> None:
    message = error_of(cluster(discovery) + SERVER_TLS, base_dir=str(certs))
    assert message.startswith("[cluster.tls] is required: the listener serves TLS")
    assert parse(cluster(discovery) + SERVER_TLS + CLUSTER_TLS, base_dir=str(certs)).cluster.tls


def test_https_cluster_with_tls(certs: Path) -> None:
    config = parse(cluster('peers = ["https://b:9000"]') + CLUSTER_TLS + SERVER_TLS,
                   base_dir=str(certs))
    assert config.cluster.tls is not None and config.cluster.peers == ("https://b:9000",)


# --- cluster secret ------------------------------------------------------------------------


@pytest.mark.parametrize("secret", [
    "change-me-to-a-long-random-secret",
    "please-CHANGE_ME-now-1234",
    "ChangeMe0123456789abcdef",
    "placeholder-0123456789ab",
    "an-example-secret-123456",
    "secret-secret-secret-secret",
    "change-me",  # short AND a placeholder: the placeholder message is the useful one
])
def test_placeholder_secrets_refused(secret: str) -> None:
    message = error_of(cluster(secret=secret))
    assert message == ("[cluster] secret: is the shipped placeholder; "
                       "generate one with `objstore keygen`")


@pytest.mark.parametrize("secret", ["", "x", "Abc-123-xyz-890"])
def test_short_secrets_refused(secret: str) -> None:
    message = error_of(cluster(secret=secret))
    assert message.startswith("[cluster] secret:")
    assert "required" in message or "at least 16 characters" in message
    assert secret not in message or not secret


def test_placeholder_allowed_while_cluster_disabled() -> None:
    config = parse('[cluster]\nsecret = "change-me-to-a-long-random-secret"\n'
                   'peers = ["https://b:9000"]\n')
    assert config.cluster.enabled is False and config.warnings == ()


@pytest.mark.parametrize("secret", [
    "aaaaaaaaaaaaaaaaaaaaaaaa",  # one distinct character
    "abcabcabcabcabcabcabcABC",  # fewer than 8 distinct characters
    "abcdefghijklmnopqrstuvwx",  # one character class (lowercase)
    "12345678901234567890",      # one character class (digits)
])
def test_low_entropy_secret_accepted_with_warning(secret: str) -> None:
    config = parse(cluster(secret=secret))
    assert config.cluster.secret == secret
    assert len(config.warnings) == 1
    assert config.warnings[0].startswith("[cluster] secret: low entropy")


def test_strong_secret_has_no_warning() -> None:
    for secret in (GOOD_SECRET, "0123456789abcdef0123456789abcdef"):  # keygen-style hex
        assert parse(cluster(secret=secret)).warnings == ()


def test_secret_rotation() -> None:
    config = parse(cluster(f'secret_previous = "{GOOD_SECRET[::-1]}"'))
    assert config.cluster.secret_previous == GOOD_SECRET[::-1]


# --- derived values and warnings ----------------------------------------------------------


@pytest.mark.parametrize(("size", "quorum"), [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (7, 4)])
def test_write_quorum(size: int, quorum: int) -> None:
    assert parse(f"[cluster]\ncluster_size = {size}\n").cluster.write_quorum == quorum


def test_tombstone_grace_and_peer_prune() -> None:
    c = parse("[cluster]\ntombstone_grace_days = 2\n").cluster
    assert c.tombstone_grace_total_seconds == 2 * 86400
    assert c.peer_prune_total_seconds == 2 * 86400
    c = parse("[cluster]\ntombstone_grace_days = 2\ntombstone_grace_seconds = 30\n").cluster
    assert c.tombstone_grace_total_seconds == 30 and c.peer_prune_total_seconds == 30
    c = parse("[cluster]\ntombstone_grace_seconds = 30\npeer_prune_days = 1\n").cluster
    assert c.peer_prune_total_seconds == 86400
    # the test-only override in seconds wins over the days
    c = parse("[cluster]\npeer_prune_days = 3\npeer_prune_seconds = 5\n").cluster
    assert c.peer_prune_total_seconds == 5


def test_other_warnings() -> None:
    config = parse("[storage]\nfsync = false\n[lifecycle]\nday_seconds = 1\n")
    assert config.storage.fsync is False
    assert [w.split(":")[0] for w in config.warnings] == ["[storage] fsync = false",
                                                          "[lifecycle] day_seconds = 1"]
    config = parse(cluster("cluster_size = 3"))
    assert config.warnings[0].startswith("[cluster] peers: empty")


def test_parse_config_rejects_non_mapping() -> None:
    with pytest.raises(ConfigError):
        parse_config([], base_dir=".")  # type: ignore[arg-type]


def test_every_dataclass_field_has_a_checker() -> None:
    from objstore import config as module

    for spec in module._SECTIONS_BY_NAME.values():
        declared = ({f.name for f in spec.fields} | {s.key for s in spec.subsections}
                    | module.NOT_FROM_FILE.get(spec.name, frozenset()))
        assert declared == {f.name for f in dataclasses.fields(spec.cls)}, spec.name


def test_a_migrate_db_switch_overrides_the_metadata_backend(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "control").mkdir(parents=True)
    path = write(tmp_path, f'[storage]\ndata_dir = "{data}"\nmetadata_backend = "sqlite"\n')
    assert load_config(path).metadata_override_path is None
    switch = data / "control" / "metadata-backend.json"
    switch.write_text('{"metadata_backend": "postgres", "postgres_url": "postgresql://h/db"}')
    switched = load_config(path)
    assert switched.storage.metadata_backend == "postgres"
    assert switched.storage.postgres_url == "postgresql://h/db"
    assert switched.metadata_override_path == str(switch)
    for bad in ("{", '{"metadata_backend": "mysql"}', '{"metadata_backend": "postgres"}', "[]"):
        switch.write_text(bad)
        with pytest.raises(ConfigError, match="metadata-backend.json"):
            load_config(path)
