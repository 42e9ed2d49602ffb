"""The soak's partition variant (issue 14): three real daemons in available mode whose peer
links all go through TCP relays of the test (tests/cluster/relay.py); under the soak's
light mixed load (puts, overwrites, deletes through random nodes, every side keeps
writing), one node at a time is cut off from the others and healed again, at random, for
OBJSTORE_CLUSTER_SOAK_SECONDS (default 30; OBJSTORE_CLUSTER_SOAK_SEED picks the cuts).
After the last heal every node is healthy and all serve the same version listings and
the same bytes for a sample of versions: both sides' writes merged by last-writer-wins."""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections.abc import Iterator

import pytest

from tests.cluster.harness import Node, all_trusted, start_cluster, wait_for
from tests.cluster.relay import Relay
from tests.cluster.test_soak import (
    DEADLINE,
    NAMES,
    PLAIN,
    SAMPLE,
    SOAK_SECONDS,
    VERSIONED,
    Load,
    healthy,
    listings,
    versioning,
)

pytestmark = pytest.mark.timeout(int(SOAK_SECONDS) + 150)

AVAILABLE = {"consistency": '"available"', "anti_entropy_interval_seconds": "0.5"}


@pytest.fixture(scope="module")
def trio(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[tuple[dict[str, Node], dict[tuple[str, str], Relay]]]:
    relays = {(source, target): Relay() for source in NAMES for target in NAMES
              if source != target}
    overrides = {name: dict(AVAILABLE, peers="[" + ", ".join(
        f'"{relays[name, other].url}"' for other in NAMES if other != name) + "]")
        for name in NAMES}
    with contextlib.ExitStack() as stack:
        for relay in relays.values():
            stack.callback(relay.close)
        started = stack.enter_context(start_cluster(request, tmp_path_factory, NAMES,
                                                    cluster_overrides=overrides))
        for (_source, target), relay in relays.items():
            relay.target_port = started[target].daemon.port
        for name, node in started.items():
            wait_for(f"{name} trusts both peers", lambda node=node: all_trusted(node, 2),
                     DEADLINE)
        a = started["a"]
        a.s3.create_bucket(Bucket=VERSIONED)
        a.s3.put_bucket_versioning(Bucket=VERSIONED,
                                   VersioningConfiguration={"Status": "Enabled"})
        a.s3.create_bucket(Bucket=PLAIN)
        for node in started.values():
            wait_for(f"{node.node_id} holds the versioned bucket",
                     lambda node=node: versioning(node) == "Enabled", DEADLINE)
        yield started, relays


def test_random_partitions_under_load_heal_to_identical_listings(
        trio: tuple[dict[str, Node], dict[tuple[str, str], Relay]]) -> None:
    nodes, relays = trio
    chaos = random.Random(int(os.environ.get("OBJSTORE_CLUSTER_SOAK_SEED", "14")))
    loads = [Load(nodes, seed) for seed in (3, 4)]
    for load in loads:
        load.thread.start()
    cuts: list[str] = []
    try:
        until = time.monotonic() + SOAK_SECONDS
        while time.monotonic() < until:
            time.sleep(chaos.uniform(1.0, 3.0))
            isolated = chaos.choice(NAMES)
            for link, relay in relays.items():
                if isolated in link:
                    relay.cut()
            cuts.append(isolated)
            time.sleep(chaos.uniform(1.0, 4.0))
            for relay in relays.values():
                relay.heal()
    finally:
        for relay in relays.values():
            relay.heal()
        for load in loads:
            load.stop.set()
            load.thread.join(30)
    done = {key: sum(load.done[key] for load in loads) for key in ("ok", "failed")}
    print(f"partition soak: {SOAK_SECONDS:.0f}s, cuts {cuts}, operations {done}")
    assert cuts and done["ok"] >= 50, (cuts, done)

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
