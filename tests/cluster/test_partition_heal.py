"""A healed partition converges to last-writer-wins (spec Cluster rules 5; issue 14), on
two real daemons in available mode (consistency = "available": each side keeps taking
writes alone).

The partition is EMULATED: no packet filter (iptables / nft) is installed here, and a
network namespace per daemon would cut the test client off too. So each side writes while
the other is absent: b stopped, a takes writes; a stopped, b started and takes later
writes; then both run. Both sides wrote without seeing the other, which is what a
partition makes; what this cannot show is both sides running at once, unreachable to each
other (SIGSTOP is a freeze: the frozen side takes no writes). Rule 5's tie (equal stamps,
the larger row wins) needs equal clocks to the millisecond and is covered by the unit
tests of the apply path (tests/unit/test_object_apply_{queries,engine}.py).

After the heal every node serves the same listing and bytes: an overwrite of one key on
both sides -> the later one (b's) everywhere; a delete on b of a key written earlier on a
-> gone everywhere; a delete on a of a key rewritten later on b -> b's bytes everywhere;
keys written on one side only -> everywhere."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.cluster.harness import Node, all_trusted, start_cluster, wait_for

pytestmark = pytest.mark.timeout(120)

NAMES = ("a", "b")
BUCKET = "healed"
DEADLINE = 60.0
AVAILABLE = {"consistency": '"available"', "anti_entropy_interval_seconds": "0.5"}


@pytest.fixture(scope="module")
def nodes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[dict[str, Node]]:
    with start_cluster(request, tmp_path_factory, NAMES,
                       cluster_overrides={name: AVAILABLE for name in NAMES}) as started:
        for name, node in started.items():
            wait_for(f"{name} trusts its peer", lambda node=node: all_trusted(node, 1),
                     DEADLINE)
        yield started


def served(node: Node) -> dict[str, Any]:
    """Key -> (ETag, bytes) of everything the node lists."""
    listed = node.s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])
    found: dict[str, Any] = {}
    for entry in listed:
        try:
            body = node.s3.get_object(Bucket=BUCKET, Key=entry["Key"])["Body"].read()
        except ClientError:
            body = None  # went between the listing and the read: not converged yet
        found[entry["Key"]] = (entry["ETag"], body)
    return found


def test_both_sides_write_then_the_later_writer_wins_everywhere(
        nodes: dict[str, Node]) -> None:
    a, b = nodes["a"], nodes["b"]
    a.s3.create_bucket(Bucket=BUCKET)
    for key in ("both", "deleted-on-b", "deleted-on-a", "untouched"):
        a.s3.put_object(Bucket=BUCKET, Key=key, Body=f"{key} before".encode())
    wait_for("b holds the writes made before the partition",
             lambda: served(b) == served(a), DEADLINE)

    # Side a, alone.
    b.daemon.stop()
    a.s3.put_object(Bucket=BUCKET, Key="both", Body=b"a's overwrite, older")
    a.s3.put_object(Bucket=BUCKET, Key="deleted-on-b", Body=b"a's write, older than b's delete")
    a.s3.delete_object(Bucket=BUCKET, Key="deleted-on-a")
    a.s3.put_object(Bucket=BUCKET, Key="only-a", Body=b"written on a alone")
    # Side b, alone and later (its start waits for health 200: a is not eligible).
    a.daemon.stop()
    b.daemon.start()
    b.s3.put_object(Bucket=BUCKET, Key="both", Body=b"b's overwrite, newer")
    b.s3.delete_object(Bucket=BUCKET, Key="deleted-on-b")
    b.s3.put_object(Bucket=BUCKET, Key="deleted-on-a", Body=b"b's rewrite, newer")
    b.s3.put_object(Bucket=BUCKET, Key="only-b", Body=b"written on b alone")
    # Heal.
    a.daemon.start()  # health 200: a completed a pass toward b
    expected = {
        "both": b"b's overwrite, newer",
        "deleted-on-a": b"b's rewrite, newer",
        "only-a": b"written on a alone",
        "only-b": b"written on b alone",
        "untouched": b"untouched before",
    }
    for node in (a, b):
        wait_for(f"{node.node_id} serves the last writer's state", lambda node=node: {
            key: body for key, (_etag, body) in served(node).items()} == expected, DEADLINE)
    assert served(a) == served(b)
    # Another full pass each way changes nothing: nothing deleted comes back.
    b.s3.put_object(Bucket=BUCKET, Key="after-heal", Body=b"fanned out")
    wait_for("the write after the heal on a", lambda: "after-heal" in served(a), DEADLINE)
    expected["after-heal"] = b"fanned out"
    for node in (a, b):
        assert {key: body for key, (_etag, body) in served(node).items()} == expected
