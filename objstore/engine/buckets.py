"""Bucket use cases: create, look up, list, delete.

Every client-facing bucket mutation goes through here, so the control-plane record on the
data volume (for `recover`) and the change hook (audit, cluster fan-out) cannot be skipped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from objstore.blobs.control import ControlRecord
from objstore.engine.changes import Caller, Change, ChangeHook, ChangeKind
from objstore.engine.names import bucket_name_problem
from objstore.errors import S3Error
from objstore.meta.errors import RecordNotFound
from objstore.meta.records import BucketRecord
from objstore.threads import Runner

# A re-create's stamp is at least this much above the row's (a clock behind the row's).
RESTAMP_STEP_SECONDS = 1e-6

if TYPE_CHECKING:
    from objstore.meta.async_store import MetaStore


async def require_bucket(meta: MetaStore, name: str) -> BucketRecord:
    """The bucket's record, or S3 NoSuchBucket (the one place that rule lives)."""
    bucket = await meta.get_bucket(name)
    if bucket is None:
        raise S3Error("NoSuchBucket", BucketName=name)
    return bucket


class BucketService:
    def __init__(
        self,
        meta: MetaStore,
        control: ControlRecord,
        io: Runner,
        *,
        region: str | Callable[[], str],
        clock: Callable[[], float],
        changes: ChangeHook | None = None,
        restamp_on_repeat: bool = False,
    ) -> None:
        """`restamp_on_repeat` (a cluster node): an owner's CreateBucket of its existing
        bucket re-stamps it (see `create`); on a single node such a repeat changes
        nothing."""
        self._meta = meta
        self._restamp_on_repeat = restamp_on_repeat
        self._changes = changes or ChangeHook()
        self._control = control
        self._io = io
        self._region = region if callable(region) else (lambda: region)
        self._clock = clock

    @property
    def region(self) -> str:
        """The region new buckets are made in (the node's current one)."""
        return self._region()

    async def create(
        self, caller: Caller, name: str, *, location: str | None, object_lock: bool
    ) -> BucketRecord:
        problem = bucket_name_problem(name)
        if problem:
            raise S3Error("InvalidBucketName", problem, BucketName=name)
        if location not in (None, "", self.region):
            raise S3Error(
                "InvalidLocationConstraint",
                f"The specified location-constraint is not valid: this server's region is "
                f"{self.region}.",
                LocationConstraint=location or "",
            )
        now = self._clock()
        record = BucketRecord(
            name=name,
            owner_id=caller.principal.user_id,
            region=self.region,
            created_at=now,
            versioning="Enabled" if object_lock else "Disabled",
            object_lock=object_lock,
            updated_at=now,
        )
        created = await self._meta.create_bucket(record)
        if not created:
            existing = await self._meta.get_bucket(name)
            if existing is None:
                # Deleted between the two statements (a DeleteBucket, or a peer's
                # replicated deletion): the name is free again, so this create makes the
                # bucket. A CreateBucket never answers NoSuchBucket.
                return await self.create(caller, name, location=location,
                                         object_lock=object_lock)
            if existing.owner_id != caller.principal.user_id:
                raise S3Error("BucketAlreadyExists", BucketName=name)
            # Idempotent for its owner (spec: CreateBucket is idempotent). With no peers
            # that is all: nothing changes, nothing is written or reported.
            if not self._restamp_on_repeat:
                return existing
            # On a cluster node the create is still the newest word on the bucket: its
            # stamp moves, so that a peer's deletion this node had not heard of yet loses
            # to it (last-writer-wins) instead of removing the bucket the caller was just
            # told exists.
            record = dataclasses.replace(
                existing, updated_at=max(now, existing.updated_at + RESTAMP_STEP_SECONDS))
            try:
                await self._meta.update_bucket(record)
            except RecordNotFound:  # deleted meanwhile: create it after all
                return await self.create(caller, name, location=location,
                                         object_lock=object_lock)
        await self._io.run(
            self._control.write, "buckets", name, dataclasses.asdict(record)
        )
        await self._changes.committed(Change(ChangeKind.BUCKET_CREATED, caller, name))
        return record

    async def get(self, name: str) -> BucketRecord:
        return await require_bucket(self._meta, name)

    async def list(self) -> list[BucketRecord]:
        buckets: list[BucketRecord] = await self._meta.list_buckets()
        return buckets

    async def delete(self, caller: Caller, name: str) -> None:
        outcome = await self._meta.delete_bucket(name)
        if outcome == "missing":
            raise S3Error("NoSuchBucket", BucketName=name)
        if outcome == "not_empty":
            raise S3Error("BucketNotEmpty", BucketName=name)
        await self._io.run(self._control.remove, "buckets", name)
        await self._changes.committed(Change(ChangeKind.BUCKET_DELETED, caller, name))
