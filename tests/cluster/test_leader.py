"""The worker leader across three real daemons (rule 11): only the lowest eligible node
(node-a) runs the lifecycle worker; once it is killed (SIGKILL), node-b takes over at the
next membership tick; every object is expired exactly once across the nodes, counted in
the audit logs (Lifecycle::ExpireObject) of all of them.

Each node evaluates lifecycle every second with a one-second lifecycle "day". Buckets and
their lifecycle configurations are created on every node (the control plane is not
replicated yet); objects are written through one node and replicated to the others, and
an expiry is a deletion the leader fans out."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest

from tests.cluster.harness import Node, all_trusted, peers_of, start_cluster, wait_for

pytestmark = pytest.mark.timeout(180)

NAMES = ("a", "b", "c")
BUCKET = "expiring"
FAST_LIFECYCLE = "[lifecycle]\ninterval_seconds = 1\nday_seconds = 1\n"
EXPIRE = "Lifecycle::ExpireObject"
SOON, LATER = "soon/", "later/"
COUNT = 8
DEADLINE = 45.0


@pytest.fixture(scope="module")
def nodes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[dict[str, Node]]:
    with start_cluster(request, tmp_path_factory, NAMES,
                       extra_config={name: FAST_LIFECYCLE for name in NAMES}) as started:
        yield started


def expired_keys(node: Node) -> Counter[str]:
    """How many times each key was expired on `node`, by its audit log."""
    reply = node.admin.get(f"/audit?operation={quote(EXPIRE)}&bucket={BUCKET}&limit=1000")
    assert reply.status == 200, reply.body
    return Counter(entry["key"] for entry in reply.json["entries"] if entry["status"] < 300)


def keys_on(node: Node, prefix: str) -> list[str]:
    listed = node.s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix)
    return [item["Key"] for item in listed.get("Contents", [])]


def expiration_rules() -> dict[str, Any]:
    return {"Rules": [
        {"ID": "soon", "Status": "Enabled", "Filter": {"Prefix": SOON},
         "Expiration": {"Days": 1}},
        # Due well after node-a is killed: node-b has to expire them.
        {"ID": "later", "Status": "Enabled", "Filter": {"Prefix": LATER},
         "Expiration": {"Days": 12}},
    ]}


def test_only_the_leader_expires_and_the_next_node_takes_over(nodes: dict[str, Node]) -> None:
    for name, node in nodes.items():
        wait_for(f"node {name} trusts both peers", lambda node=node: all_trusted(node, 2))
        assert node.admin.get("/cluster").json["worker_leader"] == "node-a"
        node.s3.create_bucket(Bucket=BUCKET)
        node.s3.put_bucket_lifecycle_configuration(
            Bucket=BUCKET, LifecycleConfiguration=expiration_rules())
    soon = [f"{SOON}{i}" for i in range(COUNT)]
    later = [f"{LATER}{i}" for i in range(COUNT)]
    for key in soon:  # written through node-c, replicated to a and b
        nodes["c"].s3.put_object(Bucket=BUCKET, Key=key, Body=key.encode())

    # Only node-a expires them; its deletions reach the others.
    wait_for("node-a expired every object", lambda: set(expired_keys(nodes["a"])) == set(soon),
             DEADLINE)
    for name in ("b", "c"):
        wait_for(f"the expiries reached node {name}",
                 lambda name=name: keys_on(nodes[name], SOON) == [], DEADLINE)
    assert expired_keys(nodes["a"]) == Counter({key: 1 for key in soon})
    assert expired_keys(nodes["b"]) == Counter() and expired_keys(nodes["c"]) == Counter()

    # Objects due later, then the leader dies before they are due.
    for key in later:
        nodes["b"].s3.put_object(Bucket=BUCKET, Key=key, Body=key.encode())
    nodes["a"].daemon.kill()
    wait_for("node-b sees node-a dead",
             lambda: all(p["state"] == "dead" for p in peers_of(nodes["b"])
                         if p["node_id"] == "node-a"))
    for name in ("b", "c"):
        wait_for(f"node {name} names node-b the worker leader",
                 lambda name=name: nodes[name].admin.get("/cluster").json["worker_leader"]
                 == "node-b")
    health = nodes["c"].admin.get("/health?verbose=1").json
    assert health["worker_leader"] == "node-b"

    wait_for("node-b expired the later objects",
             lambda: set(expired_keys(nodes["b"])) == set(later), DEADLINE)
    wait_for("the expiries reached node c", lambda: keys_on(nodes["c"], LATER) == [],
             DEADLINE)
    assert keys_on(nodes["b"], "") == []
    # Exactly once across the nodes: node-a's log was read before it died (it expired
    # none of the later objects: they were not due yet), node-c expired nothing.
    assert expired_keys(nodes["b"]) == Counter({key: 1 for key in later})
    assert expired_keys(nodes["c"]) == Counter()
