"""The composition root: builds every object of a node and the Twisted service tree.

This is the only module that names concrete classes together, with cluster/wiring.py for
a cluster node's parts (built and started from here). Start-up order is database
(migrated synchronously before the reactor serves anything) -> stores -> thread pools ->
listener; shut-down is the reverse, beginning with the drain.
"""

from __future__ import annotations

import dataclasses
import datetime
import faulthandler
import gc
import os
import socket
import sys
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from twisted.application import service
from twisted.internet import defer, error, ssl, task
from twisted.logger import Logger
from twisted.protocols.tls import TLSMemoryBIOFactory

from objstore import __version__
from objstore.admin.anonymous_routes import AccessBucketRoutes
from objstore.admin.api import AdminApi, server_info
from objstore.admin.archive_routes import FAMILIES as ARCHIVE_FAMILIES
from objstore.admin.archive_routes import ArchiveRoutes
from objstore.admin.audit_routes import FAMILIES as AUDIT_FAMILIES
from objstore.admin.audit_routes import AuditRoutes
from objstore.admin.cluster_routes import FAMILIES as CLUSTER_FAMILIES
from objstore.admin.cluster_routes import ClusterRoutes
from objstore.admin.iam_routes import FAMILIES as IAM_FAMILIES
from objstore.admin.iam_routes import IamRoutes
from objstore.admin.jobs_routes import FAMILIES as JOB_FAMILIES
from objstore.admin.jobs_routes import JobRoutes
from objstore.admin.metrics_routes import FAMILIES as METRICS_FAMILIES
from objstore.admin.metrics_routes import MetricsRoutes, read_bearer_token
from objstore.admin.notification_routes import FAMILIES as NOTIFICATION_FAMILIES
from objstore.admin.notification_routes import NotificationRoutes
from objstore.admin.ops_routes import FAMILIES as OPS_FAMILIES
from objstore.admin.ops_routes import OpsRoutes
from objstore.admin.quota_routes import FAMILIES as QUOTA_FAMILIES
from objstore.admin.replication_routes import FAMILIES as REPLICATION_FAMILIES
from objstore.admin.replication_routes import ReplicationRoutes
from objstore.admin.settings_routes import FAMILIES as SETTINGS_FAMILIES
from objstore.admin.settings_routes import SettingsRoutes
from objstore.admin.transfer_routes import FAMILIES as TRANSFER_FAMILIES
from objstore.admin.transfer_routes import TransferRoutes
from objstore.audit.access_log import AccessLog
from objstore.audit.changes import AuditChangeSink
from objstore.audit.log import PURGE_INTERVAL_SECONDS, AuditLog, AuditSink
from objstore.audit.requests import RequestRecorder
from objstore.audit.strict import StrictAudit
from objstore.blobs.control import ControlRecord
from objstore.blobs.factory import BlobStages
from objstore.blobs.space import REFRESH_SECONDS, DatabaseReserve, SpaceGuard
from objstore.clock_offset import shift_reactor
from objstore.cluster.control_reconcile import ControlListeners
from objstore.cluster.node_views import NodeViews
from objstore.cluster.tombstone_purge_metrics import TombstonePurgeCollector
from objstore.cluster.wiring import (
    add_cluster_collectors,
    add_control_reconciler,
    cluster_api,
    cluster_document,
    cluster_parts,
    cluster_services,
    node_view_sources,
    peer_seams,
    tombstone_purge,
)
from objstore.config import Config
from objstore.console.resource import ConsoleResource
from objstore.crypto.keyring import kms_endpoint
from objstore.engine.anonymous import AnonymousAccessService
from objstore.engine.archive import ArchiveService
from objstore.engine.bucket_config import BucketConfigService
from objstore.engine.buckets import BucketService
from objstore.engine.changes import ChangeHook
from objstore.engine.compression import CompressionService
from objstore.engine.iam import IamService
from objstore.engine.lifecycle import LifecycleService
from objstore.engine.multipart import MultipartService
from objstore.engine.objects import ObjectService
from objstore.engine.outbox import TICK_SECONDS, OutboxDelivery, env_consumers
from objstore.engine.outbox_interest import BucketInterest
from objstore.engine.quota import QuotaService
from objstore.engine.region import REGION_SETTING, RegionSetting
from objstore.engine.replicator import NO_GATE
from objstore.engine.settings import SettingsService
from objstore.engine.transfer import BucketDocuments, TransferService
from objstore.engine.transfer_import import ImportTargets
from objstore.engine.versioning import KeyLocks
from objstore.engine.versions import VersionService
from objstore.http import cors
from objstore.http.authn import Authenticator
from objstore.http.health import HealthState
from objstore.http.held_answer import HeldAnswerRequest
from objstore.http.ratelimit import RequestRateLimits
from objstore.http.root import RootResource
from objstore.http.shared_accept import accept_one_per_wakeup
from objstore.http.site import HASH_POOL_NAME, HASH_THREADS, ObjstoreSite
from objstore.http.tls_options import TlsSetupError, listener_options
from objstore.iam.authorizer import Authorizer
from objstore.iam.bootstrap import (
    BootstrapError,
    BootstrapResult,
)
from objstore.iam.bucket_access import BucketAccessLoader
from objstore.iam.identity import IdentityResolver
from objstore.iam.public_access import NO_BLOCK, PublicAccessBlock
from objstore.meta.async_store import MetaStore
from objstore.meta.bucket_cache import BucketCache, BucketConfigCache
from objstore.meta.coherence import (
    OBJECTS,
    SETTINGS,
    Counters,
    LocalCounters,
    SharedCounters,
)
from objstore.meta.driver_log import route_sqlalchemy_logs
from objstore.meta.object_cache import ObjectCache, objects_ttl_seconds
from objstore.meta.pool import DbPool
from objstore.meta.retry import RetryPolicy
from objstore.metrics.collectors import (
    AuditCollector,
    NotificationCollector,
    OutboxCollector,
    PoolCollector,
    PoolStats,
)
from objstore.metrics.history import MetricsHistory
from objstore.metrics.registry import NodeMetrics
from objstore.metrics.storage import StorageSnapshot
from objstore.notify.configs import NotificationConfigService
from objstore.notify.consumer import NotificationConsumer
from objstore.notify.delivery import TICK_SECONDS as NOTIFY_TICK_SECONDS
from objstore.notify.delivery import NotificationDelivery
from objstore.notify.rules import NOTIFICATION_CONFIG_KEY
from objstore.notify.settings import built_targets, target_settings
from objstore.notify.targets.base import Target
from objstore.notify.targets.webhook import KIND as WEBHOOK
from objstore.notify.targets.webhook import WebhookSettings, adhoc_settings, with_default_timeout
from objstore.ordered_service import OrderedMultiService
from objstore.prefork import (
    GENERATIONS_FILE,
    KEY_LOCKS_FILE,
    METRICS_DIR,
    SINGLE_PROCESS,
    WorkerRole,
)
from objstore.prefork.range_locks import RangeLocks
from objstore.replication.client import S3Client
from objstore.replication.existing import ExistingObjects
from objstore.replication.journal import JournalConsumer
from objstore.replication.metrics import ReplicationCollector
from objstore.replication.rules import REPLICATION_CONFIG_KEY
from objstore.replication.service import ReplicationConfigService
from objstore.replication.worker import Backoff, ReplicationWorker, WorkerStop
from objstore.roles import LeaderDuties
from objstore.s3.api import S3Api, S3Services
from objstore.startup import fail_startup
from objstore.storage_open import open_storage
from objstore.threads import NamedPool
from objstore.timers import safe_timer
from objstore.workers.jobs import JobWorker, MaintenanceWatch
from objstore.workers.lifecycle import (
    INTERVAL_SETTING,
    LifecycleSettings,
    LifecycleWorker,
)

log = Logger()
# A process still running this long after the wait for requests in flight (which follows
# the listener's close) writes every thread's stack to stderr, once (a shutdown that hangs
# says where it waits).
STOP_STACK_DUMP_SECONDS = 10.0


@dataclass
class Node:
    service: service.MultiService
    bootstrap: BootstrapResult | None  # None for a supervised worker
    listener: ListenerService
    leader_duties: LeaderDuties


def metrics_token(config: Config) -> bytes | None:
    """The token GET /admin/metrics requires ([metrics] bearer_token_file), read once at
    start; a start refused when the file holds none."""
    try:
        return read_bearer_token(config.metrics.bearer_token_file)
    except (ValueError, OSError) as exc:
        raise BootstrapError(str(exc)) from None


def with_key_ids(config: Config, stages: BlobStages) -> Config:
    """`config` whose [cluster] carries the ids of the node's master key versions (never a
    key): the cluster fingerprint covers them (cluster/auth.py)."""
    key_ids = tuple(getattr(stages.master_key, "key_ids", ()))
    if not key_ids:
        return config
    return dataclasses.replace(
        config, cluster=dataclasses.replace(config.cluster, encryption_key_ids=key_ids))


def settle_heap() -> None:
    """Once the node is built: move every object alive now (modules, routes, tables,
    compiled statements) out of the collector's generations (`gc.freeze`), and collect
    from then on. A full collection then walks only what requests allocate, instead of the
    whole start-up heap each time, which showed as tens of milliseconds at the p99 of small
    requests. The entry points (objstore/daemon.py, prefork/child.py) stop the collector
    before importing this module: the start-up heap only grows, so the collections its
    imports would trigger walk it again and again for nothing (~10 % of a start's CPU,
    which every daemon start pays; the test suite starts hundreds).

    No collection before the freeze (the gc module's documentation does the same for a
    heap frozen before fork()): one found ~2,200 cyclic leftovers of the imports among
    ~120,000 objects (a few hundred KiB, frozen with the rest for the process's life)
    and cost ~0.1 s of CPU per start, about an eighth of the node's imports."""
    gc.freeze()
    gc.enable()


def build_node(config: Config, reactor: Any = None, *,
               role: WorkerRole = SINGLE_PROCESS, listen_fd: int | None = None) -> Node:
    """One process of a node. A single-process node adopts `listen_fd` (the socket the
    daemon bound before preparing anything) or, without one, listens itself."""
    if reactor is None:
        from twisted.internet import reactor as default_reactor

        reactor = default_reactor
    shift_reactor(reactor)  # tests only: OBJSTORE_TEST_CLOCK_OFFSET_SECONDS
    route_sqlalchemy_logs()  # its pool's records: one line in our log, not stderr
    storage = config.storage
    opened = open_storage(config, prepare=not role.supervised)
    blobs, control, sync_store, node_id = (opened.blobs, opened.control, opened.sync_store,
                                           opened.node_id)
    config = with_key_ids(config, blobs.stages)
    counters = node_counters(role)
    db_pool = DbPool.for_backend(
        reactor, storage.metadata_backend, storage.db_pool_size, dispose=sync_store.close,
        group_commit=storage.group_commit,
    )
    clock = reactor.seconds
    bucket_cache = BucketCache(size=config.server.cache.size,
                               ttl_seconds=config.server.cache.ttl_seconds, clock=clock,
                               counters=counters)
    # Every object write bumps OBJECTS after its transaction, on its DB thread: that is what
    # keeps the object caches of all workers coherent (meta/object_cache.py).
    def objects_changed() -> None:
        counters.bump(OBJECTS)

    sync_store.objects_changed = objects_changed
    object_cache = ObjectCache(size=config.server.cache.objects,
                               ttl_seconds=objects_ttl_seconds(
                                   config.server.cache.objects_ttl_seconds,
                                   config.server.cache.ttl_seconds, storage.metadata_backend),
                               clock=clock, counters=counters)
    io_pool = NamedPool(reactor, "objstore-io", config.storage.io_threads)
    space = space_guard(config, io_pool, counters)
    cluster = cluster_parts(config, node_id, space, clock)
    write_gate = cluster.gate if cluster is not None else NO_GATE
    config_cache = BucketConfigCache(size=config.server.cache.size,
                                     ttl_seconds=config.server.cache.ttl_seconds, clock=clock,
                                     counters=counters)
    meta = MetaStore(sync_store, db_pool, bucket_cache=bucket_cache, object_cache=object_cache,
                     config_cache=config_cache,
                     retry=RetryPolicy(release_reserve=space.release_reserve))
    identities = IdentityResolver(
        meta, clock=clock, ttl_seconds=config.server.cache.ttl_seconds,
        max_entries=config.server.cache.size, counters=counters,
    )
    bucket_access = BucketAccessLoader(
        meta, clock=clock, ttl_seconds=config.server.cache.ttl_seconds,
        max_entries=config.server.cache.size, counters=counters,
        default_block=(PublicAccessBlock.all_on() if config.server.block_public_access
                       else NO_BLOCK),
    )
    authorizer = Authorizer(
        meta, clock=clock, ttl_seconds=config.server.cache.ttl_seconds,
        max_entries=config.server.cache.size, counters=counters, buckets=bucket_access,
    )
    # [server] region until the `region` setting says otherwise (read again on a change).
    region = RegionSetting(config.server.region, meta.get_setting)
    authenticator = Authenticator(
        identities,
        regions=region.accepted,
        now=lambda: datetime.datetime.fromtimestamp(clock(), datetime.UTC),
        signature_v2=config.server.signature_v2,
    )
    # Shared: deletes, lock/tag changes of a key and bucket-wide changes serialise.
    key_locks = KeyLocks(node_key_locks(role, reactor))
    # Every committed change passes this hook; its sinks are added below (the audit log).
    changes = ChangeHook()
    # Reads that find a blob missing and uploads made through other nodes ask the peers.
    blob_repair, upload_peers = peer_seams(config, reactor, cluster, meta=meta, blobs=blobs,
                                           io_pool=io_pool)
    # The durable outbox: the test-only file consumer (OBJSTORE_TEST_OUTBOX_FILE) takes
    # every bucket's changes; notifications and replication only those of buckets holding
    # their configuration document (other buckets' writes leave no entry).
    outbox = OutboxDelivery(meta, clock=reactor.seconds, max_backlog=config.outbox.max_backlog,
                            consumers=env_consumers(os.environ),
                            interest=BucketInterest(meta.cached_bucket_config, counters,
                                                    clock=clock))
    bucket_config = BucketConfigService(meta, control, io_pool, clock=clock, locks=key_locks,
                                        changes=changes)
    notifications = notification_parts(config, meta, bucket_config, node_id, reactor.seconds)
    outbox.register(notifications.consumer, documents=(NOTIFICATION_CONFIG_KEY,))
    # Bucket replication (replication/): the rules, the status new versions are born with,
    # and the journal's outbox consumer (the worker runs below, in the leading process).
    replication = ReplicationConfigService(meta, bucket_config, keeper=blobs.stages.master_key)
    if config.replication.enabled:
        outbox.register(JournalConsumer(meta, replication, clock=clock),
                        documents=(REPLICATION_CONFIG_KEY,))
    services = S3Services(
        buckets=BucketService(meta, control, io_pool, region=region.current, clock=clock,
                              changes=changes, restamp_on_repeat=config.cluster.enabled),
        objects=ObjectService(meta, blobs, io_pool, clock=clock, authority=authorizer,
                              locks=key_locks, changes=changes, gate=write_gate,
                              repair=blob_repair, outbox=outbox, replication=replication),
        multipart=MultipartService(meta, blobs, io_pool, clock=clock, changes=changes,
                                   gate=write_gate, repair=blob_repair, peers=upload_peers,
                                   outbox=outbox, replication=replication),
        authorizer=authorizer,
        bucket_config=bucket_config,
        versions=VersionService(meta, blobs, io_pool, clock=clock, locks=key_locks,
                                authority=authorizer, changes=changes, outbox=outbox),
        lifecycle=LifecycleService(
            meta, bucket_config, clock=clock, day_seconds=config.lifecycle.day_seconds,
            cache_ttl_seconds=config.server.cache.ttl_seconds,
            cache_size=config.server.cache.size, counters=counters,
        ),
        notifications=notifications.configs,
        replication=replication,
    )
    maintenance = MaintenanceWatch(meta, node_id)  # a maintenance-mode job drains the node
    health = HealthState(cluster=cluster.status if cluster is not None else None,
                         maintenance_job=maintenance)
    if cluster is not None:  # a peer's control plane merged here: the caches forget
        def iam_merged() -> None:
            identities.invalidate()
            authorizer.invalidate()

        add_control_reconciler(
            cluster, node_id=node_id, meta=meta, io_pool=io_pool, changes=changes,
            control=control, blobs=blobs,
            listeners=ControlListeners(iam=iam_merged, buckets=bucket_cache.invalidate))
    # One set of buckets for both APIs: a client's S3 and admin calls share its budget.
    rate_limits = node_rate_limits(config, role, clock)
    admin = AdminApi(
        health=health,
        authenticator=authenticator,
        info=server_info(role.node_started_at or time.time(),
                         tls=config.server.tls is not None, backend=storage.metadata_backend,
                         workers=config.server.workers if role.supervised else 1,
                         worker_index=role.index,
                         kms_provider=(config.encryption.kms_provider
                                       if blobs.stages.key_id is not None else None),
                         kms_endpoint=kms_endpoint(config),
                         replication=config.replication.enabled),
        rate_limits=rate_limits,
        authorizer=authorizer,
        space=space,
    )
    iam = mount_admin_apis(admin, config, meta, control, io_pool, identities, authorizer,
                           clock, changes)
    root = RootResource(
        s3=S3Api(services, authenticator, rate_limits, space, write_gate,
                 key_id=blobs.stages.key_id,
                 allow_ssec_over_http=config.encryption.allow_ssec_over_http).resource(),
        admin=admin.resource(),
        limits=config.server.limits,
        domains=config.server.domains,
        cors_rules=cors.node_rules(config.server.cors_allowed_origins),
        cluster=cluster_api(config, node_id, health, meta, io_pool, clock, blobs=blobs,
                            locks=key_locks, changes=changes,
                            control=cluster.control if cluster is not None else None,
                            future=cluster.future_stamps if cluster is not None else None,
                            views=NodeViews(node_id=node_id, local=node_view_sources(meta))),
        console=ConsoleResource(),
    )
    hash_pool = NamedPool(reactor, HASH_POOL_NAME, HASH_THREADS)  # large bodies' digests
    site = ObjstoreSite(
        root, tmp_dir=blobs.tmp_dir, limits=config.server.limits,
        server_header=config.server.server_header, hash_runner=hash_pool,
        sync_runner=io_pool if config.storage.fsync else None,
        blob_stages=blobs.stages,
        header_timeout_seconds=config.server.header_timeout_seconds,
        idle_timeout_seconds=config.server.idle_timeout_seconds,
    )
    observability = build_observability(config, reactor, meta, node_id,
                                        {"db": db_pool.stats, "io": io_pool.stats}, io_pool,
                                        role)
    site.observer = observability.recorder
    if config.audit.strict and config.audit.enabled:  # answers wait for their records
        site.requestFactory = HeldAnswerRequest
        site.answer_gate = StrictAudit(observability.recorder)
    site.sendfile = config.server.sendfile
    site.space = space
    changes.add(AuditChangeSink(observability.audit))
    # The cluster-wide singletons (lifecycle, maintenance jobs) run where the worker
    # leader's role is held: on a single node in worker 0, always; on a cluster node in
    # worker 0 of the worker leader only, taken and given up after each probe tick
    # (cluster/leadership.py).
    singletons = LeaderDuties(held=role.leader and cluster is None)
    cluster_children = [] if cluster is None else cluster_services(
        config, reactor, node_id, cluster, role=role, singletons=singletons, io_pool=io_pool,
        blobs=blobs, changes=changes, meta=meta, locks=key_locks)
    # GET /admin/audit and /admin/metrics/history: here, a peer's (node=<id>) or all (node=all).
    views = NodeViews(node_id=node_id, local=node_view_sources(meta),
                      membership=cluster.membership if cluster is not None else None,
                      client=cluster.client if cluster is not None else None)
    admin.mount(AUDIT_FAMILIES, AuditRoutes(gate=admin.authorize, meta=meta, node_id=node_id,
                                            views=views))
    admin.mount(METRICS_FAMILIES, MetricsRoutes(
        gate=admin.authorize, meta=meta, render=observability.metrics.scrape, node_id=node_id,
        views=views, bearer_token=metrics_token(config)))
    admin.mount(NOTIFICATION_FAMILIES, NotificationRoutes(
        gate=admin.authorize, meta=meta, node_id=node_id, views=views,
        target=notifications.delivery.target, webhook=notifications.webhook,
        clock=reactor.seconds))
    admin.mount(CLUSTER_FAMILIES, ClusterRoutes(
        gate=admin.authorize, view=cluster_document(config, node_id, cluster, clock)))
    if cluster is not None:
        add_cluster_collectors(observability.metrics, cluster, role)
    # The node's own singletons (audit purge, storage figures, metrics history) run in
    # worker 0 of every node, cluster or not; the cluster-wide ones (lifecycle) within them,
    # only while `singletons` is held. A setting changed through another worker reaches
    # worker 0 within a second.
    lifecycle = lifecycle_worker(config, reactor, meta, services, observability.audit)
    lifecycle.setServiceParent(singletons)
    JobWorker(store=meta, clock=reactor, node_id=node_id,
              services={"meta": meta, "blobs": blobs, "io": io_pool, "locks": key_locks,
                        "bucket_config": bucket_config, "sync_store": sync_store,
                        "storage": storage, "clustered": config.cluster.enabled,
                        "replication": replication}
              ).setServiceParent(singletons)
    admin.mount(JOB_FAMILIES, JobRoutes(gate=admin.authorize, jobs=meta,
                                        clustered=config.cluster.enabled))
    duties = LeaderDuties(held=role.leader)
    for work in (singletons, *observability.leader_work):
        work.setServiceParent(duties)
    # Tombstones past their grace go on every node (rule 7 on a cluster node).
    tombstone_gc = tombstone_purge(config, reactor, meta, cluster)
    tombstone_gc.setServiceParent(duties)
    if role.leader:
        observability.metrics.add(TombstonePurgeCollector(tombstone_gc.stats))
        observability.metrics.add(OutboxCollector(outbox))
        observability.metrics.add(NotificationCollector(notifications.delivery,
                                                        reactor.seconds))
    if config.replication.enabled:  # every node works through its own journal
        worker = replication_worker(config, reactor, meta, replication, services)
        safe_timer(config.replication.tick_seconds, worker.tick, clock=reactor,
                   what="replication worker").setServiceParent(duties)
        WorkerStop(worker).setServiceParent(duties)  # stops first: cancels the sends
        if role.leader:
            observability.metrics.add(ReplicationCollector(worker, clock))
    admin.mount(REPLICATION_FAMILIES, ReplicationRoutes(
        gate=admin.authorize, meta=meta, node_id=node_id, replication=replication,
        existing=ExistingObjects(meta, replication, clock=clock), views=views))
    if outbox.active:  # node-local: delivered by the node's leading process
        safe_timer(TICK_SECONDS, outbox.tick, clock=reactor,
                   what="outbox delivery").setServiceParent(duties)
    # Notification deliveries (node-local, spec cluster rule 11): the node's leading process.
    safe_timer(NOTIFY_TICK_SECONDS, notifications.delivery.tick, clock=reactor,
               what="notification delivery").setServiceParent(duties)
    if role.supervised:  # settings changed through the other workers
        safe_timer(1.0, counter_watch(counters, SETTINGS, lifecycle.interval_changed),
                   clock=reactor, what="settings watch").setServiceParent(duties)
    on_setting = settings_listener(lifecycle, duties, counters, region)
    settings = SettingsService(meta, control, io_pool, changes=changes, on_change=on_setting)
    replication.settings = settings  # credentials are a setting
    if cluster is not None and cluster.control is not None:
        cluster.control.listeners.setting = on_setting
    mount_settings_and_quotas(admin, services, meta, settings, bucket_access.default_block)
    mount_data_apis(admin, services, iam, meta, settings, io_pool, clock,
                    audit=observability.audit)
    top = OrderedMultiService()
    db_pool.setServiceParent(top)
    io_pool.setServiceParent(top)
    safe_timer(REFRESH_SECONDS, space.refresh, clock=reactor,
               what="free space check").setServiceParent(top)
    hash_pool.setServiceParent(top)
    safe_timer(1.0, maintenance.refresh, clock=reactor,
               what="maintenance job watch").setServiceParent(top)
    # Every process reads the region setting at start and when a worker announces a change.
    safe_timer(1.0, region_watch(counters, region), clock=reactor,
               what="region setting watch").setServiceParent(top)
    if outbox.active:  # every process counts the backlog its writes are bounded by
        safe_timer(1.0, outbox.refresh, clock=reactor,
                   what="outbox backlog").setServiceParent(top)
    observability.service.setServiceParent(top)  # stops after the drain: flushes the audit
    duties.setServiceParent(top)
    for child in cluster_children:  # peers are probed before this node serves
        child.setServiceParent(top)
    listener = ListenerService(reactor, config, site, health,
                               listen_fd=role.listen_fd if role.supervised else listen_fd,
                               shared=role.supervised)
    listener.setServiceParent(top)
    return Node(top, opened.bootstrap, listener, duties)


@dataclass(frozen=True)
class NotificationParts:
    configs: NotificationConfigService
    consumer: NotificationConsumer
    delivery: NotificationDelivery
    webhook: Callable[[WebhookSettings], Target]


def notification_parts(config: Config, meta: MetaStore, bucket_config: BucketConfigService,
                       node_id: str, clock: Callable[[], float]) -> NotificationParts:
    """Bucket notifications: the configuration service (S3 API), the outbox consumer that
    queues deliveries, and the delivery worker with the node's targets (built from
    `[notifications.targets.*]`, checked again here as at start)."""
    settings = config.notifications
    timeout = settings.webhook_timeout_seconds
    checked = [dataclasses.replace(c, settings=with_default_timeout(c.settings, timeout))
               for c in target_settings(settings)]

    def webhook(wanted: WebhookSettings) -> Target:
        return WEBHOOK.build(with_default_timeout(wanted, timeout))

    configs = NotificationConfigService(bucket_config, {c.name: c.kind for c in checked})
    delivery = NotificationDelivery(meta, built_targets(checked), settings=settings,
                                    clock=clock,
                                    adhoc=lambda url: webhook(adhoc_settings(url, timeout)),
                                    queued=lambda: consumer.queued)
    consumer = NotificationConsumer(meta, configs, region=config.server.region,
                                    node_id=node_id, clock=clock)
    return NotificationParts(configs, consumer, delivery, webhook)


def space_guard(config: Config, io_pool: NamedPool, counters: Counters) -> SpaceGuard:
    """The capacity guard, with its first sample taken now. The database's reserve lies
    beside a SQLite database (on the volume it fills); PostgreSQL keeps its data elsewhere."""
    storage = config.storage
    reserve = None
    if storage.metadata_backend == "sqlite" and storage.db_reserve_bytes > 0:
        assert storage.sqlite_path is not None
        reserve = DatabaseReserve(os.path.dirname(storage.sqlite_path), storage.db_reserve_bytes)
    guard = SpaceGuard(storage.data_dir, storage.min_free_bytes, reserve, runner=io_pool,
                       counters=counters)
    guard.update(guard.measure())
    return guard


def node_counters(role: WorkerRole) -> Counters:
    """The cache-coherence counters: in memory for one process, shared by the workers."""
    if role.runtime_dir is None:
        return LocalCounters()
    return SharedCounters(os.path.join(role.runtime_dir, GENERATIONS_FILE))


def node_rate_limits(config: Config, role: WorkerRole,
                     clock: Callable[[], float]) -> RequestRateLimits:
    """The rate limits are per node: in memory for one process, shared by the workers."""
    if role.runtime_dir is None:
        return RequestRateLimits.from_limits(config.server.limits, clock=clock)
    return RequestRateLimits.shared(config.server.limits, role.runtime_dir, clock=clock)


def node_key_locks(role: WorkerRole, reactor: Any) -> RangeLocks | None:
    """Cross-process key locks for the workers of a supervised node."""
    if role.runtime_dir is None:
        return None
    return RangeLocks(os.path.join(role.runtime_dir, KEY_LOCKS_FILE), reactor)


def mount_admin_apis(
    admin: AdminApi,
    config: Config,
    meta: MetaStore,
    control: ControlRecord,
    io_pool: NamedPool,
    identities: IdentityResolver,
    authorizer: Authorizer,
    clock: Callable[[], float],
    changes: ChangeHook,
) -> IamService:
    """The admin endpoint families that live in their own modules (IAM, stats, presign)."""

    def iam_changed() -> None:
        identities.invalidate()
        authorizer.invalidate()

    iam = IamService(meta, control, io_pool, clock=clock, on_change=iam_changed,
                     changes=changes)
    admin.mount(IAM_FAMILIES, IamRoutes(gate=admin.authorize, iam=iam, authorizer=authorizer))
    ops = OpsRoutes(gate=admin.authorize, meta=meta, io=io_pool,
                    data_dir=config.storage.data_dir, region=config.server.region, clock=clock)
    admin.mount(OPS_FAMILIES, ops)
    return iam


def mount_data_apis(
    admin: AdminApi,
    services: S3Services,
    iam: IamService,
    meta: MetaStore,
    settings: SettingsService,
    io_pool: NamedPool,
    clock: Callable[[], float],
    *,
    audit: AuditLog,
) -> None:
    """POST /admin/archive, GET /admin/export and POST /admin/import."""
    archives = ArchiveService(services.objects, io_pool)
    admin.mount(ARCHIVE_FAMILIES, ArchiveRoutes(
        gate=admin.authorize, archives=archives, authorizer=services.authorizer, audit=audit))
    targets = ImportTargets(
        meta=meta, iam=iam, buckets=services.buckets,
        bucket_state=BucketDocuments(services.bucket_config, services.lifecycle),
        settings=settings,
    )
    transfer = TransferService(targets, clock=clock, server_version=__version__)
    admin.mount(TRANSFER_FAMILIES, TransferRoutes(
        gate=admin.authorize, transfer=transfer, authorizer=services.authorizer, io=io_pool))


@dataclass
class Observability:
    audit: AuditLog
    metrics: NodeMetrics
    recorder: RequestRecorder
    service: service.MultiService  # audit log and metrics, in every process
    leader_work: list[Any]  # services: audit purge, storage figures, metrics history


def build_observability(
    config: Config, reactor: Any, meta: MetaStore, node_id: str, pools: dict[str, PoolStats],
    io_pool: NamedPool, role: WorkerRole = SINGLE_PROCESS,
) -> Observability:
    """The audit log, the node's metrics registry with its collectors, and the timers
    that feed them. The audit log starts first and stops last (its final flush). Every
    process records its own requests; the leader alone purges old audit rows, sums the
    storage figures and writes the metrics history. With several workers the metrics live
    in multiprocess files of the runtime directory, so any worker's scrape shows the whole
    node (objstore/metrics/multiprocess.py); the IO pool reads them."""
    audit = AuditLog(meta, node_id=node_id, clock=reactor, enabled=config.audit.enabled,
                     retention_days=config.audit.retention_days, purge=False)
    purge = safe_timer(PURGE_INTERVAL_SECONDS, audit.purge, clock=reactor, what="audit purge")
    metrics_dir = (os.path.join(role.runtime_dir, METRICS_DIR)
                   if role.runtime_dir is not None else None)
    metrics = NodeMetrics(node_id=node_id, version=__version__, multiprocess_dir=metrics_dir,
                          threads=io_pool, clock=reactor,
                          bucket_labels=config.metrics.bucket_labels)
    interval = config.metrics.history_interval_seconds
    storage = StorageSnapshot(meta, clock=reactor, interval_seconds=interval)
    history = MetricsHistory(
        meta, totals=metrics.read_totals, storage=lambda: storage.current,
        node_id=node_id, clock=reactor, interval_seconds=interval,
        retention_hours=config.metrics.history_retention_hours,
    )
    metrics.add_storage(storage)
    metrics.add(PoolCollector(pools))
    metrics.add(AuditCollector(audit))
    group = OrderedMultiService()
    access = (AccessLog(config.logging.access_log, config.logging.access_log_format,
                        run_in_thread=io_pool.run, clock=reactor)
              if config.logging.access_log else None)
    for child in (audit, metrics.service) if access is None else (audit, access,
                                                                    metrics.service):
        child.setServiceParent(group)
    recorder = RequestRecorder(audit=audit, metrics=metrics.requests, clock=reactor.seconds,
                               access=access)
    return Observability(audit, metrics, recorder, group, [purge, storage, history])


def lifecycle_worker(
    config: Config, reactor: Any, meta: MetaStore, services: S3Services, audit: AuditSink
) -> LifecycleWorker:
    settings = LifecycleSettings(interval_seconds=config.lifecycle.interval_seconds,
                                 day_seconds=config.lifecycle.day_seconds)
    return LifecycleWorker(reads=meta, configs=services.lifecycle, objects=services.objects,
                           uploads=services.multipart, audit=audit, settings=settings,
                           clock=reactor)


def settings_listener(lifecycle: LifecycleWorker, duties: LeaderDuties,
                      counters: Counters, region: RegionSetting | None = None
                      ) -> Callable[[str], None]:
    """What a changed setting means to the node's services (imports call it too). In a
    process not holding the leader's duties, the change is announced to the leader, whose
    `counter_watch` picks it up within a second. A region change is read again here and
    announced to every process (`region_watch`)."""

    def changed(key: str) -> None:
        if key == REGION_SETTING and region is not None:
            defer.Deferred.fromCoroutine(region.reload())
            counters.bump(SETTINGS)
            return
        if key != INTERVAL_SETTING:
            return
        if duties.held:
            lifecycle.interval_changed()
        else:
            counters.bump(SETTINGS)

    return changed


def region_watch(counters: Counters, region: RegionSetting
                 ) -> Callable[[], Coroutine[Any, Any, None]]:
    """A timer tick that reads the region setting at its first run and whenever the
    settings counter moved since the last one."""
    seen: list[int | None] = [None]

    async def tick() -> None:
        now = counters.read(SETTINGS)
        if now != seen[0]:
            seen[0] = now
            await region.reload()

    return tick


def counter_watch(counters: Counters, scope: str,
                  react: Callable[[], None]) -> Callable[[], Coroutine[Any, Any, None]]:
    """A timer tick that calls `react` when the scope's counter moved since the last tick."""
    seen = [counters.read(scope)]

    async def tick() -> None:
        now = counters.read(scope)
        if now != seen[0]:
            seen[0] = now
            react()

    return tick


def replication_worker(config: Config, reactor: Any, meta: MetaStore,
                       replication: ReplicationConfigService,
                       services: S3Services) -> ReplicationWorker:
    """The node's replication worker ([replication] settings)."""
    settings = config.replication
    client = S3Client(reactor, timeout_seconds=settings.timeout_seconds, now=time.time)
    return ReplicationWorker(
        meta, replication, services.objects, client, clock=reactor.seconds,
        retry=Backoff(settings.retry_base_seconds, settings.retry_max_seconds,
                          settings.max_attempts),
        concurrency=settings.concurrency,
        retention_seconds=settings.journal_retention_days * 86400.0)


def mount_settings_and_quotas(
    admin: AdminApi, services: S3Services, meta: MetaStore, settings: SettingsService,
    default_block: PublicAccessBlock = NO_BLOCK,
) -> None:
    """GET/PUT/DELETE /admin/settings/{key}, /admin/buckets/{bucket}/quota,
    /admin/buckets/{bucket}/compression and GET/PUT /admin/buckets/{bucket}/anonymous."""
    admin.mount(SETTINGS_FAMILIES, SettingsRoutes(gate=admin.authorize, settings=settings))
    quotas = QuotaService(meta, services.bucket_config)
    compression = CompressionService(meta, services.bucket_config)
    anonymous = AnonymousAccessService(services.bucket_config, default_block=default_block)
    admin.mount(QUOTA_FAMILIES, AccessBucketRoutes(gate=admin.authorize, quotas=quotas,
                                                   compression=compression,
                                                   anonymous=anonymous))


class ListenerService(service.Service):
    """Owns the listening port and the drain on SIGTERM/SIGINT."""

    def __init__(self, reactor: Any, config: Config, site: ObjstoreSite, health: HealthState,
                 *, listen_fd: int | None = None, shared: bool = False):
        self._reactor = reactor
        self._shared = shared  # the socket is adopted by the node's other workers too
        self._config = config
        self._site = site
        self._health = health
        self._listen_fd = listen_fd  # a socket bound before start-up (daemon or supervisor)
        self._port: Any = None
        self._skip_drain = False

    def privilegedStartService(self) -> None:  # noqa: N802
        server = self._config.server
        try:
            if self._listen_fd is not None:
                self._port = self._adopt(self._listen_fd)
            elif server.tls is None:
                self._port = self._reactor.listenTCP(server.port, self._site,
                                                     interface=server.host)
            else:
                self._port = self._reactor.listenSSL(
                    server.port, self._site, tls_options(self._config), interface=server.host
                )
        except error.CannotListenError as exc:
            raise fail_startup(
                f"cannot listen on {server.host}:{server.port}: {exc.socketError}"
            ) from None
        except ssl.SSL.Error as exc:
            raise fail_startup(f"[server.tls]: cannot load the certificate or key: {exc}") from None
        except TlsSetupError as exc:
            raise fail_startup(str(exc)) from None
        super().privilegedStartService()

    def _adopt(self, fd: int) -> Any:
        family = socket.fromfd(fd, socket.AF_INET, socket.SOCK_STREAM)
        try:
            address_family = family.family
        finally:
            family.close()  # a dup: closing it leaves `fd` open
        factory: Any = self._site
        if self._config.server.tls is not None:
            factory = TLSMemoryBIOFactory(tls_options(self._config), False, factory)
        port = self._reactor.adoptStreamPort(fd, address_family, factory)
        os.close(fd)  # the port holds its own duplicate (IReactorSocket.adoptStreamPort)
        if self._shared:
            accept_one_per_wakeup(port)  # a burst of connections spread over the workers
        return port

    def startService(self) -> None:  # noqa: N802
        if self._port is None:
            self.privilegedStartService()
        super().startService()
        address = self._port.getHost()
        scheme = "https" if self._config.server.tls else "http"
        log.info("objstore {version} listening on {scheme}://{host}:{port}",
                 version=__version__, scheme=scheme, host=address.host, port=address.port)

    def orphaned(self) -> None:
        """The supervisor is gone: free the port at once, so that a node restarted in the
        meantime can bind it, and skip the drain wait (stopService still lets the requests
        in flight finish)."""
        self._skip_drain = True
        self._health.draining = True
        if self._port is not None:
            port, self._port = self._port, None
            port.stopListening()

    @defer.inlineCallbacks
    def stopService(self) -> Any:  # noqa: N802
        super().stopService()
        drain = 0.0 if self._skip_drain else self._config.server.drain_timeout_seconds
        self._health.draining = True
        if drain > 0:
            log.info("draining for {seconds}s before stopping", seconds=drain)
            yield task.deferLater(self._reactor, drain, lambda: None)
        if self._port is not None:
            yield self._port.stopListening()
        in_flight_wait = max(drain, 5.0)
        dump_stacks_if_still_running(in_flight_wait + STOP_STACK_DUMP_SECONDS)
        waiting = self._site.wait_idle()
        waiting.addTimeout(in_flight_wait, self._reactor)
        try:
            yield waiting
        except defer.TimeoutError:
            log.warn("{n} requests still in flight at shutdown", n=self._site.in_flight)
        self._site.close_connections()


def dump_stacks_if_still_running(seconds: float) -> None:
    """Arm faulthandler to write every thread's stack to the process's stderr if the
    process has not exited `seconds` from now (it works while the reactor thread is
    blocked, e.g. joining a thread pool). Never cancelled: a process that exits in time
    takes the timer with it."""
    stream = sys.__stderr__
    if stream is None:
        return
    try:
        faulthandler.dump_traceback_later(seconds, file=stream)
    except (ValueError, OSError, AttributeError):  # no usable file descriptor
        log.debug("no stderr for a stack dump at shutdown")


def tls_options(config: Config) -> Any:
    """The listener's TLS options (http/tls_options.py: with [cluster.tls] a client
    certificate is asked for and verified against the cluster CA, not required)."""
    assert config.server.tls is not None
    return listener_options(config.server.tls, config.cluster.tls)
