"""Anti-entropy of object rows on a real three-node cluster (one worker each, static
peers, anti-entropy every 0.5 s; SQLite and PostgreSQL): a node that was down while objects
were written, overwritten and deleted (on a versioned bucket also a delete marker and a
version delete; a legal hold set; a bucket created with an object) catches up when it
returns: it serves exactly the listing, the version listing and the bytes of the node that
took the writes, the legal hold and the new bucket's object, and nothing deleted comes
back. Then the same the other way round: writes taken while another node was down reach
it when it returns; then six hundred objects and some deletions (several manifest pages
and batches) reach a node that was down."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import urllib3
from botocore.exceptions import ClientError

from tests.cluster.harness import Node, all_trusted, peers_of, start_cluster, wait_for
from tests.integration.conftest import BACKENDS

pytestmark = pytest.mark.timeout(300)  # 600 objects on a loaded 2-core machine

NAMES = ("a", "b", "c")
PLAIN, VERSIONED, LOCKED, BORN = "plain", "versioned", "locked", "born-while-away"
CATCH_UP_SECONDS = 60.0
QUORUM_RETRIES = 5
FAST = {"anti_entropy_interval_seconds": "0.5"}


@pytest.fixture(scope="module", params=BACKENDS)
def nodes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[dict[str, Node]]:
    with start_cluster(request, tmp_path_factory, NAMES, backend=request.param,
                       cluster_overrides={name: FAST for name in NAMES}) as started:
        for name, node in started.items():
            wait_for(f"node {name} trusts both peers", lambda node=node: all_trusted(node, 2))
        for node in started.values():  # buckets are not replicated yet
            node.s3.create_bucket(Bucket=PLAIN)
            node.s3.create_bucket(Bucket=VERSIONED)
            node.s3.put_bucket_versioning(Bucket=VERSIONED,
                                          VersioningConfiguration={"Status": "Enabled"})
            node.s3.create_bucket(Bucket=LOCKED, ObjectLockEnabledForBucket=True)
        yield started


def contents(node: Node) -> dict[str, Any]:
    """What a node serves: each bucket's listing, version listing and bytes."""
    found: dict[str, Any] = {}
    for bucket in (PLAIN, VERSIONED):
        listed = node.s3.list_objects_v2(Bucket=bucket).get("Contents", [])
        found[bucket] = sorted((o["Key"], o["ETag"], o["Size"]) for o in listed)
        versions = node.s3.list_object_versions(Bucket=bucket)
        found[f"{bucket} versions"] = sorted(
            [(v["Key"], v["VersionId"], v["IsLatest"], v["ETag"], v["Size"])
             for v in versions.get("Versions", [])]
            + [(m["Key"], m["VersionId"], m["IsLatest"], "marker", 0)
               for m in versions.get("DeleteMarkers", [])])
        found[f"{bucket} bytes"] = {
            (key, version): read(node, bucket, key, version)
            for key, version, _latest, etag, _size in found[f"{bucket} versions"]
            if etag != "marker"}
    return found


def read(node: Node, bucket: str, key: str, version: str) -> bytes | None:
    """A version's bytes; None when it went between the listing and the read (a node
    still catching up)."""
    try:
        body: bytes = node.s3.get_object(Bucket=bucket, Key=key, VersionId=version)[
            "Body"].read()
    except ClientError as error:
        if error.response["Error"]["Code"] in ("NoSuchKey", "NoSuchVersion"):
            return None
        raise
    return body


def legal_hold(node: Node, version: str) -> str:
    try:
        answer = node.s3.get_object_legal_hold(Bucket=LOCKED, Key="held", VersionId=version)
    except ClientError as error:
        if error.response["Error"]["Code"] in ("NoSuchKey", "NoSuchVersion",
                                               "NoSuchObjectLockConfiguration"):
            return "OFF"
        raise
    return str(answer["LegalHold"]["Status"])


def same_as(node: Node, reference: Node) -> bool:
    return contents(node) == contents(reference)


def synced(node: Node, peers: int) -> bool:
    """Every peer of `node` has had a full anti-entropy pass."""
    entries = peers_of(node)
    return len(entries) == peers and all(p["eligible"] and p["sync"]["first_pass_done"]
                                         for p in entries)


def health(node: Node) -> int:
    http = urllib3.PoolManager(retries=False, timeout=5.0)
    return http.request("GET", node.daemon.endpoint + "/admin/health").status


def test_a_returning_node_catches_up_without_resurrecting_deletions(
        nodes: dict[str, Node]) -> None:
    a, c = nodes["a"], nodes["c"]
    a.s3.put_object(Bucket=PLAIN, Key="kept", Body=b"kept before")
    a.s3.put_object(Bucket=PLAIN, Key="overwritten", Body=b"first bytes")
    a.s3.put_object(Bucket=PLAIN, Key="deleted", Body=b"doomed")
    first = a.s3.put_object(Bucket=VERSIONED, Key="doc", Body=b"doc v1")["VersionId"]
    held = a.s3.put_object(Bucket=LOCKED, Key="held", Body=b"held")["VersionId"]
    wait_for("c holds the writes made before it stops", lambda: same_as(c, a),
             CATCH_UP_SECONDS)
    assert legal_hold(c, held) == "OFF"

    c.daemon.stop()
    big = bytes(range(256)) * 8192 + b"tail"  # 2 MiB and a bit: spools to a file
    a.s3.put_object(Bucket=PLAIN, Key="overwritten", Body=b"second bytes, longer")
    a.s3.delete_object(Bucket=PLAIN, Key="deleted")
    a.s3.put_object(Bucket=PLAIN, Key="new/large", Body=big)
    a.s3.put_object(Bucket=VERSIONED, Key="doc", Body=b"doc v2")
    a.s3.delete_object(Bucket=VERSIONED, Key="doc")  # a delete marker
    old = a.s3.put_object(Bucket=VERSIONED, Key="other", Body=b"other v1")["VersionId"]
    a.s3.put_object(Bucket=VERSIONED, Key="other", Body=b"other v2")
    a.s3.delete_object(Bucket=VERSIONED, Key="other", VersionId=old)  # a version delete
    a.s3.delete_object(Bucket=VERSIONED, Key="doc", VersionId=first)
    a.s3.put_object_legal_hold(Bucket=LOCKED, Key="held", VersionId=held,
                               LegalHold={"Status": "ON"})  # a lock change: a fresh seq
    a.s3.create_bucket(Bucket=BORN)  # the pass's control-plane step brings it to c
    a.s3.put_object(Bucket=BORN, Key="first", Body=b"in a bucket c never saw")

    c.daemon.start()
    wait_for("c serves what a serves", lambda: same_as(c, a), CATCH_UP_SECONDS)
    served = contents(c)
    assert [key for key, _, _ in served[PLAIN]] == ["kept", "new/large", "overwritten"]
    assert served[f"{PLAIN} bytes"][("new/large", "null")] == big
    assert served[f"{PLAIN} bytes"][("overwritten", "null")] == b"second bytes, longer"
    assert [key for key, _, _ in served[VERSIONED]] == ["other"]
    versions = served[f"{VERSIONED} versions"]
    assert sorted((key, latest, etag == "marker") for key, _, latest, etag, _ in versions) \
        == [("doc", False, False), ("doc", True, True), ("other", True, False)]
    assert all(version != first and version != old for _, version, *_ in versions)
    wait_for("c holds the bucket made while it was away, and its object",
             lambda: read(c, BORN, "first", "null") == b"in a bucket c never saw",
             CATCH_UP_SECONDS)
    wait_for("c holds the legal hold set while it was away",
             lambda: legal_hold(c, held) == "ON", CATCH_UP_SECONDS)
    wait_for("c completed a pass toward both peers", lambda: synced(c, 2), CATCH_UP_SECONDS)
    assert health(c) == 200
    # Nothing deleted comes back on a (c's rows went to a as well, through a's pulls).
    wait_for("a still serves the same", lambda: same_as(a, c), CATCH_UP_SECONDS)
    assert same_as(nodes["b"], a)


def test_writes_taken_while_a_node_was_down_reach_it(nodes: dict[str, Node]) -> None:
    a, c = nodes["a"], nodes["c"]
    wait_for("every node trusts both peers",
             lambda: all(all_trusted(node, 2) for node in nodes.values()), CATCH_UP_SECONDS)
    a.daemon.stop()
    c.s3.put_object(Bucket=PLAIN, Key="while-a-was-away", Body=b"written on c")
    c.s3.delete_object(Bucket=PLAIN, Key="kept")
    c.s3.put_object(Bucket=VERSIONED, Key="doc", Body=b"doc v3")
    a.daemon.start()
    wait_for("a serves what c serves", lambda: same_as(a, c), CATCH_UP_SECONDS)
    served = contents(a)
    assert [key for key, _, _ in served[PLAIN]] == ["new/large", "overwritten",
                                                     "while-a-was-away"]
    assert served[f"{PLAIN} bytes"][("while-a-was-away", "null")] == b"written on c"
    wait_for("a completed a pass toward both peers", lambda: synced(a, 2), CATCH_UP_SECONDS)
    assert same_as(nodes["b"], c)


def listing(node: Node, prefix: str) -> dict[str, str]:
    """Key -> ETag of every object under `prefix` in PLAIN (all pages)."""
    found: dict[str, str] = {}
    for page in node.s3.get_paginator("list_objects_v2").paginate(Bucket=PLAIN,
                                                                  Prefix=prefix):
        found.update((o["Key"], o["ETag"]) for o in page.get("Contents", []))
    return found


def test_a_few_hundred_objects_written_while_a_node_was_down_reach_it(
        nodes: dict[str, Node]) -> None:
    """Anti-entropy in batches (several pages, rows applied many per transaction, bytes
    fetched in parallel): every object, its bytes and the deletions reach the node that
    was away."""
    a, c = nodes["a"], nodes["c"]
    wait_for("every node trusts both peers",
             lambda: all(all_trusted(node, 2) for node in nodes.values()), CATCH_UP_SECONDS)
    c.daemon.stop()
    client = a.s3
    bodies = {f"many/{n:04d}": b"%04d" % n * (n % 5 * 300 + 1) for n in range(600)}

    def put(key: str) -> None:
        # With c down, every write needs b's ack within request_timeout_seconds (2 s); on
        # a loaded machine that can miss, and the 503 says to retry (what is checked here
        # is the catch-up, not the quorum under load: tests/cluster/test_quorum.py).
        for attempt in range(QUORUM_RETRIES):
            try:
                client.put_object(Bucket=PLAIN, Key=key, Body=bodies[key])
                return
            except ClientError as error:
                if (error.response["Error"]["Code"] != "ServiceUnavailable"
                        or attempt == QUORUM_RETRIES - 1):
                    raise

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, bodies))
    for n in range(0, 600, 50):  # deletions among them
        client.delete_object(Bucket=PLAIN, Key=f"many/{n:04d}")
        del bodies[f"many/{n:04d}"]
    expected = {key: f'"{hashlib.md5(body).hexdigest()}"' for key, body in bodies.items()}
    assert listing(a, "many/") == expected

    c.daemon.start(timeout=CATCH_UP_SECONDS)
    wait_for("c lists every object a lists", lambda: listing(c, "many/") == expected,
             CATCH_UP_SECONDS)
    for key in list(bodies)[::37]:
        assert c.s3.get_object(Bucket=PLAIN, Key=key)["Body"].read() == bodies[key]
    wait_for("c completed a pass toward both peers", lambda: synced(c, 2), CATCH_UP_SECONDS)
    assert health(c) == 200
    assert listing(nodes["b"], "many/") == expected
