"""Scrape-time collectors: figures already held in memory, turned into metric families when
Prometheus scrapes. None of them queries the database or touches a file.

* `StorageCollector`: buckets, object versions and stored bytes, in total and for the
  largest buckets, from the snapshot a timer refreshes (`metrics.storage`).
* `PoolCollector`: busy and queued work of the DB writer/reader pools and the IO pool.
* `AuditCollector`: depth, capacity, drops and failed writes of the audit queue.
* `OutboxCollector`: the durable outbox's backlog (entries some consumer has not passed)
  and the entries delivered (engine/outbox.py).
* `NotificationCollector`: per notification target, the deliveries made, failed for good
  and retried, the queue depth and the age of the oldest undelivered event
  (notify/delivery.py).
* `ClusterCollector`: each known peer (alive, authenticated, eligible, pruned, clock
  offset, consecutive probe failures; from the Membership view), the write gate (state, eligible
  nodes, write quorum, refusals by reason) and the fan-out's counts (writes, full acks,
  missed acks, quorum shortfalls, blob failures, best-effort ops) and anti-entropy's per
  peer (lag, skipped manifest entries). Probe latency is not measured yet (the prober
  keeps no timing beyond the clock offset).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from objstore.metrics.storage import StorageFigures

PoolStats = Callable[[], Mapping[str, int]]


class StorageCollector(Collector):
    """`per_bucket` false ([metrics] bucket_labels = false) leaves out the families labelled
    by bucket name."""

    def __init__(self, figures: Callable[[], StorageFigures | None], *,
                 per_bucket: bool = True) -> None:
        self._figures = figures
        self._per_bucket = per_bucket

    def collect(self) -> Iterator[Metric]:
        figures = self._figures()
        if figures is None:  # not measured yet
            return
        yield _gauge("objstore_buckets", "Buckets.", figures.buckets)
        yield _gauge("objstore_objects",
                     "Object versions stored (delete markers not counted).", figures.objects)
        yield _gauge("objstore_stored_bytes", "Bytes of all object versions stored.",
                     figures.stored_bytes)
        yield _gauge("objstore_storage_snapshot_timestamp_seconds",
                     "When the storage figures were measured (Unix time).", figures.taken_at)
        if not self._per_bucket:
            return
        objects = GaugeMetricFamily(
            "objstore_bucket_objects",
            "Object versions stored per bucket (the largest buckets only).", labels=["bucket"])
        stored = GaugeMetricFamily(
            "objstore_bucket_stored_bytes",
            "Bytes stored per bucket (the largest buckets only).", labels=["bucket"])
        for usage in figures.per_bucket:
            objects.add_metric([usage.bucket], usage.objects)
            stored.add_metric([usage.bucket], usage.stored_bytes)
        yield objects
        yield stored


class PoolCollector(Collector):
    """`pools` maps a pool name to its `stats()`. DB pools report write_*/read_* keys
    (threads, busy, queued), the IO pool max/workers/queued."""

    def __init__(self, pools: Mapping[str, PoolStats]) -> None:
        self._pools = pools

    def collect(self) -> Iterator[Metric]:
        threads = GaugeMetricFamily("objstore_pool_threads", "Threads a pool may run.",
                                    labels=["pool"])
        busy = GaugeMetricFamily("objstore_pool_busy_threads", "Threads of a pool at work.",
                                 labels=["pool"])
        queued = GaugeMetricFamily("objstore_pool_queued_tasks",
                                   "Tasks waiting for a thread of a pool.", labels=["pool"])
        for name, stats in self._pools.items():
            for pool, figures in _pool_figures(name, stats()):
                threads.add_metric([pool], figures[0])
                busy.add_metric([pool], figures[1])
                queued.add_metric([pool], figures[2])
        yield threads
        yield busy
        yield queued


def _pool_figures(name: str, stats: Mapping[str, int]) -> list[tuple[str, tuple[int, ...]]]:
    keys = ("threads", "busy", "queued")
    if "threads" in stats:  # one NamedPool
        return [(name, tuple(stats.get(key, 0) for key in keys))]
    return [
        (f"{name}-{side}", tuple(stats.get(f"{side}_{key}", 0) for key in keys))
        for side in ("write", "read")
    ]


class AuditQueueFigures(Protocol):
    """What the collector reads of the audit queue (`audit.queue.BoundedQueue`)."""

    capacity: int
    dropped: int


class AuditFigures(Protocol):
    """What the collector reads of the audit log (`audit.log.AuditLog`); metrics never
    import the audit package."""

    @property
    def depth(self) -> int: ...

    @property
    def queue(self) -> AuditQueueFigures: ...

    failed_writes: int


class OutboxFigures(Protocol):
    backlog: int
    delivered: int


class OutboxCollector(Collector):
    def __init__(self, outbox: OutboxFigures) -> None:
        self._outbox = outbox

    def collect(self) -> Iterator[Metric]:
        yield _gauge("objstore_outbox_backlog",
                     "Outbox entries some registered consumer has not acknowledged yet.",
                     self._outbox.backlog)
        delivered = CounterMetricFamily("objstore_outbox_delivered",
                                        "Outbox entries acknowledged by their consumers.")
        delivered.add_metric([], self._outbox.delivered)
        yield delivered


class NotificationQueueFigures(Protocol):
    @property
    def depth(self) -> Mapping[str, int]: ...

    @property
    def oldest(self) -> Mapping[str, float]: ...


class NotificationFigures(Protocol):
    @property
    def delivered(self) -> Mapping[str, int]: ...

    @property
    def failed(self) -> Mapping[str, int]: ...

    @property
    def retried(self) -> Mapping[str, int]: ...

    @property
    def figures(self) -> NotificationQueueFigures: ...

    @property
    def target_names(self) -> list[str]: ...


class NotificationCollector(Collector):
    def __init__(self, delivery: NotificationFigures, clock: Callable[[], float]) -> None:
        self._delivery = delivery
        self._clock = clock

    def collect(self) -> Iterator[Metric]:
        d = self._delivery
        queue = d.figures
        names = sorted({*d.target_names, *d.delivered, *d.failed, *d.retried, *queue.depth})
        now = self._clock()
        for metric, help_text, values in (
            ("objstore_notifications_delivered", "Events a notification target accepted.",
             d.delivered),
            ("objstore_notifications_failed",
             "Events given up on after [notifications] max_retries retries.", d.failed),
            ("objstore_notifications_retried", "Failed delivery attempts retried later.",
             d.retried),
        ):
            counter = CounterMetricFamily(metric, help_text, labels=["target"])
            for name in names:
                counter.add_metric([name], values.get(name, 0))
            yield counter
        depth = GaugeMetricFamily("objstore_notifications_queue_depth",
                                  "Events waiting for delivery.", labels=["target"])
        age = GaugeMetricFamily("objstore_notifications_oldest_pending_age_seconds",
                                "Age of the oldest event waiting for delivery (0: none).",
                                labels=["target"])
        for name in names:
            depth.add_metric([name], queue.depth.get(name, 0))
            oldest = queue.oldest.get(name)
            age.add_metric([name], 0.0 if oldest is None else max(0.0, now - oldest))
        yield depth
        yield age


class AuditCollector(Collector):
    def __init__(self, audit: AuditFigures) -> None:
        self._audit = audit

    def collect(self) -> Iterator[Metric]:
        audit = self._audit
        yield _gauge("objstore_audit_queue_depth", "Audit records waiting to be written.",
                     audit.depth)
        yield _gauge("objstore_audit_queue_capacity", "Audit records the queue holds at most.",
                     audit.queue.capacity)
        dropped = CounterMetricFamily(
            "objstore_audit_dropped_records",
            "Audit records lost: queue full (oldest dropped) or a batch that kept failing.")
        dropped.add_metric([], audit.queue.dropped)
        yield dropped
        failed = CounterMetricFamily("objstore_audit_failed_writes",
                                     "Attempts to write a batch of audit records that failed.")
        failed.add_metric([], audit.failed_writes)
        yield failed


class PeerFigures(Protocol):
    """What the collector reads of a peer (`cluster.membership.PeerState`)."""

    @property
    def address(self) -> str: ...

    @property
    def node_id(self) -> str | None: ...

    @property
    def alive(self) -> bool: ...

    @property
    def authenticated(self) -> bool: ...

    @property
    def config_ok(self) -> bool | None: ...

    @property
    def consecutive_failures(self) -> int: ...

    @property
    def clock_offset_seconds(self) -> float | None: ...

    @property
    def probe_latency_seconds(self) -> float | None: ...

    @property
    def pruned(self) -> bool: ...


class FanOutFigures(Protocol):
    """`cluster.fanout.FanOutStats`."""

    writes: int
    acks: int
    missed_acks: int
    shortfalls: int
    blob_failures: int
    ops_sent: int
    ops_failed: int


class FutureStampFigures(Protocol):
    """`engine.replication_apply.FutureStamps`."""

    refused: int


class BlobRepairFigures(Protocol):
    """`cluster.blob_repair.BlobRepairStats`."""

    repaired: int
    failed: int
    missing_found: int
    corrupt_found: int
    fetches: int
    rejected: int
    unavailable: int
    deferred: int


@dataclass(frozen=True)
class GateFigures:
    state: str  # open | closed | size_exceeded | upgrade_pending
    eligible_nodes: int
    write_quorum: int
    refusals: Mapping[str, int]  # reason -> writes refused


GATE_STATES = ("open", "closed", "size_exceeded", "upgrade_pending")


class PeerSyncFigures(Protocol):
    """`cluster.anti_entropy.PeerSyncFigures`: anti-entropy toward one peer."""

    @property
    def node_id(self) -> str: ...

    @property
    def lag(self) -> int | None: ...

    @property
    def skipped_entries(self) -> int: ...


class ClusterCollector(Collector):
    """Read at scrape time from the node's Membership, write gate and fan-out.

    With several workers every worker reads the same membership view, and multiprocess
    gauges are summed over the workers: only the worker that probes (`node_gauges`) shows
    the peer and gate gauges; every worker counts its own refusals and fan-out."""

    def __init__(self, *, peers: Callable[[], Iterable[PeerFigures]],
                 gate: Callable[[], GateFigures], fanout: FanOutFigures | None,
                 repair: BlobRepairFigures | None = None,
                 node_gauges: bool = True,
                 sync: Callable[[], Iterable[PeerSyncFigures]] | None = None,
                 future: FutureStampFigures | None = None) -> None:
        self._peers = peers
        self._future = future
        self._gate = gate
        self._fanout = fanout
        self._repair = repair
        self._node_gauges = node_gauges
        self._sync = sync

    def collect(self) -> Iterator[Metric]:
        if self._node_gauges:
            yield from self._peer_families()
        yield from self._gate_families()
        if self._fanout is not None:
            yield from self._fanout_families(self._fanout)
        if self._repair is not None:
            yield from _repair_families(self._repair)
        if self._sync is not None:
            yield from self._sync_families(self._sync())
        if self._future is not None:
            refused = CounterMetricFamily(
                "objstore_cluster_future_stamped_refused",
                "Replicated changes refused: stamped further ahead of this node's clock "
                "than max_clock_ahead_seconds.")
            refused.add_metric([], self._future.refused)
            yield refused

    def _sync_families(self, peers: Iterable[PeerSyncFigures]) -> Iterator[Metric]:
        lag = GaugeMetricFamily("objstore_cluster_peer_sync_lag",
                                "A peer's seqs beyond this node's anti-entropy cursor.",
                                labels=["node_id"])
        skipped = CounterMetricFamily(
            "objstore_cluster_peer_sync_skipped_entries",
            "Manifest entries of a peer skipped after failing 5 passes in a row.",
            labels=["node_id"])
        for peer in peers:
            if peer.lag is not None:
                lag.add_metric([peer.node_id], float(peer.lag))
            skipped.add_metric([peer.node_id], peer.skipped_entries)
        yield lag
        yield skipped

    def _peer_families(self) -> Iterator[Metric]:
        labels = ["peer", "node_id"]
        families = {
            "alive": GaugeMetricFamily("objstore_cluster_peer_alive",
                                       "1 while a known peer answers probes.", labels=labels),
            "authenticated": GaugeMetricFamily(
                "objstore_cluster_peer_authenticated",
                "1 while a peer's last probe proved the cluster secret.", labels=labels),
            "eligible": GaugeMetricFamily(
                "objstore_cluster_peer_eligible",
                "1 while a peer is eligible (authenticated and config_ok): it receives "
                "fan-out and counts toward quorum.", labels=labels),
            "failures": GaugeMetricFamily(
                "objstore_cluster_peer_consecutive_failures",
                "Probes of a peer that failed in a row.", labels=labels),
            "pruned": GaugeMetricFamily(
                "objstore_cluster_peer_pruned",
                "1 while a peer is pruned (no authenticated answer for peer_prune_days): "
                "not eligible, not blocking the tombstone purge.", labels=labels),
        }
        offset = GaugeMetricFamily("objstore_cluster_peer_clock_offset_seconds",
                                   "A peer's clock minus this node's, from its last ping.",
                                   labels=labels)
        latency = GaugeMetricFamily("objstore_cluster_peer_probe_latency_seconds",
                                    "The round trip of the last answered probe of a peer.",
                                    labels=labels)
        for peer in self._peers():
            names = [peer.address, peer.node_id or ""]
            eligible = peer.authenticated and peer.config_ok is True and not peer.pruned
            for key, value in (("alive", peer.alive), ("authenticated", peer.authenticated),
                               ("eligible", eligible),
                               ("failures", peer.consecutive_failures),
                               ("pruned", peer.pruned)):
                families[key].add_metric(names, float(value))
            if peer.clock_offset_seconds is not None:
                offset.add_metric(names, peer.clock_offset_seconds)
            if peer.probe_latency_seconds is not None:
                latency.add_metric(names, peer.probe_latency_seconds)
        yield from families.values()
        yield offset
        yield latency

    def _gate_families(self) -> Iterator[Metric]:
        gate = self._gate()
        if self._node_gauges:
            state = GaugeMetricFamily("objstore_cluster_gate_state",
                                      "1 for the write gate's current state.",
                                      labels=["state"])
            for name in GATE_STATES:
                state.add_metric([name], float(name == gate.state))
            yield state
            yield _gauge("objstore_cluster_eligible_nodes",
                         "Eligible nodes, this one included.", gate.eligible_nodes)
            yield _gauge("objstore_cluster_write_quorum", "Nodes a quorum write needs.",
                         gate.write_quorum)
        refusals = CounterMetricFamily("objstore_cluster_write_refusals",
                                       "Writes refused before the local write, by reason.",
                                       labels=["reason"])
        for reason, count in sorted(gate.refusals.items()):
            refusals.add_metric([reason], count)
        yield refusals

    def _fanout_families(self, stats: FanOutFigures) -> Iterator[Metric]:
        for name, documentation, value in (
            ("writes", "Object writes fanned out to the eligible peers.", stats.writes),
            ("acks", "Full acknowledgements (applied and has_blob) from peers.", stats.acks),
            ("missed_acks", "Peer exchanges of a write that gave no full acknowledgement.",
             stats.missed_acks),
            ("shortfalls", "Writes below write_quorum after fan-out (503 in quorum mode).",
             stats.shortfalls),
            ("blob_failures", "Blobs a peer did not take.", stats.blob_failures),
        ):
            family = CounterMetricFamily(f"objstore_cluster_fanout_{name}", documentation)
            family.add_metric([], value)
            yield family
        ops = CounterMetricFamily("objstore_cluster_fanout_ops",
                                  "Best-effort control-plane ops sent, by result.",
                                  labels=["result"])
        ops.add_metric(["accepted"], stats.ops_sent)
        ops.add_metric(["failed"], stats.ops_failed)
        yield ops


def _repair_families(stats: BlobRepairFigures) -> Iterator[Metric]:
    repairs = CounterMetricFamily("objstore_cluster_blob_repairs",
                                  "Blobs fetched from peers (on read and by the proactive "
                                  "pass), by result.", labels=["result"])
    repairs.add_metric(["repaired"], stats.repaired)
    repairs.add_metric(["failed"], stats.failed)
    yield repairs
    found = CounterMetricFamily("objstore_cluster_blob_repair_found",
                                "Local blobs found missing or corrupt (size or MD5).",
                                labels=["state"])
    found.add_metric(["missing"], stats.missing_found)
    found.add_metric(["corrupt"], stats.corrupt_found)
    yield found
    for name, documentation, value in (
        ("fetches", "Peer requests made for blob repair.", stats.fetches),
        ("rejected", "Peer answers refused because they did not match the row.",
         stats.rejected),
        ("deferred", "Proactive checks put off because no peer gave that blob lately "
         "(asked again with a growing delay).", stats.deferred),
    ):
        family = CounterMetricFamily(f"objstore_cluster_blob_repair_{name}", documentation)
        family.add_metric([], value)
        yield family
    yield _gauge("objstore_cluster_blob_repair_unavailable",
                 "Blobs no eligible peer gave at the last try, remembered for a later "
                 "retry (their failure is logged once).", stats.unavailable)


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)
