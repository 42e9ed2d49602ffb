"""`SyncMetaStore`: the metadata store called inline, by the offline tools (`recover`,
`check`), the start-up (migrate, bootstrap, node id) and tests.

It is a `Database` whose methods are the family query functions themselves, bound as
they are (`create_bucket = bucket_queries.create_bucket`): nothing is declared twice and
nothing is wrapped. `MetaStore` (async_store.py) runs the same functions on the DB thread
pools. This module also keeps the store's public names importable from one place (errors,
the usage-check types, tombstone families) for the layers above. No Twisted here.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from objstore.meta import (
    audit_queries,
    blob_walk_queries,
    bucket_queries,
    control_snapshot_queries,
    cursor_queries,
    grant_queries,
    iam_queries,
    job_queries,
    listing_queries,
    manifest_queries,
    metrics_queries,
    migrations,
    notification_queries,
    object_apply_queries,
    object_queries,
    object_write_queries,
    outbox_queries,
    replication_queries,
    rewrap_queries,
    settings_queries,
    tombstone_purge_queries,
    tombstones,
    upload_queries,
)
from objstore.meta.database import Database, StorageSettings, engine_for, sqlite_path_for
from objstore.meta.errors import (
    MetaStoreError,
    PartsChanged,
    PreconditionNotMet,
    RecordNotFound,
    RowChanged,
)
from objstore.meta.keyspace import prefix_upper_bound
from objstore.meta.object_apply_queries import ApplyResult, ApplyVerdict, TombstoneResult
from objstore.meta.object_write_queries import (
    MUTABLE_OBJECT_FIELDS,
    Usage,
    UsageCheck,
    UsageRule,
)
from objstore.meta.tombstones import (
    TOMBSTONE_BUCKET,
    TOMBSTONE_BUCKET_CONFIG,
    TOMBSTONE_CREDENTIAL,
    TOMBSTONE_OBJECT,
    TOMBSTONE_SETTING,
    TOMBSTONE_UPLOAD,
    bucket_config_tombstone_key,
    object_tombstone_key,
)


class SyncMetaStore(Database):
    """Every query of the metadata store as a plain synchronous method: each one is one
    transaction, safe to call from several threads at once."""

    def migrate(self) -> None:
        """Create or upgrade the schema to the current version (idempotent)."""
        migrations.migrate(self.engine, clock=self.clock)

    def is_initialised(self) -> bool:
        """True when the schema exists (read-only tools refuse a blank database)."""
        return bool(migrations.applied_versions(self.engine))

    def close(self) -> None:
        self.engine.dispose()

    # buckets
    create_bucket = bucket_queries.create_bucket
    get_bucket = bucket_queries.get_bucket
    list_buckets = bucket_queries.list_buckets
    update_bucket = bucket_queries.update_bucket
    delete_bucket = bucket_queries.delete_bucket
    enable_object_lock = bucket_queries.enable_object_lock
    get_bucket_config = bucket_queries.get_bucket_config
    put_bucket_config = bucket_queries.put_bucket_config
    delete_bucket_config = bucket_queries.delete_bucket_config
    list_bucket_config = bucket_queries.list_bucket_config
    # object rows: reads, listings, writes
    get_object = object_queries.get_object
    get_object_versions = object_queries.get_object_versions
    list_latest = object_queries.list_latest
    list_versions = object_queries.list_versions
    bucket_usage = object_queries.bucket_usage
    storage_totals = object_queries.storage_totals
    objects_batch = object_queries.objects_batch
    iter_objects = object_queries.iter_objects
    objects_by_blob_id = blob_walk_queries.objects_by_blob_id
    encrypted_versions = rewrap_queries.encrypted_versions
    swap_wrapped_key = rewrap_queries.swap_wrapped_key
    count_encrypted_versions = rewrap_queries.count_encrypted_versions
    versions_by_stages = rewrap_queries.versions_by_stages
    count_versions_by_stages = rewrap_queries.count_versions_by_stages
    swap_blob = rewrap_queries.swap_blob
    wrapped_parts = rewrap_queries.wrapped_parts
    count_wrapped_parts = rewrap_queries.count_wrapped_parts
    swap_part_key = rewrap_queries.swap_part_key
    max_seq = object_queries.max_seq
    list_latest_entries = listing_queries.list_latest_entries
    list_version_entries = listing_queries.list_version_entries
    put_object = object_write_queries.put_object
    delete_object_version = object_write_queries.delete_object_version
    delete_object_versions = object_write_queries.delete_object_versions
    update_object = object_write_queries.update_object
    insert_recovered = object_write_queries.insert_recovered
    # object rows and deletes replicated from cluster peers
    apply_replicated_object = object_apply_queries.apply_replicated_object
    apply_replicated_objects = object_apply_queries.apply_replicated_objects
    register_states = object_apply_queries.register_states
    apply_replicated_delete = object_apply_queries.apply_replicated_delete
    # anti-entropy: the changed-since manifest and the cursors toward peers (node-local)
    changed_since = manifest_queries.changed_since
    get_sync_cursor = cursor_queries.get_sync_cursor
    list_sync_cursors = cursor_queries.list_sync_cursors
    put_sync_cursor = cursor_queries.put_sync_cursor
    delete_sync_cursor = cursor_queries.delete_sync_cursor
    # the durable outbox: entries above a consumer's cursor, the cursors, purge
    outbox_read_after = outbox_queries.outbox_read_after
    outbox_cursor = outbox_queries.outbox_cursor
    outbox_advance = outbox_queries.outbox_advance
    outbox_backlog = outbox_queries.outbox_backlog
    outbox_purge = outbox_queries.outbox_purge
    # bucket notification deliveries (node-local)
    notification_enqueue = notification_queries.notification_enqueue
    notification_pending_targets = notification_queries.notification_pending_targets
    notification_due = notification_queries.notification_due
    notification_attempted = notification_queries.notification_attempted
    notification_delivered = notification_queries.notification_delivered
    notification_queue_figures = notification_queries.notification_queue_figures
    notification_purge = notification_queries.notification_purge
    query_notification_events = notification_queries.query_notification_events
    # the replication journal (node-local)
    journal_add = replication_queries.journal_add
    journal_pending = replication_queries.journal_pending
    journal_update = replication_queries.journal_update
    journal_retry = replication_queries.journal_retry
    journal_list = replication_queries.journal_list
    journal_purge = replication_queries.journal_purge
    journal_finish = replication_queries.journal_finish
    version_states = replication_queries.version_states
    journal_counts = replication_queries.journal_counts
    # multipart uploads
    create_upload = upload_queries.create_upload
    get_upload = upload_queries.get_upload
    list_uploads = upload_queries.list_uploads
    put_part = upload_queries.put_part
    list_parts = upload_queries.list_parts
    delete_upload = upload_queries.delete_upload
    complete_upload = upload_queries.complete_upload
    get_completion = upload_queries.get_completion
    # users and credentials
    create_user = iam_queries.create_user
    get_user = iam_queries.get_user
    get_user_by_name = iam_queries.get_user_by_name
    list_users = iam_queries.list_users
    list_user_summaries = iam_queries.list_user_summaries
    get_user_summary = iam_queries.get_user_summary
    update_user = iam_queries.update_user
    delete_user = iam_queries.delete_user
    create_credential = iam_queries.create_credential
    get_credential = iam_queries.get_credential
    lookup_identity = iam_queries.lookup_identity
    list_credentials = iam_queries.list_credentials
    update_credential = iam_queries.update_credential
    delete_credential = iam_queries.delete_credential
    change_credential = iam_queries.change_credential
    remove_credential = iam_queries.remove_credential
    # teams and grants
    create_team = grant_queries.create_team
    get_team = grant_queries.get_team
    get_team_summary = grant_queries.get_team_summary
    list_team_summaries = grant_queries.list_team_summaries
    update_team = grant_queries.update_team
    delete_team = grant_queries.delete_team
    add_team_member = grant_queries.add_team_member
    remove_team_member = grant_queries.remove_team_member
    list_team_members = grant_queries.list_team_members
    list_user_teams = grant_queries.list_user_teams
    create_grant = grant_queries.create_grant
    get_grant = grant_queries.get_grant
    get_grant_by_name = grant_queries.get_grant_by_name
    list_grants = grant_queries.list_grants
    update_grant = grant_queries.update_grant
    delete_grant = grant_queries.delete_grant
    attach_user_grant = grant_queries.attach_user_grant
    detach_user_grant = grant_queries.detach_user_grant
    list_user_grants = grant_queries.list_user_grants
    attach_team_grant = grant_queries.attach_team_grant
    detach_team_grant = grant_queries.detach_team_grant
    list_team_grants = grant_queries.list_team_grants
    effective_grants = grant_queries.effective_grants
    grant_holders = grant_queries.grant_holders
    # settings and tombstones
    get_setting = settings_queries.get_setting
    put_setting = settings_queries.put_setting
    delete_setting = settings_queries.delete_setting
    list_settings = settings_queries.list_settings
    get_tombstone = tombstones.get_tombstone
    purge_tombstones = tombstone_purge_queries.purge_tombstones
    # the control-plane snapshot of the cluster (build, merge a peer's)
    control_state = control_snapshot_queries.control_state
    merge_control_snapshot = control_snapshot_queries.merge_control_snapshot
    # maintenance jobs (node-local)
    create_job = job_queries.create_job
    get_job = job_queries.get_job
    active_job = job_queries.active_job
    list_jobs = job_queries.list_jobs
    move_job = job_queries.move_job
    record_progress = job_queries.record_progress
    claim_job = job_queries.claim_job
    append_job_log = job_queries.append_job_log
    job_logs = job_queries.job_logs
    # audit log and metrics history
    insert_audit_records = audit_queries.insert_audit_records
    query_audit = audit_queries.query_audit
    purge_audit = audit_queries.purge_audit
    insert_metrics_sample = metrics_queries.insert_metrics_sample
    query_metrics_history = metrics_queries.query_metrics_history
    purge_metrics_history = metrics_queries.purge_metrics_history
    usage_by_bucket = metrics_queries.usage_by_bucket


def open_sync_store(
    storage: StorageSettings, clock: Callable[[], float] = time.time
) -> SyncMetaStore:
    """A store over a new engine sized for the DB thread pools; does not migrate."""
    return SyncMetaStore(engine_for(storage), clock=clock)


__all__ = [
    "MUTABLE_OBJECT_FIELDS",
    "TOMBSTONE_BUCKET",
    "TOMBSTONE_BUCKET_CONFIG",
    "TOMBSTONE_CREDENTIAL",
    "TOMBSTONE_OBJECT",
    "TOMBSTONE_SETTING",
    "TOMBSTONE_UPLOAD",
    "ApplyResult",
    "ApplyVerdict",
    "MetaStoreError",
    "PartsChanged",
    "PreconditionNotMet",
    "RecordNotFound",
    "RowChanged",
    "StorageSettings",
    "SyncMetaStore",
    "TombstoneResult",
    "Usage",
    "UsageCheck",
    "UsageRule",
    "bucket_config_tombstone_key",
    "object_tombstone_key",
    "open_sync_store",
    "prefix_upper_bound",
    "sqlite_path_for",
]
