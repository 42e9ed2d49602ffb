"""The soak's partition variant (issue 14): three real daemons in available mode whose peer
links all go through TCP relays of the test (tests/cluster/relay.py); under the soak's
light mixed load (puts, overwrites, deletes through random nodes, every side keeps
writing), one node at a time is cut off from the others and healed again, at random, for
OBJSTORE_CLUSTER_SOAK_SECONDS (default 15; OBJSTORE_CLUSTER_SOAK_SEED picks the cuts; a
long run: bench/cluster_soak.py --partition).
After the last heal every node is healthy and all serve the same version listings and
the same bytes for a sample of versions: both sides' writes merged by last-writer-wins."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator

import pytest

from tests.cluster.harness import Node
from tests.cluster.relay import Links, heal_all, isolate, relayed_cluster
from tests.cluster.test_soak import (
    DEADLINE,
    NAMES,
    SOAK_SECONDS,
    Load,
    assert_converged,
    create_buckets,
)

pytestmark = pytest.mark.timeout(int(SOAK_SECONDS) + 150)

AVAILABLE = {"consistency": '"available"', "anti_entropy_interval_seconds": "0.5"}


@pytest.fixture(scope="module")
def trio(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[tuple[dict[str, Node], Links]]:
    with relayed_cluster(request, tmp_path_factory, NAMES, AVAILABLE, DEADLINE) as (
            started, relays):
        create_buckets(started)
        yield started, relays


def test_random_partitions_under_load_heal_to_identical_listings(
        trio: tuple[dict[str, Node], Links]) -> None:
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
            isolate(relays, isolated)
            cuts.append(isolated)
            time.sleep(chaos.uniform(1.0, 4.0))
            heal_all(relays)
    finally:
        heal_all(relays)
        for load in loads:
            load.stop.set()
            load.thread.join(30)
    done = {key: sum(load.done[key] for load in loads) for key in ("ok", "failed")}
    print(f"partition soak: {SOAK_SECONDS:.0f}s, cuts {cuts}, operations {done}")
    assert cuts and done["ok"] >= 50, (cuts, done)
    assert_converged(nodes, chaos)
