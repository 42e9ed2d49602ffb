"""A write storm on a real three-node cluster while one node is SIGKILLed: client threads
write distinct keys through all three nodes; node c is killed in the middle. Every write
a node acknowledged (200) must afterwards be readable, with its bytes, on each surviving
node; writes that failed are not counted (their fate is not promised). Then the killed
node is started again: it catches up (anti-entropy) and serves every acknowledged write
with its bytes."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import BotoCoreError, ClientError

from tests.cluster.harness import Node, start_cluster, wait_for, wait_until_trusted

pytestmark = pytest.mark.timeout(150)

NAMES = ("a", "b", "c")
BUCKET = "storm"
THREADS_PER_NODE = 2
BEFORE_KILL_SECONDS = 3.0
AFTER_KILL_SECONDS = 4.0
STORM_WRITES = 10  # acknowledged before the kill, and again after it, at least
STORM_DEADLINE = 60.0
CATCH_UP_SECONDS = 60.0
FAST = {"anti_entropy_interval_seconds": "0.5"}


@pytest.fixture(scope="module")
def nodes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[dict[str, Node]]:
    with start_cluster(request, tmp_path_factory, NAMES,
                       cluster_overrides={name: FAST for name in NAMES}) as started:
        wait_until_trusted(started, deadline=30)
        for node in started.values():
            node.s3.create_bucket(Bucket=BUCKET)  # buckets are not replicated yet
        yield started


def body_of(key: str) -> bytes:
    """Distinct bytes per key, of varying length (up to ~100 KiB)."""
    seed = hashlib.sha256(key.encode()).digest()
    return seed * (1 + seed[0] * 12)


class Storm:
    """Writer threads; each keeps the keys a node acknowledged and counts refusals."""

    def __init__(self, nodes: dict[str, Node]) -> None:
        self.stop = threading.Event()
        self.acked: dict[str, str] = {}  # key -> the node that acknowledged it
        self.refused: dict[str, int] = {name: 0 for name in nodes}
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=self._write, args=(name, node, number))
                        for name, node in nodes.items()
                        for number in range(THREADS_PER_NODE)]

    def _write(self, name: str, node: Node, number: int) -> None:
        client: Any = node.s3
        sequence = 0
        while not self.stop.is_set():
            sequence += 1
            key = f"{name}/{number}/{sequence}"
            try:
                client.put_object(Bucket=BUCKET, Key=key, Body=body_of(key))
            except (ClientError, BotoCoreError):
                with self._lock:
                    self.refused[name] += 1
                time.sleep(0.05)
                continue
            with self._lock:
                self.acked[key] = name

    def count(self) -> int:
        with self._lock:
            return len(self.acked)

    def nodes_acked(self) -> list[str]:
        with self._lock:
            return list(self.acked.values())


def test_every_acknowledged_write_survives_a_killed_node(nodes: dict[str, Node]) -> None:
    storm = Storm(nodes)
    for thread in storm.threads:
        thread.start()
    try:
        # At least BEFORE_KILL_SECONDS of storm, and until it is one (polled: a loaded
        # machine acknowledges fewer writes per second; the checks below stay the same).
        started = time.monotonic()
        wait_for("a storm acknowledged by every node", lambda: time.monotonic() - started
                 >= BEFORE_KILL_SECONDS and storm.count() >= STORM_WRITES
                 and len(set(storm.nodes_acked())) == len(NAMES), deadline=STORM_DEADLINE)
        before_kill = storm.count()
        nodes["c"].daemon.kill()
        killed = time.monotonic()
        wait_for("a storm acknowledged by the survivors", lambda: time.monotonic() - killed
                 >= AFTER_KILL_SECONDS and storm.count() - before_kill >= STORM_WRITES,
                 deadline=STORM_DEADLINE)
    finally:
        storm.stop.set()
        for thread in storm.threads:
            thread.join(30)
    after_kill = storm.count() - before_kill
    acked_by = {name: sum(1 for n in storm.acked.values() if n == name) for name in NAMES}
    # The storm must have been one: writes acknowledged by every node before the kill and
    # by the survivors after it.
    assert before_kill >= STORM_WRITES and after_kill >= STORM_WRITES, (
        before_kill, after_kill, storm.refused)
    assert all(acked_by[name] > 0 for name in NAMES), acked_by

    print(f"storm: {before_kill} acked before the kill, {after_kill} after; by node {acked_by};"
          f" refused {storm.refused}")
    missing = {name: unserved(nodes[name], storm.acked) for name in ("a", "b")}
    assert not any(missing.values()), {name: keys[:10] for name, keys in missing.items()}

    # The killed node comes back (its start waits for /admin/health 200: synced) and
    # serves every acknowledged write, the ones it never saw included.
    nodes["c"].daemon.start()
    left: list[str] = []

    def caught_up() -> bool:
        left[:] = unserved(nodes["c"], storm.acked)
        return not left

    try:
        wait_for("c serves every acknowledged write", caught_up, CATCH_UP_SECONDS)
    except AssertionError:
        raise AssertionError(f"{len(left)} not served by c, e.g. {left[:10]}") from None


def unserved(node: Node, acked: dict[str, str]) -> list[str]:
    """The acknowledged keys `node` does not serve with their bytes."""
    client = node.s3
    listed: set[str] = set()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        listed.update(entry["Key"] for entry in page.get("Contents", []))
    wrong = [f"{key}: not listed" for key in sorted(acked) if key not in listed]
    for key in sorted(acked):
        if key not in listed:
            continue
        try:
            got = client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        except ClientError as exc:
            wrong.append(f"{key}: {exc.response['Error']['Code']}")
            continue
        if got != body_of(key):
            wrong.append(f"{key}: wrong bytes")
    return wrong
