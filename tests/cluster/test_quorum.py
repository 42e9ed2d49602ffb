"""A real three-node cluster: three daemons on 127.0.0.1 (one worker each, SQLite, static
peers, one shared secret) that authenticate each other, replicate writes and deletes
(rows and blobs), refuse writes in quorum mode once two of them are gone, keep serving
reads, and answer their public cluster health with the status and node id only."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import urllib3
from botocore.exceptions import ClientError

from tests.cluster.harness import Node, all_trusted, peers_of, start_cluster, wait_for

pytestmark = pytest.mark.timeout(60)

NAMES = ("a", "b", "c")
BUCKET = "replicated"


@pytest.fixture(scope="module")
def nodes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[dict[str, Node]]:
    with start_cluster(request, tmp_path_factory, NAMES) as started:
        yield started


def test_nodes_authenticate_each_other(nodes: dict[str, Node]) -> None:
    for name, node in nodes.items():
        wait_for(f"node {name} trusts both peers", lambda node=node: all_trusted(node, 2))
        expected = {other.node_id for other in nodes.values() if other is not node}
        assert {peer["node_id"] for peer in peers_of(node)} == expected
        assert node.admin.get("/cluster").json["gate"] == "open"


def test_public_cluster_health_names_status_and_node_only(nodes: dict[str, Node]) -> None:
    http = urllib3.PoolManager(retries=False, timeout=5.0)
    for node in nodes.values():
        url = node.daemon.endpoint + "/cluster/v1/health"
        # syncing (503) until its first anti-entropy pass toward the peers it just trusted
        wait_for(f"{node.node_id} is not syncing",
                 lambda url=url: http.request("GET", url).status == 200)
        response = http.request("GET", url)
        assert response.status == 200
        assert response.json() == {"status": "ok", "node_id": node.node_id}


def test_writes_and_deletes_reach_every_node(nodes: dict[str, Node]) -> None:
    for name in NAMES:
        wait_for(f"node {name} trusts both peers", lambda name=name: all_trusted(nodes[name], 2))
    nodes["a"].s3.create_bucket(Bucket=BUCKET)  # the control plane brings it to b and c
    for name in NAMES:
        wait_for(f"the bucket on {name}", lambda name=name: _has_bucket(nodes[name]))
    body = bytes(range(256)) * 4096 + b"tail"
    nodes["a"].s3.put_object(Bucket=BUCKET, Key="dir/object", Body=body,
                             Metadata={"origin": "a"})
    for name in ("b", "c"):
        got = nodes[name].s3.get_object(Bucket=BUCKET, Key="dir/object")
        assert got["Body"].read() == body
        assert got["Metadata"] == {"origin": "a"}
    nodes["b"].s3.delete_object(Bucket=BUCKET, Key="dir/object")
    for name in ("a", "c"):
        with pytest.raises(ClientError) as caught:
            nodes[name].s3.head_object(Bucket=BUCKET, Key="dir/object")
        assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_a_blob_over_the_inline_size_streams_to_every_node(nodes: dict[str, Node]) -> None:
    """Over cluster/sender.INLINE_BLOB_BYTES (8 MiB) the fan-out streams the blob from its
    file in slices read on the IO pool (http/slice_producer.py)."""
    for name in NAMES:
        wait_for(f"node {name} trusts both peers", lambda name=name: all_trusted(nodes[name], 2))
    nodes["a"].s3.create_bucket(Bucket="big-blobs")
    for name in NAMES:
        wait_for(f"the bucket on {name}",
                 lambda name=name: _has_bucket(nodes[name], "big-blobs"))
    body = bytes(range(256)) * (36 * 1024) + b"tail"  # 9 MiB and a bit
    nodes["a"].s3.put_object(Bucket="big-blobs", Key="big", Body=body)
    for name in ("b", "c"):
        assert nodes[name].s3.get_object(Bucket="big-blobs", Key="big")["Body"].read() == body


def _has_bucket(node: Node, bucket: str = BUCKET) -> bool:
    try:
        node.s3.head_bucket(Bucket=bucket)
    except ClientError:
        return False
    return True


def test_without_a_quorum_writes_are_refused_and_reads_served(nodes: dict[str, Node]) -> None:
    a = nodes["a"]
    a.s3.put_object(Bucket=BUCKET, Key="kept", Body=b"written with a quorum")
    nodes["b"].daemon.stop()
    nodes["c"].daemon.stop()
    wait_for("node a sees the gate closed",
             lambda: a.admin.get("/cluster").json["gate"] != "open")
    with pytest.raises(ClientError) as caught:
        a.s3.put_object(Bucket=BUCKET, Key="refused", Body=b"no quorum")
    answer = caught.value.response
    assert answer["Error"]["Code"] == "ServiceUnavailable"
    assert answer["ResponseMetadata"]["HTTPStatusCode"] == 503
    assert answer["ResponseMetadata"]["HTTPHeaders"]["retry-after"] == "5"
    assert a.s3.get_object(Bucket=BUCKET, Key="kept")["Body"].read() == b"written with a quorum"
    with pytest.raises(ClientError) as missing:
        a.s3.head_object(Bucket=BUCKET, Key="refused")
    assert missing.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
