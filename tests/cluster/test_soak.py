"""A short soak of a real three-node cluster (issue 14): under a light mixed load (puts,
overwrites, deletes on a versioned and a plain bucket, each through a random node), one
node at a time is SIGKILLed and restarted, for OBJSTORE_CLUSTER_SOAK_SECONDS (default 15 in
CI: two or three kills; set it higher for a long run: bench/cluster_soak.py;
OBJSTORE_CLUSTER_SOAK_SEED picks the kills, OBJSTORE_CLUSTER_SOAK_BACKEND the metadata
backend, default sqlite, OBJSTORE_CLUSTER_SOAK_WORKERS each node's workers, default 1). At
the end,
every node up and healthy (/admin/health 200: synced with both peers), all nodes serve the
same version listings (keys, version ids, latest flags, ETags, delete markers) and the
same bytes for a sample of versions. Operations that failed during the chaos are not
checked (their fate is not promised); what converges is whatever the nodes accepted."""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3
from botocore.exceptions import BotoCoreError, ClientError

from tests.cluster.harness import Node, start_cluster, wait_for, wait_until_trusted

SOAK_SECONDS = float(os.environ.get("OBJSTORE_CLUSTER_SOAK_SECONDS", "15"))
BACKEND = os.environ.get("OBJSTORE_CLUSTER_SOAK_BACKEND", "sqlite")
WORKERS = int(os.environ.get("OBJSTORE_CLUSTER_SOAK_WORKERS", "1"))
pytestmark = pytest.mark.timeout(int(SOAK_SECONDS) + 150)

NAMES = ("a", "b", "c")
VERSIONED, PLAIN = "soak-versioned", "soak-plain"
KEYS = [f"k{number:02d}" for number in range(24)]
DEADLINE = 90.0
FAST = {"anti_entropy_interval_seconds": "0.5"}
SAMPLE = 40


@pytest.fixture(scope="module")
def nodes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[dict[str, Node]]:
    with start_cluster(request, tmp_path_factory, NAMES, backend=BACKEND, workers=WORKERS,
                       cluster_overrides={name: FAST for name in NAMES}) as started:
        wait_until_trusted(started, DEADLINE)
        create_buckets(started)
        yield started


def create_buckets(nodes: dict[str, Node]) -> None:
    """The soak's two buckets, made through a; returns once every node holds the versioned
    one with versioning on."""
    a = nodes["a"]
    a.s3.create_bucket(Bucket=VERSIONED)
    a.s3.put_bucket_versioning(Bucket=VERSIONED, VersioningConfiguration={"Status": "Enabled"})
    a.s3.create_bucket(Bucket=PLAIN)
    for node in nodes.values():
        wait_for(f"{node.node_id} holds the versioned bucket",
                 lambda node=node: versioning(node) == "Enabled", DEADLINE)


def versioning(node: Node) -> str | None:
    try:
        status = node.s3.get_bucket_versioning(Bucket=VERSIONED).get("Status")
    except ClientError:
        return None  # the bucket not here yet
    return None if status is None else str(status)


class Load:
    """One client thread: random puts, overwrites and deletes through random live nodes."""

    def __init__(self, nodes: dict[str, Node], seed: int) -> None:
        self.nodes = nodes
        self.down: set[str] = set()
        self.stop = threading.Event()
        self.done = {"ok": 0, "failed": 0}
        self.random = random.Random(seed)
        self.clients = {name: node.s3 for name, node in nodes.items()}
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        sequence = 0
        while not self.stop.is_set():
            sequence += 1
            up = [name for name in NAMES if name not in self.down]
            client: Any = self.clients[self.random.choice(up)]
            bucket = self.random.choice((VERSIONED, PLAIN))
            key = self.random.choice(KEYS)
            try:
                if self.random.random() < 0.25:
                    client.delete_object(Bucket=bucket, Key=key)
                else:
                    size = self.random.choice((10, 1000, 70_000))
                    body = f"{key} {sequence} ".encode() * (size // 8)
                    client.put_object(Bucket=bucket, Key=key, Body=body)
                self.done["ok"] += 1
            except (ClientError, BotoCoreError):
                self.done["failed"] += 1
                time.sleep(0.05)
            time.sleep(0.02)


def healthy(node: Node) -> bool:
    http = urllib3.PoolManager(retries=False, timeout=5.0)
    try:
        return http.request("GET", node.daemon.endpoint + "/admin/health").status == 200
    except urllib3.exceptions.HTTPError:
        return False


def versions(node: Node, bucket: str) -> list[tuple[Any, ...]]:
    found: list[tuple[Any, ...]] = []
    for page in node.s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
        found += [(v["Key"], v["VersionId"], v["IsLatest"], v["ETag"], v["Size"])
                  for v in page.get("Versions", [])]
        found += [(m["Key"], m["VersionId"], m["IsLatest"], "marker", 0)
                  for m in page.get("DeleteMarkers", [])]
    return sorted(found)


def listings(node: Node) -> dict[str, list[tuple[Any, ...]]]:
    return {bucket: versions(node, bucket) for bucket in (VERSIONED, PLAIN)}


def assert_converged(nodes: dict[str, Node], chaos: random.Random
                     ) -> dict[str, list[tuple[Any, ...]]]:
    """The soak's end: every node healthy, all list the same versions (within DEADLINE
    each), and all serve the same bytes for a sample (drawn by `chaos`) of the stored
    versions. Returns the listings they agree on."""
    for node in nodes.values():
        wait_for(f"{node.node_id} healthy", lambda node=node: healthy(node), DEADLINE)
    a = nodes["a"]
    wait_for("every node lists the same versions",
             lambda: all(listings(node) == listings(a) for node in nodes.values()), DEADLINE)
    reference = listings(a)
    stored = [(bucket, entry) for bucket, entries in reference.items()
              for entry in entries if entry[3] != "marker"]
    for bucket, (key, version, *_rest) in chaos.sample(stored, min(SAMPLE, len(stored))):
        bodies = {node.node_id: node.s3.get_object(Bucket=bucket, Key=key, VersionId=version)[
            "Body"].read() for node in nodes.values()}
        assert len(set(bodies.values())) == 1, (bucket, key, version)
    return reference


def test_random_kills_and_restarts_under_load_end_identical(nodes: dict[str, Node]) -> None:
    chaos = random.Random(int(os.environ.get("OBJSTORE_CLUSTER_SOAK_SEED", "14")))
    loads = [Load(nodes, seed) for seed in (1, 2)]
    for load in loads:
        load.thread.start()
    kills: list[str] = []
    try:
        until = time.monotonic() + SOAK_SECONDS
        while time.monotonic() < until:
            time.sleep(chaos.uniform(1.0, 3.0))
            victim = chaos.choice(NAMES)
            for load in loads:
                load.down.add(victim)
            time.sleep(0.1)  # let in-flight requests to it pick another node next
            if WORKERS > 1:
                nodes[victim].daemon.kill_tree()  # every process of it at one instant
            else:
                nodes[victim].daemon.kill()
            kills.append(victim)
            time.sleep(chaos.uniform(1.0, 3.0))
            nodes[victim].daemon.start(timeout=DEADLINE)  # health 200: synced again
            for load in loads:
                load.down.discard(victim)
    finally:
        for load in loads:
            load.stop.set()
            load.thread.join(30)
    done = {key: sum(load.done[key] for load in loads) for key in ("ok", "failed")}
    print(f"soak: {SOAK_SECONDS:.0f}s, kills {kills}, operations {done}")
    assert kills and done["ok"] >= 50, (kills, done)

    reference = assert_converged(nodes, chaos)
    assert reference[VERSIONED] and reference[PLAIN]
