"""Trust on real daemons (spec: Authentication 5-6, Cluster membership and peer verdicts):
three nodes a, b, c that belong together; d, which knows every address but not the
secret; e, which has the secret but a drifted configuration (cluster_size); and a, which
lists its own address among its peers. d never receives a row and is shown untrusted;
e is authenticated but config_ok=false and excluded; a's own address is a loop, not a
peer. Then the secret is rotated in the three documented steps (docs/CLUSTER.md), one node
restarted at a time, and writes keep succeeding throughout."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.cluster.harness import SECRET, Node, peers_of, start_cluster, wait_for

pytestmark = pytest.mark.timeout(120)

NAMES = ("a", "b", "c", "d", "e")
MEMBERS = ("a", "b", "c")
BUCKET = "trusted"
OUTSIDER_SECRET = "outsider-secret-4c8e1a7b3f9d2e60"
NEW_SECRET = "rotated-secret-9d2b6f41a8c3e7d5"


@pytest.fixture(scope="module")
def nodes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[dict[str, Node]]:
    overrides = {name: {"cluster_size": "3", "probe_interval_seconds": "0.5"}
                 for name in NAMES}
    overrides["d"]["secret"] = f'"{OUTSIDER_SECRET}"'
    overrides["e"]["cluster_size"] = "5"
    with start_cluster(request, tmp_path_factory, NAMES, cluster_overrides=overrides,
                       list_self=("a",)) as started:
        # On each member once its gate is open (a bucket is a write: refused while the
        # gate is closed, as it stays on d and e, which never see a bucket: a HEAD of any
        # key there is 404 all the same).
        wait_for("a, b and c trust each other", lambda: members_trusted(started),
                 deadline=30)
        for name in MEMBERS:
            started[name].s3.create_bucket(Bucket=BUCKET)
        yield started


def view(node: Node) -> dict[str, Any]:
    reply = node.admin.get("/cluster")
    assert reply.status == 200, reply.body
    return dict(reply.json)


def peer(node: Node, node_id: str) -> dict[str, Any] | None:
    found = [entry for entry in peers_of(node) if entry["node_id"] == node_id]
    assert len(found) <= 1, found
    return found[0] if found else None


def members_trusted(nodes: dict[str, Node]) -> bool:
    """a, b and c each count the three of them eligible, and the gate is open."""
    for name in MEMBERS:
        document = view(nodes[name])
        if document["eligible_node_count"] != 3 or document["gate"] != "open":
            return False
    return True


def exists(node: Node, key: str) -> bool:
    try:
        node.s3.head_object(Bucket=BUCKET, Key=key)
    except ClientError as exc:
        assert exc.response["ResponseMetadata"]["HTTPStatusCode"] == 404
        return False
    return True


def test_the_members_trust_each_other(nodes: dict[str, Node]) -> None:
    wait_for("a, b and c trust each other", lambda: members_trusted(nodes), deadline=30)


def test_a_node_without_the_secret_is_untrusted_and_gets_no_row(
        nodes: dict[str, Node]) -> None:
    wait_for("a, b and c trust each other", lambda: members_trusted(nodes), deadline=30)

    def shown_untrusted(name: str) -> bool:
        entry = peer(nodes[name], "node-d")  # its id, from its public health after a 403
        return entry is not None and entry["verdict"] == "rejected"

    for name in MEMBERS:
        wait_for(f"{name} shows d untrusted", lambda name=name: shown_untrusted(name))
        entry = peer(nodes[name], "node-d")
        assert entry is not None
        assert entry["alive"] is True and entry["authenticated"] is False
        assert entry["config_ok"] is False and entry["eligible"] is False
    # d sees the others refuse its secret likewise.
    wait_for("d shows a, b and c rejecting it", lambda: all(
        (entry := peer(nodes["d"], f"node-{name}")) is not None
        and entry["verdict"] == "rejected" for name in MEMBERS))
    assert all(not entry["eligible"] for entry in peers_of(nodes["d"]))
    assert view(nodes["d"])["eligible_node_count"] == 1

    nodes["a"].s3.put_object(Bucket=BUCKET, Key="members-only", Body=b"not for d")
    for name in ("b", "c"):
        got = nodes[name].s3.get_object(Bucket=BUCKET, Key="members-only")
        assert got["Body"].read() == b"not for d"
    assert not exists(nodes["d"], "members-only")


def test_a_drifted_node_is_authenticated_but_excluded(nodes: dict[str, Node]) -> None:
    def drift_shown(name: str) -> bool:
        entry = peer(nodes[name], "node-e")
        return entry is not None and entry["authenticated"] and entry["config_ok"] is False

    for name in MEMBERS:
        wait_for(f"{name} shows e drifted", lambda name=name: drift_shown(name))
        entry = peer(nodes[name], "node-e")
        assert entry is not None and entry["eligible"] is False
        assert view(nodes[name])["eligible_node_count"] == 3  # e is not counted
    nodes["b"].s3.put_object(Bucket=BUCKET, Key="not-for-e", Body=b"drift")
    assert nodes["c"].s3.get_object(Bucket=BUCKET, Key="not-for-e")["Body"].read() == b"drift"
    assert not exists(nodes["e"], "not-for-e")
    # e, for its part, sees no eligible peer: its gate stays closed.
    assert view(nodes["e"])["gate"] != "open"


def test_a_node_listing_itself_detects_the_loop(nodes: dict[str, Node]) -> None:
    a = nodes["a"]
    own = f"http://127.0.0.1:{a.daemon.port}"

    def loop_found() -> bool:
        return any(entry["address"] == own and entry["loop"] for entry in view(a)["nodes"])

    wait_for("a finds its own address is itself", loop_found)
    document = view(a)
    assert all(entry["address"] != own for entry in peers_of(a))  # not a peer
    assert {entry["node_id"] for entry in peers_of(a)} == {"node-b", "node-c", "node-d",
                                                           "node-e"}
    assert document["eligible_node_count"] == 3  # itself once


def rotate(node: Node, secret: str, previous: str | None) -> None:
    """Restart `node` with [cluster] secret (and secret_previous) replaced."""
    config = node.daemon.extra_config
    lines = [line for line in config.splitlines()
             if not line.startswith(("secret =", "secret_previous ="))]
    at = lines.index("[cluster]") + 1
    lines[at:at] = [f'secret = "{secret}"'] + (
        [f'secret_previous = "{previous}"'] if previous else [])
    node.daemon.stop()
    node.daemon.extra_config = "\n".join(lines) + "\n"
    node.daemon.start()


def test_secret_rotation_keeps_writes_succeeding(nodes: dict[str, Node]) -> None:
    for name in ("d", "e"):  # the outsiders are done with
        nodes[name].daemon.stop()
    wait_for("a, b and c trust each other", lambda: members_trusted(nodes), deadline=30)
    steps = ((SECRET, NEW_SECRET), (NEW_SECRET, SECRET), (NEW_SECRET, None))
    written = 0
    for step, (secret, previous) in enumerate(steps, 1):
        for name in MEMBERS:
            others = [nodes[other] for other in MEMBERS if other != name]
            nodes[name].daemon.stop()
            for writer in others:  # while `name` is down, the two others are a quorum
                written += 1
                writer.s3.put_object(Bucket=BUCKET, Key=f"rotation/{written}",
                                     Body=f"step {step}".encode())
            rotate(nodes[name], secret, previous)
            wait_for(f"step {step}: {name} trusted again", lambda: members_trusted(nodes),
                     deadline=30)
            written += 1
            nodes[name].s3.put_object(Bucket=BUCKET, Key=f"rotation/{written}",
                                      Body=f"step {step}".encode())
            for other in others:
                assert exists(other, f"rotation/{written}")
    assert written == 27
