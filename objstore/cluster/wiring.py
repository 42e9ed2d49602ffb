"""The wiring of a cluster node: building and starting a node's cluster parts from the
config.

This module owns what `service.build_node` does for `[cluster] enabled`: the state each
process holds (`ClusterParts`: membership view, write gate, health status), the peer
seams handed to the engine (blob repair, uploads through peers, the control-plane
reconciler), the start of the client and fan-out, of the prober (worker 0) or the mirror
of its view (every other worker), of anti-entropy (worker 0), the worker leadership, the
proactive blob repair (worker 0), the tombstone purge, the /cluster/v1 resource, the
per-node view sources and the cluster's metrics collectors. On a single node only the
tombstone purge, `cluster_document` and `node_view_sources` are used.

Like service.py it names concrete classes together; it decides no rule (those live in the
cluster's rule modules) and only service.py imports it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from twisted.application import service
from twisted.logger import Logger

from objstore.admin.audit_routes import audit_page
from objstore.admin.metrics_routes import history_page
from objstore.admin.notification_routes import events_page
from objstore.admin.replication_routes import journal_page
from objstore.blobs.control import ControlRecord
from objstore.blobs.space import SpaceGuard
from objstore.blobs.store import BlobStore
from objstore.cluster.anti_entropy import AntiEntropy
from objstore.cluster.api import ClusterApi, NodeFigures
from objstore.cluster.blob_repair import CURSOR_FILE, BlobRepairService, PeerBlobRepair
from objstore.cluster.client import ClusterClient, build_http_client
from objstore.cluster.control_metrics import ControlCollector
from objstore.cluster.control_reconcile import ControlListeners, ControlReconciler
from objstore.cluster.control_routes import ControlRoutes
from objstore.cluster.fanout import FanOut, StoredBlobs
from objstore.cluster.leadership import WorkerLeadership
from objstore.cluster.mdns import MdnsDiscovery
from objstore.cluster.membership import Membership
from objstore.cluster.node_views import AUDIT as AUDIT_VIEW
from objstore.cluster.node_views import METRICS_HISTORY as METRICS_HISTORY_VIEW
from objstore.cluster.node_views import (
    NOTIFICATION_EVENTS,
    REPLICATION_JOURNAL,
    LocalView,
    NodeViews,
)
from objstore.cluster.prober import ClusterProber, SystemResolver, discovery_for
from objstore.cluster.pruned_peers import PrunedPeersRecorder, pruned_path
from objstore.cluster.sender import ClientSender
from objstore.cluster.shared_view import MembershipMirror, MembershipPublisher, view_path
from objstore.cluster.sync_view import SyncMirror, SyncPublisher, sync_path
from objstore.cluster.tombstone_purge import TombstonePurge
from objstore.cluster.tombstone_purge_rules import purge_blocked, unseen_peers
from objstore.cluster.upload_peers import PeerUploads
from objstore.cluster.upload_peers_metrics import UploadPeersCollector
from objstore.cluster.write_gate import ClusterStatus, ClusterWriteGate, single_node_view
from objstore.config import Config
from objstore.engine.blob_repair import NO_REPAIR, BlobRepair
from objstore.engine.changes import ChangeHook
from objstore.engine.replication_apply import FutureStamps, ReplicationApply
from objstore.engine.settings import replicated_setting
from objstore.engine.upload_peers import NO_UPLOAD_PEERS, UploadPeers
from objstore.engine.versioning import KeyLocks
from objstore.http.health import HealthState
from objstore.http.tls_options import listener_outside_cluster_ca, unbound_node_certificate
from objstore.meta.async_store import MetaStore
from objstore.metrics.collectors import ClusterCollector
from objstore.metrics.registry import NodeMetrics
from objstore.prefork import SINGLE_PROCESS, WorkerRole
from objstore.roles import LeaderDuties
from objstore.threads import Runner

log = Logger()


@dataclass
class ClusterParts:
    """A cluster node's membership view, write gate, health status and (once
    `start_cluster` ran) fan-out, in each process. With several workers the membership is
    the node's one view: worker 0 probes and publishes it, the others mirror it
    (cluster/shared_view.py); each worker fans out the writes it serves."""

    membership: Membership
    gate: ClusterWriteGate
    status: ClusterStatus
    fanout: FanOut | None = None
    control: ControlReconciler | None = None  # pulls and merges peers' control planes
    repair: PeerBlobRepair | None = None  # blob repair, built by peer_seams
    uploads: PeerUploads | None = None  # multipart across nodes, built by peer_seams
    client: ClusterClient | None = None  # set by start_cluster
    anti_entropy: AntiEntropy | None = None  # set by start_cluster, in worker 0
    # Replicated changes refused for a stamp too far ahead (both appliers of this process).
    future_stamps: FutureStamps = field(default_factory=FutureStamps)


def cluster_parts(config: Config, node_id: str, space: SpaceGuard,
                  clock: Callable[[], float]) -> ClusterParts | None:
    """The cluster's state when [cluster] enabled; None on a single node (NO_GATE, no
    cluster in /admin/health). `start_cluster` adds its prober and fan-out."""
    if not config.cluster.enabled:
        return None
    membership = Membership(node_id)
    gate = ClusterWriteGate(membership, config.cluster, space.available_bytes)
    return ClusterParts(membership, gate, ClusterStatus(gate, clock))


# -- seams handed to the engine, before the services are built -----------------------------


def peer_seams(config: Config, reactor: Any, cluster: ClusterParts | None, *,
               meta: MetaStore, blobs: BlobStore,
               io_pool: Runner) -> tuple[BlobRepair, UploadPeers]:
    """What the object and multipart services ask the peers through: reads that find a
    blob missing (`PeerBlobRepair`) and uploads made through other nodes (`PeerUploads`,
    which fetches through that repair); both get the client in `start_cluster`. A single
    node has neither (NO_REPAIR, NO_UPLOAD_PEERS)."""
    if cluster is None:
        return NO_REPAIR, NO_UPLOAD_PEERS
    cluster.repair = PeerBlobRepair(
        peers=cluster.membership, rows=meta, blobs=blobs, io=io_pool, clock=reactor,
        retry_base_seconds=config.cluster.anti_entropy_interval_seconds)
    membership = cluster.membership
    cluster.uploads = PeerUploads(peers=cluster.membership, repair=cluster.repair,
                                  rows=meta, blobs=blobs, io=io_pool, clock=reactor,
                                  wait_seconds=config.cluster.request_timeout_seconds,
                                  cluster_size=config.cluster.cluster_size,
                                  known=lambda: tuple(membership.peers.values()))
    return cluster.repair, cluster.uploads


def add_control_reconciler(cluster: ClusterParts, *, node_id: str, meta: MetaStore,
                           io_pool: Runner, changes: ChangeHook, control: ControlRecord,
                           blobs: BlobStore, listeners: ControlListeners) -> None:
    """The reconciler pulling and merging the peers' control planes (`listeners` make the
    node's caches forget what a merge changed); upload misses pull through it too. It
    gets the client in `start_cluster`."""
    cluster.control = ControlReconciler(
        node_id=node_id, meta=meta, io=io_pool, replicated_setting=replicated_setting,
        peers=cluster.membership.eligible_peers, changes=changes, control=control,
        uploads=blobs, listeners=listeners)
    if cluster.uploads is not None:
        cluster.uploads.control = cluster.control


# -- starting the cluster: client and fan-out, then the mirror or the prober -----------------


def cluster_services(config: Config, reactor: Any, node_id: str, cluster: ClusterParts, *,
                     role: WorkerRole, singletons: LeaderDuties, io_pool: Runner,
                     blobs: BlobStore, changes: ChangeHook, meta: MetaStore,
                     locks: KeyLocks) -> list[service.Service]:
    """The node's cluster services, in their start order, for the service tree to start
    before the listener: the membership's (`start_cluster`: worker 0's prober holds the
    worker leader's rule over `singletons`), then in worker 0 the proactive blob repair
    (one pass per node: its cursor file is the node's)."""
    children: list[service.Service] = [start_cluster(
        config, reactor, node_id, cluster, io_pool, blobs, changes, role,
        leadership=worker_leadership(node_id, cluster, singletons, role),
        meta=meta, locks=locks)]
    if role.leader:
        repairer = blob_repair_service(config, reactor, cluster, meta, blobs, io_pool)
        if repairer is not None:
            children.append(repairer)
    return children


def start_cluster(config: Config, reactor: Any, node_id: str, cluster: ClusterParts,
                  io_pool: Runner, blobs: BlobStore, changes: ChangeHook,
                  role: WorkerRole = SINGLE_PROCESS, *,
                  leadership: WorkerLeadership | None = None,
                  meta: MetaStore, locks: KeyLocks) -> service.MultiService:
    """The client, the fan-out on the change hook (every committed local change goes to
    the eligible peers; a quorum shortfall is the client's 503) and the membership's
    service (returned: a child service started before the listener): the prober in
    worker 0 (publishing its view for the other workers when there are several; it asks
    `leadership` after each tick), the mirror of that view in every other worker.
    Anti-entropy runs in worker 0 (a child of the prober; its state published for the
    other workers, which mirror it): `cluster.status` reads its syncing and sync objects."""
    client = connect_cluster(config, reactor, node_id, cluster, io_pool, blobs, changes)
    if not role.leader:
        assert role.runtime_dir is not None
        return worker_mirror(config, reactor, cluster, io_pool, role.runtime_dir)
    warn_unbound_certificate(config, node_id)  # once per node: worker 0
    prober = membership_prober(config, reactor, node_id, cluster, client, io_pool,
                               leadership=leadership, runtime_dir=role.runtime_dir)
    attach_anti_entropy(config, reactor, cluster, client, prober, meta=meta, blobs=blobs,
                        io_pool=io_pool, locks=locks, changes=changes,
                        runtime_dir=role.runtime_dir)
    return prober


def connect_cluster(config: Config, reactor: Any, node_id: str, cluster: ClusterParts,
                    io_pool: Runner, blobs: BlobStore, changes: ChangeHook) -> ClusterClient:
    """The process's cluster client, the fan-out added to the change hook, and the client
    given to the blob repair and the control reconciler (until then they ask no peer)."""
    client = ClusterClient(cluster=config.cluster, node_id=node_id,
                           http=build_http_client(reactor, config.cluster), clock=reactor)
    cluster.client = client
    cluster.fanout = FanOut(cluster=config.cluster, membership=cluster.membership,
                            sender=ClientSender(client, io_pool),
                            blobs=StoredBlobs(blobs, io_pool), clock=reactor)
    changes.add(cluster.fanout)
    if cluster.repair is not None:  # blob repair fetches through the same client
        cluster.repair.attach(client)
    if cluster.control is not None:  # control-plane pulls go through it too
        cluster.control.client = client
    return client


def worker_mirror(config: Config, reactor: Any, cluster: ClusterParts, io_pool: Runner,
                  runtime_dir: str) -> MembershipMirror:
    """In a worker other than 0: the mirror of worker 0's membership view, with the
    mirror of its anti-entropy state as a child (`cluster.status` reads that one)."""
    mirror = MembershipMirror(cluster.membership, view_path(runtime_dir),
                              cluster=config.cluster, clock=reactor, runner=io_pool)
    sync = SyncMirror(cluster.membership, sync_path(runtime_dir),
                      cluster=config.cluster, clock=reactor, runner=io_pool)
    sync.setServiceParent(mirror)
    cluster.status.is_syncing, cluster.status.peer_sync = sync.is_syncing, sync.peer_sync
    return mirror


def warn_unbound_certificate(config: Config, node_id: str) -> None:
    """A start-up warning when [cluster.tls]'s node certificate does not name this node;
    a note when the listener's certificate is not the cluster CA's (a public one)."""
    if config.cluster.tls is None:
        return
    unbound = unbound_node_certificate(config.cluster.tls, node_id)
    if unbound is not None:
        log.warn("{problem}", problem=unbound)
    if config.server.tls is not None:
        note = listener_outside_cluster_ca(config.server.tls, config.cluster.tls)
        if note is not None:
            log.info("{note}", note=note)


def membership_prober(config: Config, reactor: Any, node_id: str, cluster: ClusterParts,
                      client: ClusterClient, io_pool: Runner, *,
                      leadership: WorkerLeadership | None,
                      runtime_dir: str | None) -> ClusterProber:
    """Worker 0's prober of the peers (found as [cluster] discovery says), asking
    `leadership` after each tick, recording its pruned peers in the data directory; with
    several workers its view is published for them."""
    discovery = discovery_for(config.cluster, SystemResolver(io_pool),
                              mdns=lambda: MdnsDiscovery.for_node(config, node_id, reactor),
                              listener_tls=config.server.tls is not None)
    prober = ClusterProber(membership=cluster.membership, discovery=discovery,
                           probe=client.ping, cluster=config.cluster, clock=reactor,
                           after_tick=leadership.after_tick if leadership is not None else None)
    # The pruned peers survive a restart (a record in the data directory).
    PrunedPeersRecorder(cluster.membership, pruned_path(config.storage.data_dir),
                        cluster=config.cluster, clock=reactor,
                        runner=io_pool).setServiceParent(prober)
    if runtime_dir is not None:
        MembershipPublisher(cluster.membership, view_path(runtime_dir),
                            cluster=config.cluster, clock=reactor,
                            runner=io_pool).setServiceParent(prober)
    return prober


def attach_anti_entropy(config: Config, reactor: Any, cluster: ClusterParts,
                        client: ClusterClient, prober: ClusterProber, *, meta: MetaStore,
                        blobs: BlobStore, io_pool: Runner, locks: KeyLocks,
                        changes: ChangeHook, runtime_dir: str | None) -> AntiEntropy:
    """Worker 0's anti-entropy, a child of the prober (a pruned peer's state goes with
    it), applying through a `ReplicationApply` of its own (same key locks and change
    hook); with several workers its state is published for them."""
    apply = ReplicationApply(meta, blobs, io_pool, clock=reactor.seconds, locks=locks,
                             changes=changes,
                             tombstone_grace_seconds=config.cluster.tombstone_grace_total_seconds,
                             max_clock_ahead_seconds=config.cluster.max_clock_ahead_seconds,
                             future=cluster.future_stamps)
    # Per eligible peer each tick: object rows, then its control plane (rule 6).
    steps = [cluster.control.reconcile_control] if cluster.control is not None else []
    ae = cluster.anti_entropy = AntiEntropy(
        membership=cluster.membership, meta=meta, client=client, apply=apply, blobs=blobs,
        io=io_pool, cluster=config.cluster, clock=reactor, steps=steps)
    ae.setServiceParent(prober)
    prober.prune_listeners.append(ae.peer_pruned)
    if runtime_dir is not None:
        SyncPublisher(ae.state, sync_path(runtime_dir), cluster=config.cluster,
                      clock=reactor, runner=io_pool).setServiceParent(prober)
    cluster.status.is_syncing, cluster.status.peer_sync = ae.is_syncing, ae.peer_sync
    return ae


# -- the node's other cluster services and views -----------------------------------------


def tombstone_purge(config: Config, reactor: Any, meta: MetaStore,
                    cluster: ClusterParts | None) -> TombstonePurge:
    """The node's tombstone purge (cluster/tombstone_purge.py): rule 7 over the live
    membership on a cluster node (worker 0 holds the prober's own), never blocked alone."""
    membership = cluster.membership if cluster is not None else None
    return TombstonePurge(
        rows=meta, grace_seconds=config.cluster.tombstone_grace_total_seconds, clock=reactor,
        blocked=lambda now: purge_blocked(membership, config.cluster, now=now),
        unseen=lambda now: unseen_peers(membership, config.cluster, now=now))


def worker_leadership(node_id: str, cluster: ClusterParts, singletons: LeaderDuties,
                      role: WorkerRole) -> WorkerLeadership | None:
    """The worker leader's rule over `singletons`, in worker 0 only (the others never
    hold the role)."""
    if not role.leader:
        return None
    return WorkerLeadership(self_id=node_id, named=cluster.membership.worker_leader,
                            role=singletons)


def blob_repair_service(config: Config, reactor: Any, cluster: ClusterParts,
                        meta: MetaStore, blobs: BlobStore,
                        io_pool: Runner) -> BlobRepairService | None:
    """The proactive blob repair pass (cluster/blob_repair.py), one tick per
    anti_entropy_interval_seconds, its cursor in the data directory."""
    if cluster.repair is None:
        return None
    return BlobRepairService(
        repair=cluster.repair, peers=cluster.membership, rows=meta, blobs=blobs, io=io_pool,
        budget=config.cluster.blob_repair_budget,
        interval_seconds=config.cluster.anti_entropy_interval_seconds, clock=reactor,
        cursor_path=os.path.join(config.storage.data_dir, CURSOR_FILE))


def add_cluster_collectors(metrics: NodeMetrics, cluster: ClusterParts,
                           role: WorkerRole) -> None:
    """The cluster's metrics: peers, gate, fan-out, repair and sync; the control
    reconciler's and the uploads through peers' figures."""
    metrics.add(ClusterCollector(
        peers=lambda: cluster.membership.peers.values(), gate=cluster.gate.figures,
        fanout=cluster.fanout.stats if cluster.fanout is not None else None,
        repair=cluster.repair.stats if cluster.repair is not None else None,
        node_gauges=role.leader,  # gauges are summed over workers: the prober's only
        sync=cluster.anti_entropy.figures if cluster.anti_entropy is not None else None,
        future=cluster.future_stamps))
    if cluster.control is not None:
        metrics.add(ControlCollector(cluster.control.stats))
    if cluster.uploads is not None:
        metrics.add(UploadPeersCollector(cluster.uploads.stats))


def cluster_document(config: Config, node_id: str, cluster: ClusterParts | None,
                     clock: Callable[[], float]) -> Callable[[], dict[str, Any]]:
    """What GET /admin/cluster answers: the live view, or this node alone."""
    if cluster is not None:
        return cluster.status.snapshot
    return lambda: single_node_view(config.cluster, node_id, now=clock())


def cluster_api(config: Config, node_id: str, health: HealthState, meta: MetaStore,
                io_pool: Runner, clock: Callable[[], float], *, blobs: BlobStore,
                locks: KeyLocks, changes: ChangeHook,
                views: NodeViews | None = None, control: ControlReconciler | None = None,
                future: FutureStamps | None = None) -> Any | None:
    """The /cluster/v1 resource when [cluster] enabled; None keeps the root's JSON 404.
    Replicated rows and blobs are applied through a `ReplicationApply` sharing the node's
    key locks and change hook (whose sinks ignore Origin.PEER); `views` answers the
    peers' per-node view queries; `future` counts the changes refused for a stamp too far
    ahead."""
    if not config.cluster.enabled:
        return None
    data_dir = config.storage.data_dir

    async def figures() -> NodeFigures:
        usage = await io_pool.run(shutil.disk_usage, data_dir)
        return NodeFigures(usage.total, usage.free, await meta.max_seq())

    apply = ReplicationApply(meta, blobs, io_pool, clock=clock, locks=locks, changes=changes,
                             tombstone_grace_seconds=config.cluster.tombstone_grace_total_seconds,
                             max_clock_ahead_seconds=config.cluster.max_clock_ahead_seconds,
                             future=future)
    routes = (ControlRoutes(reconciler=control, apply=apply)
              if control is not None else None)
    return ClusterApi(cluster=config.cluster, node_id=node_id, health=health,
                      figures=figures, clock=clock, apply=apply, io=io_pool,
                      node_views=views, control=routes,
                      manifest=meta.changed_since).resource()


def node_view_sources(meta: MetaStore) -> dict[str, LocalView]:
    """This node's answer to each per-node view family (cluster/node_views.py FAMILIES)."""
    return {
        AUDIT_VIEW.name: lambda params: audit_page(meta, params),
        METRICS_HISTORY_VIEW.name: lambda params: history_page(meta, params),
        NOTIFICATION_EVENTS.name: lambda params: events_page(meta, params),
        REPLICATION_JOURNAL.name: lambda params: journal_page(meta, params),
    }
