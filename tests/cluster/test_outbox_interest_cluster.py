"""The outbox's per-bucket interest on a real two-node cluster: node b writes to a bucket
without a notification configuration (and caches that it has none), the configuration is
then put through node a, and once it reached b (the control plane's replicated bucket
settings), b's next write is delivered by b (the node serving the request); the write made
before the configuration is not."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from botocore.exceptions import ClientError

from tests.cluster.harness import Node, start_cluster, wait_for, wait_until_trusted
from tests.integration.test_notifications import start_receiver

pytestmark = pytest.mark.timeout(180)

BUCKET = "interest"


@pytest.fixture(scope="module")
def nodes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[dict[str, Node]]:
    with start_cluster(request, tmp_path_factory, ("a", "b")) as started:
        wait_until_trusted(started)
        yield started


def _configured(node: Node) -> bool:
    try:
        found = node.s3.get_bucket_notification_configuration(Bucket=BUCKET)
    except ClientError:
        return False
    return bool(found.get("QueueConfigurations"))


def test_a_configuration_from_a_peer_is_seen_by_the_next_write(
        nodes: dict[str, Node]) -> None:
    a, b = nodes["a"], nodes["b"]
    receiver, server = start_receiver()
    try:
        a.s3.create_bucket(Bucket=BUCKET)
        wait_for("the bucket on b", lambda: _exists(b))
        b.s3.put_object(Bucket=BUCKET, Key="before", Body=b"no rule yet")
        a.s3.put_bucket_notification_configuration(Bucket=BUCKET, NotificationConfiguration={
            "QueueConfigurations": [{"QueueArn": receiver.url("/cluster"),
                                     "Events": ["s3:ObjectCreated:*"]}]})
        wait_for("the configuration on b", lambda: _configured(b), deadline=30)
        b.s3.put_object(Bucket=BUCKET, Key="after", Body=b"with the rule")

        def keys() -> list[str]:
            return [r["s3"]["object"]["key"] for r in receiver.records("/cluster")]

        wait_for("b's event", lambda: "after" in keys(), deadline=30)
        records = receiver.records("/cluster")
        assert "before" not in keys()
        assert {r["responseElements"]["x-amz-id-2"] for r in records} == {b.node_id}
    finally:
        server.shutdown()


def _exists(node: Node) -> bool:
    try:
        node.s3.head_bucket(Bucket=BUCKET)
    except ClientError:
        return False
    return True
