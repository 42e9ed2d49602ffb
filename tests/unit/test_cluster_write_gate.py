"""The cluster's WriteGate before a local write: gate state from the live Membership,
then the capacity guard; the single node's NO_GATE lets everything through."""

from __future__ import annotations

import pytest

from objstore.cluster.gate import CLOSED_MESSAGE, SIZE_EXCEEDED_MESSAGE, GateState
from objstore.cluster.membership import Membership, ProbeResult
from objstore.cluster.write_gate import ClusterWriteGate
from objstore.config import Cluster
from objstore.engine.replicator import NO_GATE
from objstore.errors import S3Error

GIB = 1024**3


def cluster(consistency: str = "quorum", size: int = 3, **settings: int) -> Cluster:
    return Cluster(enabled=True, secret="s" * 16, cluster_size=size, consistency=consistency,
                   **settings)


def view(*peers: tuple[str, int | None]) -> Membership:
    membership = Membership("self")
    for node, free in peers:
        membership.observe(f"http://{node}:9000", ProbeResult(
            status=200, mac_ok=True, fingerprint_ok=True, node_id=node, disk_available=free),
            now=1.0)
    return membership


def refusal(gate: ClusterWriteGate, size: int) -> S3Error | None:
    try:
        gate.check_write(size)
    except S3Error as error:
        return error
    return None


def test_no_gate_accepts_everything() -> None:
    NO_GATE.check_write(10**15)


def test_an_open_gate_with_room_accepts() -> None:
    gate = ClusterWriteGate(view(("a", 10 * GIB)), cluster(), lambda: 10 * GIB)
    assert gate.state() is GateState.OPEN
    assert refusal(gate, GIB) is None


def test_a_closed_gate_refuses_with_503_even_a_delete() -> None:
    gate = ClusterWriteGate(view(), cluster(), lambda: 10 * GIB)
    error = refusal(gate, 0)
    assert error is not None and (error.status, error.message) == (503, CLOSED_MESSAGE)
    assert gate.refusals == {"closed": 1}


def test_size_exceeded_has_its_own_message() -> None:
    gate = ClusterWriteGate(view(("a", None), ("b", None), ("c", None)), cluster(),
                            lambda: 10 * GIB)
    error = refusal(gate, 1)
    assert error is not None and (error.status, error.message) == (503, SIZE_EXCEEDED_MESSAGE)


def test_available_mode_never_closes_the_gate() -> None:
    gate = ClusterWriteGate(view(), cluster("available"), lambda: 10 * GIB)
    assert gate.state() is GateState.OPEN and refusal(gate, 1) is None


@pytest.mark.parametrize(("own", "peer", "refused"), [
    (10 * GIB, 10 * GIB, False),
    (10 * GIB, GIB, True),  # the smallest eligible node bounds the cluster
    (GIB, 10 * GIB, True),
])
def test_the_capacity_guard_is_507(own: int, peer: int, refused: bool) -> None:
    gate = ClusterWriteGate(view(("a", peer)), cluster(), lambda: own)
    error = refusal(gate, GIB)
    assert (error is not None and error.status == 507) is refused
    assert refusal(gate, 0) is None  # a deletion frees space


def test_an_ineligible_peers_free_space_does_not_count() -> None:
    membership = view(("a", 10 * GIB))
    membership.observe("http://x:9000", ProbeResult(status=200, mac_ok=False, node_id="x",
                                                    disk_available=0), now=1.0)
    assert refusal(ClusterWriteGate(membership, cluster(), lambda: 10 * GIB), GIB) is None


@pytest.mark.parametrize(("reserve", "refused"), [
    (GIB // 2, False),  # 2 GiB - 1 GiB written leaves 1 GiB, above the reserve
    (GIB, False),  # exactly the reserve left
    (GIB + 1, True),
    (3 * GIB // 2, True),
])
def test_the_capacity_guard_keeps_the_configured_reserve(reserve: int, refused: bool) -> None:
    gate = ClusterWriteGate(view(("a", 4 * GIB)), cluster(capacity_reserve_bytes=reserve),
                            lambda: 2 * GIB)
    error = refusal(gate, GIB)
    assert (error is not None and error.status == 507) is refused
    assert gate.refusals == ({"capacity": 1} if refused else {})


def test_the_default_reserve_is_256_mib() -> None:
    mib = 1024**2
    gate = ClusterWriteGate(view(("a", 10 * GIB)), cluster(), lambda: GIB)
    assert refusal(gate, GIB - 256 * mib) is None
    error = refusal(gate, GIB - 256 * mib + 1)
    assert error is not None and error.status == 507


def test_bytes_this_node_already_holds_count_only_against_the_peers() -> None:
    """A completion's parts are here already: this node needs no more room for them, each
    peer does (rule 12 at CompleteMultipartUpload)."""
    gate = ClusterWriteGate(view(("a", 10 * GIB)), cluster(capacity_reserve_bytes=0),
                            lambda: GIB)
    assert refusal(gate, 2 * GIB) is not None  # would not fit here
    gate.check_write(2 * GIB, held_bytes=2 * GIB)  # here already; the peer has room
    small_peer = ClusterWriteGate(view(("a", GIB)), cluster(capacity_reserve_bytes=0),
                                  lambda: 10 * GIB)
    with pytest.raises(S3Error) as raised:
        small_peer.check_write(2 * GIB, held_bytes=2 * GIB)
    assert raised.value.status == 507
