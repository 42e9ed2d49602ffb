"""The harness of tests/cluster: real daemons on 127.0.0.1 forming a cluster.

`start_cluster(request, tmp_path_factory, names=("a", "b", "c"), ...)` is a context manager
that starts one daemon per name (node id `node-<name>`, static peers = every other node,
one shared secret, fast probes; all launched at once, then each waited for until
/admin/health answers 200) and yields `{name: Node}`; each daemon is stopped at the
end and its files removed unless a test failed. Per-node config (a drifted secret, a
loop, TLS) goes through `extra_config={name: text}` appended to that node's [cluster]
section's neighbours, or `cluster_overrides={name: {key: toml_value}}` replacing keys of
its [cluster] section; `workers` is every node's [server] workers (default 1);
`list_self=(name, ...)` adds each such node's own address to its peers (a loop);
`environments={name: {variable: value}}` adds to that node's environment (e.g.
OBJSTORE_TEST_CLOCK_OFFSET_SECONDS, a node whose clock is moved).
`scheme="https"` makes a cluster CA and one certificate per node with `objstore gen-certs`
(node-<name>, IP 127.0.0.1) and gives every node [server.tls] and [cluster.tls] with them;
clients then verify against that CA (`Node.ca`). `wait_until_trusted(nodes)` waits until
every node trusts all the others (authenticated and eligible).
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
import urllib3
from botocore.config import Config as BotoConfig

from tests.integration.admin_client import AdminClient
from tests.integration.conftest import running_daemon
from tests.integration.daemon import (
    OBJSTORE,
    ROOT_ACCESS_KEY,
    ROOT_SECRET_KEY,
    Daemon,
    free_port,
)

SECRET = "cluster-test-secret-7f3a9c2e5b1d4f60"
DEADLINE_SECONDS = 15.0
START_SECONDS = 60.0  # each node of a cluster answers /admin/health 200 within this


@dataclass
class Node:
    daemon: Daemon
    node_id: str

    @property
    def ca(self) -> Path | None:
        """The CA of the node's certificate under https (None: plain HTTP)."""
        return self.daemon.tls_ca

    @property
    def admin(self) -> AdminClient:
        if self.ca is None:
            return AdminClient(self.daemon.endpoint)
        pool = urllib3.HTTPSConnectionPool("127.0.0.1", self.daemon.port, retries=False,
                                           timeout=30.0, ca_certs=str(self.ca))
        return AdminClient(self.daemon.endpoint, http=pool)

    @property
    def s3(self) -> Any:
        return boto3.client(
            "s3", endpoint_url=self.daemon.endpoint, aws_access_key_id=ROOT_ACCESS_KEY,
            aws_secret_access_key=ROOT_SECRET_KEY, region_name="us-east-1",
            verify=str(self.ca) if self.ca is not None else None,
            config=BotoConfig(signature_version="s3v4", retries={"total_max_attempts": 1}))


def cluster_section(node_id: str, peers: Sequence[str], *, size: int,
                    overrides: Mapping[str, str] | None = None) -> str:
    """The [cluster] section of one node; `overrides` maps keys to TOML values."""
    listed = ", ".join(f'"{peer}"' for peer in peers)
    keys = {
        "enabled": "true",
        "node_id": f'"{node_id}"',
        "secret": f'"{SECRET}"',
        "consistency": '"quorum"',
        "cluster_size": str(size),
        "discovery": '"static"',
        "peers": f"[{listed}]",
        "request_timeout_seconds": "2",
        "probe_interval_seconds": "0.3",
    }
    keys.update(overrides or {})
    return "[cluster]\n" + "".join(f"{key} = {value}\n" for key, value in keys.items())


def wait_for(what: str, check: Callable[[], bool], deadline: float = DEADLINE_SECONDS) -> None:
    """Poll `check` until it holds; fail after `deadline` seconds."""
    until = time.monotonic() + deadline
    while not check():
        assert time.monotonic() < until, f"not within {deadline}s: {what}"
        time.sleep(0.1)


def gen_certs(directory: Path, *args: str) -> None:
    """`objstore gen-certs ARGS --dir DIRECTORY`, which must succeed."""
    done = subprocess.run([OBJSTORE, "gen-certs", *args, "--dir", str(directory)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def tls_sections(certs: Path, name: str) -> str:
    """[server.tls] and [cluster.tls] of node `name`: its node certificate for both (the
    listener presents it to S3 clients and peers alike), the cluster CA for peers."""
    cert, key = certs / f"node-{name}.crt", certs / f"node-{name}.key"
    return (f'[server.tls]\ncert_file = "{cert}"\nkey_file = "{key}"\n'
            f'[cluster.tls]\nca_file = "{certs / "cluster-ca.crt"}"\n'
            f'cert_file = "{cert}"\nkey_file = "{key}"\n')


@contextlib.contextmanager
def start_cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                  names: Sequence[str] = ("a", "b", "c"), *, backend: str = "sqlite",
                  scheme: str = "http",
                  cluster_overrides: Mapping[str, Mapping[str, str]] | None = None,
                  extra_config: Mapping[str, str] | None = None, workers: int = 1,
                  list_self: Sequence[str] = (),
                  environments: Mapping[str, Mapping[str, str]] | None = None,
                  ) -> Iterator[dict[str, Node]]:
    ports = {name: free_port() for name in names}
    certs: Path | None = None
    if scheme == "https":
        certs = tmp_path_factory.mktemp("cluster-certs")
        gen_certs(certs, "ca")
        for name in names:
            gen_certs(certs, "node", f"node-{name}", "--dns", f"node-{name}",
                      "--ip", "127.0.0.1")
    daemons = {}
    for name in names:
        peers = [f"{scheme}://127.0.0.1:{ports[other]}" for other in names
                 if other != name or name in list_self]
        section = cluster_section(f"node-{name}", peers, size=len(names),
                                  overrides=(cluster_overrides or {}).get(name))
        if certs is not None:
            section += tls_sections(certs, name)
        daemons[name] = Daemon(tmp_path_factory.mktemp(f"cluster-{name}"), backend=backend,
                               workers=workers, port=ports[name],
                               tls_ca=None if certs is None else certs / "cluster-ca.crt",
                               extra_config=section + (extra_config or {}).get(name, ""),
                               extra_env=dict((environments or {}).get(name, {})))
    with contextlib.ExitStack() as stack:
        # Every node starts at once (a start is mostly the interpreter loading: they overlap
        # on two cores); then each must answer /admin/health.
        for name in names:
            stack.enter_context(running_daemon(request, daemons[name], wait=False))
        for name in names:
            daemons[name].wait_ready(START_SECONDS)
        # At the end every node is sent SIGTERM at once, before each is waited for.
        stack.callback(lambda: [daemon.terminate() for daemon in daemons.values()])
        yield {name: Node(daemons[name], f"node-{name}") for name in names}


def peers_of(node: Node) -> list[dict[str, Any]]:
    """The peers in `node`'s GET /admin/cluster (itself left out)."""
    reply = node.admin.get("/cluster")
    assert reply.status == 200, reply.body
    document = reply.json
    assert document["enabled"] is True and document["node_id"] == node.node_id
    return [entry for entry in document["nodes"] if entry["state"] != "self"]


def all_trusted(node: Node, count: int) -> bool:
    peers = peers_of(node)
    return len(peers) == count and all(p["authenticated"] and p["eligible"] for p in peers)


def wait_until_trusted(nodes: Mapping[str, Node], deadline: float = DEADLINE_SECONDS) -> None:
    """Wait until every node trusts every other (each `all_trusted`), within `deadline`
    seconds per node."""
    others = len(nodes) - 1
    for name, node in nodes.items():
        wait_for(f"{name} trusts its {others} peer(s)",
                 lambda node=node: all_trusted(node, others), deadline)
