"""The wiring of a cluster node (cluster/wiring.py), built but not started: which cluster
services each process of a node gets and in which order (worker 0 probes, publishes its
views for the other workers, runs anti-entropy and the proactive blob repair; every other
worker mirrors the views), and that the peer seams get the client. In memory: a
MemoryReactorClock, an inline pool, no peer asked."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from twisted.application.internet import TimerService
from twisted.application.service import IServiceCollection, Service
from twisted.internet.testing import MemoryReactorClock

from objstore.blobs.store import BlobStore
from objstore.cluster.anti_entropy import AntiEntropy
from objstore.cluster.blob_repair import BlobRepairService
from objstore.cluster.control_reconcile import ControlListeners
from objstore.cluster.prober import ClusterProber
from objstore.cluster.pruned_peers import PrunedPeersRecorder
from objstore.cluster.shared_view import MembershipMirror, MembershipPublisher
from objstore.cluster.sync_view import SyncMirror, SyncPublisher
from objstore.cluster.wiring import (
    ClusterParts,
    add_control_reconciler,
    cluster_parts,
    cluster_services,
    peer_seams,
)
from objstore.config import Cluster, load_config
from objstore.engine.blob_repair import NO_REPAIR
from objstore.engine.changes import ChangeHook
from objstore.engine.upload_peers import NO_UPLOAD_PEERS
from objstore.engine.versioning import KeyLocks
from objstore.errors import S3Error
from objstore.prefork import SINGLE_PROCESS, WorkerRole
from objstore.roles import LeaderDuties
from objstore.threads import InlinePool

CLUSTER = Cluster(enabled=True, secret="s" * 16, cluster_size=3,
                  peers=("http://b.test:9000", "http://c.test:9000"))
META: Any = SimpleNamespace()  # never asked: nothing here starts


class Space:
    def available_bytes(self) -> int:
        return 1 << 40


@dataclass
class Wired:
    parts: ClusterParts
    services: list[Service]


def wire(tmp_path: Path, role: WorkerRole) -> Wired:
    config: Any = SimpleNamespace(cluster=CLUSTER, storage=SimpleNamespace(
        data_dir=str(tmp_path / "data")), server=SimpleNamespace(tls=None))
    reactor, io = MemoryReactorClock(), InlinePool()
    parts = cluster_parts(config, "node-a", Space(), reactor.seconds)  # type: ignore[arg-type]
    assert parts is not None
    blobs = BlobStore(str(tmp_path / "data"), fsync=False)
    peer_seams(config, reactor, parts, meta=META, blobs=blobs, io_pool=io)
    add_control_reconciler(parts, node_id="node-a", meta=META, io_pool=io,
                           changes=ChangeHook(), control=SimpleNamespace(),  # type: ignore[arg-type]
                           blobs=blobs, listeners=ControlListeners())
    services = cluster_services(config, reactor, "node-a", parts, role=role,
                                singletons=LeaderDuties(held=False), io_pool=io, blobs=blobs,
                                changes=ChangeHook(), meta=META, locks=KeyLocks())
    return Wired(parts, services)


def children(parent: Service) -> list[type]:
    """The kinds of a service's children, in start order (its own timers left out)."""
    assert IServiceCollection.providedBy(parent)
    return [type(child) for child in parent  # type: ignore[attr-defined]
            if not isinstance(child, TimerService)]


def test_a_single_process_probes_syncs_and_repairs(tmp_path: Path) -> None:
    wired = wire(tmp_path, SINGLE_PROCESS)
    assert [type(s) for s in wired.services] == [ClusterProber, BlobRepairService]
    prober = wired.services[0]
    # the pruned peers' record, no other worker to publish for
    assert children(prober) == [PrunedPeersRecorder, AntiEntropy]
    assert wired.parts.anti_entropy is not None
    assert wired.parts.status.is_syncing == wired.parts.anti_entropy.is_syncing


def test_worker_0_of_several_publishes_the_views_around_anti_entropy(tmp_path: Path) -> None:
    role = WorkerRole(index=0, listen_fd=3, runtime_dir=str(tmp_path))
    wired = wire(tmp_path, role)
    assert [type(s) for s in wired.services] == [ClusterProber, BlobRepairService]
    assert children(wired.services[0]) == [PrunedPeersRecorder, MembershipPublisher,
                                           AntiEntropy, SyncPublisher]


def test_another_worker_mirrors_the_views_and_runs_no_singleton(tmp_path: Path) -> None:
    role = WorkerRole(index=1, listen_fd=3, runtime_dir=str(tmp_path))
    wired = wire(tmp_path, role)
    assert [type(s) for s in wired.services] == [MembershipMirror]
    assert children(wired.services[0]) == [SyncMirror]
    assert wired.parts.anti_entropy is None
    (sync,) = [child for child in wired.services[0]  # type: ignore[attr-defined]
               if isinstance(child, SyncMirror)]
    assert wired.parts.status.is_syncing == sync.is_syncing


@pytest.mark.parametrize("index", [0, 1])
def test_every_worker_fans_out_and_gives_its_peer_seams_the_client(
        tmp_path: Path, index: int) -> None:
    role = WorkerRole(index=index, listen_fd=3, runtime_dir=str(tmp_path))
    parts = wire(tmp_path, role).parts
    assert parts.client is not None and parts.fanout is not None
    assert parts.control is not None and parts.control.client is parts.client
    assert parts.repair is not None and parts.repair.enabled
    assert parts.uploads is not None and parts.uploads.enabled


class SmallSpace:
    def available_bytes(self) -> int:
        return 5 * 1048576


def test_the_gate_keeps_the_reserve_of_the_loaded_file(tmp_path: Path) -> None:
    """Every process of a node (each worker loads the file itself, prefork/child.py) builds
    its gate through `cluster_parts` from the `Config` it loaded."""
    path = tmp_path / "objstore.toml"
    path.write_text('[cluster]\nenabled = true\nsecret = "f3K9x-Qm2Lp7Zr8Tw4Vb6Nc1"\n'
                    "capacity_reserve_bytes = 1048576\n")
    parts = cluster_parts(load_config(path), "n", SmallSpace(),  # type: ignore[arg-type]
                          lambda: 0.0)
    assert parts is not None
    parts.gate.check_write(4 * 1048576)  # leaves exactly the reserve
    with pytest.raises(S3Error) as refused:
        parts.gate.check_write(4 * 1048576 + 1)
    assert refused.value.status == 507


def test_a_single_node_has_no_peer_seams(tmp_path: Path) -> None:
    config: Any = SimpleNamespace(cluster=Cluster())
    assert cluster_parts(config, "n", Space(), lambda: 0.0) is None  # type: ignore[arg-type]
    seams = peer_seams(config, MemoryReactorClock(), None, meta=META,
                       blobs=BlobStore(str(tmp_path), fsync=False), io_pool=InlinePool())
    assert seams == (NO_REPAIR, NO_UPLOAD_PEERS)
