"""Anti-entropy on nodes of two workers each: worker 0 of a returning node pulls what it
missed and publishes its state (cluster/sync_view.py), so every worker of the node serves
the same objects and reports the same per-peer sync state and the same syncing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster.harness import Node, start_cluster, wait_for
from tests.cluster.test_workers import pinned, view

pytestmark = pytest.mark.timeout(180)

NAMES = ("a", "b", "c")
BUCKET = "caught-up"
DEADLINE = 60.0
FAST = {"anti_entropy_interval_seconds": "0.5"}


@pytest.fixture(scope="module")
def nodes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[dict[str, Node]]:
    with start_cluster(request, tmp_path_factory, NAMES, workers=2,
                       cluster_overrides={name: FAST for name in NAMES}) as started:
        yield started


def keys(node: Node) -> list[str]:
    listed = node.s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])
    return sorted(entry["Key"] for entry in listed)


def synced_view(document: dict[str, object]) -> bool:
    peers = [entry for entry in document["nodes"]  # type: ignore[attr-defined]
             if entry["state"] != "self"]
    return (document["syncing"] is False and len(peers) == 2
            and all(p["eligible"] and p["sync"]["first_pass_done"] and p["sync"]["lag"] == 0
                    for p in peers))


def test_every_worker_of_a_returning_node_serves_and_reports_the_catch_up(
        nodes: dict[str, Node]) -> None:
    for name, node in nodes.items():
        # Every worker: a worker whose view of the peers lags has its gate closed, and a
        # bucket is a gated write.
        for index, admin in pinned(node).items():
            wait_for(f"worker {index} of {name} is in sync with both peers",
                     lambda admin=admin: synced_view(view(admin)), DEADLINE)
        node.s3.create_bucket(Bucket=BUCKET)
    a, c = nodes["a"], nodes["c"]
    a.s3.put_object(Bucket=BUCKET, Key="before", Body=b"before")
    a.s3.put_object(Bucket=BUCKET, Key="doomed", Body=b"doomed")
    wait_for("c holds the first writes", lambda: keys(c) == ["before", "doomed"], DEADLINE)
    c.daemon.stop()
    a.s3.delete_object(Bucket=BUCKET, Key="doomed")
    a.s3.put_object(Bucket=BUCKET, Key="while-away", Body=b"while c was away")
    c.daemon.start()
    workers = pinned(c)
    for index, admin in workers.items():
        wait_for(f"worker {index} of c reports both peers in sync",
                 lambda admin=admin: synced_view(view(admin)), DEADLINE)
        assert admin.http.request("GET", "/admin/health").status == 200
    assert keys(c) == ["before", "while-away"]
    body = c.s3.get_object(Bucket=BUCKET, Key="while-away")["Body"].read()
    assert body == b"while c was away"
