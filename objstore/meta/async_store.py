"""`MetaStore`: the Deferred-returning metadata store the daemon uses.

A thin facade: each method is one line naming a query of `SyncMetaStore` (a family query
function) and the pool it runs on, reads on the reader pool and mutations on the writer
pool (`_on_reader` / `_on_writer`), each call wrapped in the transient-error retry of
`meta/retry.py`; its signature and docstring are the query's, less the store. Its own
logic is the caches it answers from: bucket records (`BucketCache`, invalidated around
every bucket write), the configuration documents object writes consult
(`BucketConfigCache`, invalidated around every configuration write) and, for GET and HEAD
only, object records (`ObjectCache`, kept coherent by the OBJECTS counter that every
seq-taking query bumps). It never runs SQL itself and never blocks the reactor.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

from twisted.internet.defer import Deferred, succeed

from objstore.meta.bucket_cache import BucketCache, BucketConfigCache
from objstore.meta.coherence import TtlCache
from objstore.meta.group_commit import GROUPED_QUERIES
from objstore.meta.object_cache import ObjectCache
from objstore.meta.pool import DbRunner
from objstore.meta.records import BucketRecord, ObjectRecord
from objstore.meta.retry import RetryPolicy, call_with_retries, frees_space
from objstore.meta.store import SyncMetaStore

_P = ParamSpec("_P")
_R = TypeVar("_R")
_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")

_Query = Callable[Concatenate[SyncMetaStore, _P], _R]
_Method = Callable[Concatenate["MetaStore", _P], Deferred[_R]]


def through_cache(cache: TtlCache[_K, _V], key: _K, load: Callable[[], Deferred[_V]]
                  ) -> Deferred[_V]:
    """`cache`'s entry for `key`, or what `load` gives, kept unless an invalidation
    happened while it loaded (the `TtlCache` rule)."""
    hit, value = cache.get(key)
    if hit:
        return succeed(cast(_V, value))
    token = cache.token()

    def keep(found: _V) -> _V:
        cache.store(key, found, token)
        return found

    return load().addCallback(keep)


def _on_reader(query: _Query[_P, _R]) -> _Method[_P, _R]:
    """`query` (a `SyncMetaStore` method) as a MetaStore method that runs it on the reader
    pool."""
    name = query.__name__

    def method(self: MetaStore, /, *args: _P.args, **kwargs: _P.kwargs) -> Deferred[_R]:
        return self._pool.run_read(self._attempts(name, *args, **kwargs))

    method.__name__, method.__doc__ = query.__name__, query.__doc__
    return method


def _on_writer(query: _Query[_P, _R]) -> _Method[_P, _R]:
    """`query` (a `SyncMetaStore` method) as a MetaStore method that runs it on the writer
    pool; the queries of `GROUPED_QUERIES` as writes that may share their transaction
    with other queued ones (group commit, meta/group_commit.py)."""
    name = query.__name__
    grouped = name in GROUPED_QUERIES

    def method(self: MetaStore, /, *args: _P.args, **kwargs: _P.kwargs) -> Deferred[_R]:
        if grouped:
            return self._pool.run_grouped_write(self._store.engine,
                                                self._attempts(name, *args, **kwargs))
        return self._pool.run_write(self._attempts(name, *args, **kwargs))

    method.__name__, method.__doc__ = query.__name__, query.__doc__
    return method


class MetaStore:
    """Every query of the metadata store as a method returning a Deferred. `iter_objects`
    is offered page by page as `objects_batch` (a generator cannot be shared between
    threads)."""

    def __init__(
        self,
        store: SyncMetaStore,
        pool: DbRunner,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        bucket_cache: BucketCache | None = None,
        object_cache: ObjectCache | None = None,
        config_cache: BucketConfigCache | None = None,
    ) -> None:
        self._store = store
        self._pool = pool
        self._retry = retry or RetryPolicy()
        self._sleep = sleep
        self._buckets = bucket_cache
        self._configs = config_cache if config_cache is not None and config_cache.enabled \
            else None
        # Coherent only while every object write bumps the cache's counter: the node sets
        # `store.objects_changed` to do so (service.py) before it serves.
        self._objects = object_cache if object_cache is not None and object_cache.enabled \
            else None

    def _attempts(self, name: str, /, *args: Any, **kwargs: Any) -> Callable[[], Any]:
        """One call of the store's query `name`, retried after transient errors (in the DB
        thread that runs it). Looked up on the store when called, as `self._store.name`
        always was: a store that overrides or replaces a query (tests inject races so)
        is what runs."""
        query, retry, sleep = getattr(self._store, name), self._retry, self._sleep
        freeing = frees_space(name)
        return lambda: call_with_retries(retry, lambda: query(*args, **kwargs), sleep,
                                         frees_space=freeing)

    # -- what the caches add ---------------------------------------------------------
    def _bucket_write(self, name: str, d: Deferred[_R]) -> Deferred[_R]:
        """Invalidate the cached bucket now and again once the write is done."""
        if self._buckets is None:
            return d
        cache = self._buckets
        cache.invalidate(name)

        def done(result: _R) -> _R:
            cache.invalidate(name)
            return result

        return d.addBoth(done)

    def create_bucket(self, bucket: BucketRecord) -> Deferred[bool]:
        return self._bucket_write(bucket.name, self._write_bucket(bucket))

    def update_bucket(self, bucket: BucketRecord) -> Deferred[None]:
        return self._bucket_write(bucket.name, self._update_bucket(bucket))

    def delete_bucket(self, name: str) -> Deferred[str]:
        return self._bucket_write(name, self._delete_bucket(name))

    def enable_object_lock(self, name: str, updated_at: float) -> Deferred[str]:
        return self._bucket_write(name, self._enable_object_lock(name, updated_at))

    def get_bucket(self, name: str) -> Deferred[BucketRecord | None]:
        if self._buckets is None:
            return self._get_bucket(name)
        return through_cache(self._buckets, name, lambda: self._get_bucket(name))

    def cached_bucket_config(self, bucket: str, key: str) -> Deferred[str | None]:
        """The bucket's configuration document `key`, from the configuration cache when it
        holds it: for settings every object write consults (default encryption)."""
        if self._configs is None:
            return self.get_bucket_config(bucket, key)
        return through_cache(self._configs, (bucket, key),
                             lambda: self.get_bucket_config(bucket, key))

    def put_bucket_config(self, bucket: str, key: str, value: str) -> Deferred[None]:
        return self._config_write(self._put_bucket_config(bucket, key, value))

    def delete_bucket_config(self, bucket: str, key: str) -> Deferred[bool]:
        return self._config_write(self._delete_bucket_config(bucket, key))

    def _config_write(self, d: Deferred[_R]) -> Deferred[_R]:
        """Forget the cached configuration documents now and once the write is done."""
        if self._configs is None:
            return d
        cache = self._configs
        cache.invalidate()

        def done(result: _R) -> _R:
            cache.invalidate()
            return result

        return d.addBoth(done)

    def get_object(
        self, bucket: str, key: str, version_id: str | None = None, *, cached: bool = False
    ) -> Deferred[ObjectRecord | None]:
        """The version (the latest without `version_id`). With `cached`, from the object
        cache when it holds it (see meta/object_cache.py): for reads that only answer a
        client (GET, HEAD). Reads that decide a write (lock rules, conditions, lifecycle)
        go to the database, so a row changed by a writer outside the node (`objstore
        recover`, another node on the same database) is never acted upon stale."""
        if self._objects is None or not cached:
            return self._get_object(bucket, key, version_id)
        return through_cache(self._objects, (bucket, key, version_id),
                             lambda: self._get_object(bucket, key, version_id))

    _write_bucket = _on_writer(SyncMetaStore.create_bucket)
    _update_bucket = _on_writer(SyncMetaStore.update_bucket)
    _delete_bucket = _on_writer(SyncMetaStore.delete_bucket)
    _enable_object_lock = _on_writer(SyncMetaStore.enable_object_lock)
    _get_bucket = _on_reader(SyncMetaStore.get_bucket)
    _get_object = _on_reader(SyncMetaStore.get_object)
    get_object_versions = _on_reader(SyncMetaStore.get_object_versions)

    # -- buckets ---------------------------------------------------------------------
    list_buckets = _on_reader(SyncMetaStore.list_buckets)
    get_bucket_config = _on_reader(SyncMetaStore.get_bucket_config)
    _put_bucket_config = _on_writer(SyncMetaStore.put_bucket_config)
    _delete_bucket_config = _on_writer(SyncMetaStore.delete_bucket_config)
    list_bucket_config = _on_reader(SyncMetaStore.list_bucket_config)

    # -- object rows -----------------------------------------------------------------
    put_object = _on_writer(SyncMetaStore.put_object)
    delete_object_version = _on_writer(SyncMetaStore.delete_object_version)
    delete_object_versions = _on_writer(SyncMetaStore.delete_object_versions)
    update_object = _on_writer(SyncMetaStore.update_object)
    insert_recovered = _on_writer(SyncMetaStore.insert_recovered)
    apply_replicated_object = _on_writer(SyncMetaStore.apply_replicated_object)
    apply_replicated_objects = _on_writer(SyncMetaStore.apply_replicated_objects)
    register_states = _on_reader(SyncMetaStore.register_states)
    apply_replicated_delete = _on_writer(SyncMetaStore.apply_replicated_delete)
    changed_since = _on_reader(SyncMetaStore.changed_since)
    outbox_read_after = _on_reader(SyncMetaStore.outbox_read_after)
    outbox_cursor = _on_reader(SyncMetaStore.outbox_cursor)
    outbox_advance = _on_writer(SyncMetaStore.outbox_advance)
    outbox_backlog = _on_reader(SyncMetaStore.outbox_backlog)
    outbox_purge = _on_writer(SyncMetaStore.outbox_purge)
    notification_enqueue = _on_writer(SyncMetaStore.notification_enqueue)
    notification_pending_targets = _on_reader(SyncMetaStore.notification_pending_targets)
    notification_due = _on_reader(SyncMetaStore.notification_due)
    notification_attempted = _on_writer(SyncMetaStore.notification_attempted)
    notification_delivered = _on_writer(SyncMetaStore.notification_delivered)
    notification_queue_figures = _on_reader(SyncMetaStore.notification_queue_figures)
    notification_purge = _on_writer(SyncMetaStore.notification_purge)
    query_notification_events = _on_reader(SyncMetaStore.query_notification_events)
    journal_add = _on_writer(SyncMetaStore.journal_add)
    journal_pending = _on_reader(SyncMetaStore.journal_pending)
    journal_update = _on_writer(SyncMetaStore.journal_update)
    journal_retry = _on_writer(SyncMetaStore.journal_retry)
    journal_list = _on_reader(SyncMetaStore.journal_list)
    journal_purge = _on_writer(SyncMetaStore.journal_purge)
    journal_finish = _on_writer(SyncMetaStore.journal_finish)
    version_states = _on_reader(SyncMetaStore.version_states)
    journal_counts = _on_reader(SyncMetaStore.journal_counts)
    get_sync_cursor = _on_reader(SyncMetaStore.get_sync_cursor)
    list_sync_cursors = _on_reader(SyncMetaStore.list_sync_cursors)
    put_sync_cursor = _on_writer(SyncMetaStore.put_sync_cursor)
    delete_sync_cursor = _on_writer(SyncMetaStore.delete_sync_cursor)
    list_latest = _on_reader(SyncMetaStore.list_latest)
    list_versions = _on_reader(SyncMetaStore.list_versions)
    bucket_usage = _on_reader(SyncMetaStore.bucket_usage)
    storage_totals = _on_reader(SyncMetaStore.storage_totals)
    objects_batch = _on_reader(SyncMetaStore.objects_batch)
    objects_by_blob_id = _on_reader(SyncMetaStore.objects_by_blob_id)
    encrypted_versions = _on_reader(SyncMetaStore.encrypted_versions)
    swap_wrapped_key = _on_writer(SyncMetaStore.swap_wrapped_key)
    count_encrypted_versions = _on_reader(SyncMetaStore.count_encrypted_versions)
    versions_by_stages = _on_reader(SyncMetaStore.versions_by_stages)
    count_versions_by_stages = _on_reader(SyncMetaStore.count_versions_by_stages)
    swap_blob = _on_writer(SyncMetaStore.swap_blob)
    wrapped_parts = _on_reader(SyncMetaStore.wrapped_parts)
    count_wrapped_parts = _on_reader(SyncMetaStore.count_wrapped_parts)
    swap_part_key = _on_writer(SyncMetaStore.swap_part_key)
    max_seq = _on_reader(SyncMetaStore.max_seq)
    list_latest_entries = _on_reader(SyncMetaStore.list_latest_entries)
    list_version_entries = _on_reader(SyncMetaStore.list_version_entries)

    # -- multipart -------------------------------------------------------------------
    create_upload = _on_writer(SyncMetaStore.create_upload)
    get_upload = _on_reader(SyncMetaStore.get_upload)
    list_uploads = _on_reader(SyncMetaStore.list_uploads)
    put_part = _on_writer(SyncMetaStore.put_part)
    list_parts = _on_reader(SyncMetaStore.list_parts)
    delete_upload = _on_writer(SyncMetaStore.delete_upload)
    complete_upload = _on_writer(SyncMetaStore.complete_upload)
    get_completion = _on_reader(SyncMetaStore.get_completion)

    # -- users and credentials -------------------------------------------------------
    create_user = _on_writer(SyncMetaStore.create_user)
    get_user = _on_reader(SyncMetaStore.get_user)
    get_user_by_name = _on_reader(SyncMetaStore.get_user_by_name)
    list_users = _on_reader(SyncMetaStore.list_users)
    list_user_summaries = _on_reader(SyncMetaStore.list_user_summaries)
    get_user_summary = _on_reader(SyncMetaStore.get_user_summary)
    update_user = _on_writer(SyncMetaStore.update_user)
    delete_user = _on_writer(SyncMetaStore.delete_user)
    create_credential = _on_writer(SyncMetaStore.create_credential)
    get_credential = _on_reader(SyncMetaStore.get_credential)
    lookup_identity = _on_reader(SyncMetaStore.lookup_identity)
    list_credentials = _on_reader(SyncMetaStore.list_credentials)
    update_credential = _on_writer(SyncMetaStore.update_credential)
    delete_credential = _on_writer(SyncMetaStore.delete_credential)
    change_credential = _on_writer(SyncMetaStore.change_credential)
    remove_credential = _on_writer(SyncMetaStore.remove_credential)

    # -- teams and grants ------------------------------------------------------------
    create_team = _on_writer(SyncMetaStore.create_team)
    get_team = _on_reader(SyncMetaStore.get_team)
    get_team_summary = _on_reader(SyncMetaStore.get_team_summary)
    list_team_summaries = _on_reader(SyncMetaStore.list_team_summaries)
    update_team = _on_writer(SyncMetaStore.update_team)
    delete_team = _on_writer(SyncMetaStore.delete_team)
    add_team_member = _on_writer(SyncMetaStore.add_team_member)
    remove_team_member = _on_writer(SyncMetaStore.remove_team_member)
    list_team_members = _on_reader(SyncMetaStore.list_team_members)
    list_user_teams = _on_reader(SyncMetaStore.list_user_teams)
    create_grant = _on_writer(SyncMetaStore.create_grant)
    get_grant = _on_reader(SyncMetaStore.get_grant)
    get_grant_by_name = _on_reader(SyncMetaStore.get_grant_by_name)
    list_grants = _on_reader(SyncMetaStore.list_grants)
    update_grant = _on_writer(SyncMetaStore.update_grant)
    delete_grant = _on_writer(SyncMetaStore.delete_grant)
    attach_user_grant = _on_writer(SyncMetaStore.attach_user_grant)
    detach_user_grant = _on_writer(SyncMetaStore.detach_user_grant)
    list_user_grants = _on_reader(SyncMetaStore.list_user_grants)
    attach_team_grant = _on_writer(SyncMetaStore.attach_team_grant)
    detach_team_grant = _on_writer(SyncMetaStore.detach_team_grant)
    list_team_grants = _on_reader(SyncMetaStore.list_team_grants)
    effective_grants = _on_reader(SyncMetaStore.effective_grants)
    grant_holders = _on_reader(SyncMetaStore.grant_holders)

    # -- settings and tombstones -----------------------------------------------------
    get_setting = _on_reader(SyncMetaStore.get_setting)
    put_setting = _on_writer(SyncMetaStore.put_setting)
    delete_setting = _on_writer(SyncMetaStore.delete_setting)
    list_settings = _on_reader(SyncMetaStore.list_settings)
    get_tombstone = _on_reader(SyncMetaStore.get_tombstone)
    purge_tombstones = _on_writer(SyncMetaStore.purge_tombstones)
    control_state = _on_reader(SyncMetaStore.control_state)
    merge_control_snapshot = _on_writer(SyncMetaStore.merge_control_snapshot)

    # -- maintenance jobs ------------------------------------------------------------
    create_job = _on_writer(SyncMetaStore.create_job)
    get_job = _on_reader(SyncMetaStore.get_job)
    active_job = _on_reader(SyncMetaStore.active_job)
    list_jobs = _on_reader(SyncMetaStore.list_jobs)
    move_job = _on_writer(SyncMetaStore.move_job)
    record_progress = _on_writer(SyncMetaStore.record_progress)
    claim_job = _on_writer(SyncMetaStore.claim_job)
    append_job_log = _on_writer(SyncMetaStore.append_job_log)
    job_logs = _on_reader(SyncMetaStore.job_logs)

    # -- audit log and metrics history -----------------------------------------------
    insert_audit_records = _on_writer(SyncMetaStore.insert_audit_records)
    query_audit = _on_reader(SyncMetaStore.query_audit)
    purge_audit = _on_writer(SyncMetaStore.purge_audit)
    insert_metrics_sample = _on_writer(SyncMetaStore.insert_metrics_sample)
    query_metrics_history = _on_reader(SyncMetaStore.query_metrics_history)
    purge_metrics_history = _on_writer(SyncMetaStore.purge_metrics_history)
    usage_by_bucket = _on_reader(SyncMetaStore.usage_by_bucket)
