"""The one factory of blob writers and readers: a `StagePlan` (plan.py) in, the stages it
means out. Nothing else builds a `BlobWriter` or wraps a blob file in a read stage.

* `BlobStages.writer(tmp_dir, plan)`: the writer of a client's body. The identity plan is
  a bare `BlobWriter` (the fast path: nothing added). SSE-S3 draws a random data key, and
  the writer encrypts as bytes arrive (crypto/packages.py), so the plaintext never reaches
  the spool; once the engine knows the object's bucket, key and version, the writer's
  `stage_fields` wraps the data key under the master key with them bound in, and gives
  the record fields that describe the blob (the data key itself is kept nowhere).
* `stored_bytes_writer(tmp_dir)`: a blob copied as stored (replication, repair, anti-
  entropy): no stage, whatever its record says; peers never see plaintext or a key.
* `BlobStages.opener(record, open_blob)`: how a reader opens the blobs of a record: the
  blob file itself for the identity plan, else the file seen through its read stages
  (decrypt, then decompress: blobs/zchunks.py), which map logical ranges to stored ones.

Blocking only where its callers are (the writer on the reactor, openers on the IO pool).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from objstore.blobs.plan import (
    IDENTITY,
    MASTER_KEY_ENCRYPTIONS,
    StagedRecord,
    StagePlan,
    plan_of,
)
from objstore.blobs.stages import BlobSource, ByteSource, WriteStage
from objstore.blobs.writer import BlobWriter
from objstore.blobs.zchunks import ALGORITHM as ZSTD
from objstore.blobs.zchunks import DEFAULT_LEVEL, ChunkCompressor, DecompressingSource
from objstore.crypto.customer_key import SSE_C, CustomerKey
from objstore.crypto.master_key import UnwrapError, key_context, part_context
from objstore.crypto.packages import (
    DATA_KEY_BYTES,
    FORMAT,
    DecryptingSource,
    PackageEncryptor,
    plaintext_size,
    stored_size,
)
from objstore.errors import ServerCondition
from objstore.meta.records import PartRef


class MasterKey(Protocol):
    """Wraps data keys (crypto/master_key.py `LocalMasterKey`)."""

    @property
    def key_id(self) -> str: ...

    @property
    def key_ids(self) -> tuple[str, ...]: ...

    def wrap(self, data_key: bytes, context: bytes) -> str: ...

    def unwrap(self, key_id: str | None, wrapped: str, context: bytes) -> bytes: ...


class StagesUnavailable(OSError, ServerCondition):
    """A plan this node can not apply or read (no master key configured, an unknown
    stage written by a newer version): InternalError, logged in one line."""

    def __init__(self, message: str) -> None:
        OSError.__init__(self, message)  # the log line's detail
        self.code = "InternalError"
        self.message = "The object's stored bytes can not be decrypted on this server."


class ObjectIdentity(Protocol):
    @property
    def bucket(self) -> str: ...

    @property
    def key(self) -> str: ...

    @property
    def version_id(self) -> str: ...

    @property
    def size(self) -> int: ...


class StagedObject(StagedRecord, ObjectIdentity, Protocol):
    """A record as the factory reads it (ObjectRecord)."""

    @property
    def parts(self) -> tuple[PartRef, ...]: ...


def stored_bytes_writer(tmp_dir: str, **options: Any) -> BlobWriter:
    """A writer of bytes as stored: no stage (replication, repair, a peer's blob)."""
    return BlobWriter(tmp_dir, **options)


class BlobStages:
    """Turns plans into stages; `master_key` None: only the identity plan (no
    [encryption] configured)."""

    def __init__(self, master_key: MasterKey | None = None) -> None:
        self.master_key = master_key

    @property
    def key_id(self) -> str | None:
        return None if self.master_key is None else self.master_key.key_id

    @property
    def key_ids(self) -> tuple[str, ...]:
        """Every version of the master key (the active one last); () without one."""
        return () if self.master_key is None else tuple(self.master_key.key_ids)

    def writer(self, tmp_dir: str, plan: StagePlan = IDENTITY, *,
               customer_key: CustomerKey | None = None, **options: Any) -> BlobWriter:
        """The writer of a body under `plan` (options: BlobWriter's): compress, then
        encrypt. `customer_key`: the request's SSE-C key (an SSE-C plan needs one)."""
        if plan.identity:
            return BlobWriter(tmp_dir, **options)
        stages: list[WriteStage] = []
        if plan.compression is not None:
            stages.append(ChunkCompressor(_compression_level(plan)))
        seal_key: Callable[..., dict[str, Any]] | None = None
        if plan.encryption == SSE_C:
            if customer_key is None:
                raise StagesUnavailable("an SSE-C body needs the customer's key")
            sealing = customer_key
            data_key = os.urandom(DATA_KEY_BYTES)
            stages.append(PackageEncryptor(data_key))

            def seal_key(bucket: str, key: str, version_id: str,
                         part: str | None = None) -> dict[str, Any]:
                context = (key_context(bucket, key, version_id) if part is None
                           else part_context(bucket, key, version_id, part))
                return {"encryption_algorithm": SSE_C, "encryption_key_id": None,
                        "encryption_params": {"format": FORMAT,
                                              **sealing.seal(data_key, context)}}
        elif plan.encryption is not None:
            master = self._master_for(plan)
            data_key = os.urandom(DATA_KEY_BYTES)
            key_id = master.key_id
            stages.append(PackageEncryptor(data_key))

            def seal_key(bucket: str, key: str, version_id: str,
                         part: str | None = None) -> dict[str, Any]:
                context = (key_context(bucket, key, version_id) if part is None
                           else part_context(bucket, key, version_id, part))
                return {"encryption_algorithm": plan.encryption, "encryption_key_id": key_id,
                        "encryption_params": {"format": FORMAT,
                                              "wrapped_key": master.wrap(data_key, context)}}

        compression = plan.compression

        def seal(bucket: str, key: str, version_id: str,
                 part: str | None = None) -> dict[str, Any]:
            fields = {} if seal_key is None else seal_key(bucket, key, version_id, part)
            return {**fields, "compression": compression}

        return BlobWriter(tmp_dir, stages=stages, sealer=seal, plan=plan, **options)

    def _master_for(self, plan: StagePlan) -> MasterKey:
        if plan.encryption not in MASTER_KEY_ENCRYPTIONS:
            raise StagesUnavailable(f"no stage for {plan}")
        if self.master_key is None:
            raise StagesUnavailable("server-side encryption needs [encryption] enabled")
        return self.master_key

    def opener(self, record: StagedObject, open_blob: Callable[[str], BlobSource],
               customer_key: CustomerKey | None = None) -> Callable[[str], ByteSource]:
        """How a reader opens the blob(s) of `record`: decrypt, then decompress (a
        compressed blob's stream length comes from its file's size). The parts of a
        composite each have their own size and data key. `customer_key`: an SSE-C
        object's (checked against the record before: crypto/customer_key.py)."""
        plan = plan_of(record)
        if plan.identity:
            return open_blob
        if plan.compression not in (None, ZSTD):
            raise StagesUnavailable(f"unknown compression {plan.compression!r}")
        if plan.encryption == SSE_C:
            if customer_key is None:
                raise StagesUnavailable("an SSE-C object is read with its customer's key")
        elif plan.encryption is not None:
            self._master_for(plan)  # refused now, not at the first read
        parts = {part.blob_id: part for part in record.parts}
        keys: dict[str, bytes] = {}

        def data_key(blob_id: str, part: PartRef | None) -> bytes:
            found = keys.get(blob_id)
            if found is None:
                if customer_key is not None and plan.encryption == SSE_C:
                    found = _customer_data_key(record, part, customer_key)
                else:
                    found = (self._data_key(record, plan) if part is None
                             else self._part_key(record, plan, part))
                keys[blob_id] = found
            return found

        def open_staged(blob_id: str) -> ByteSource:
            part = parts.get(blob_id)
            size = record.size if part is None else part.size
            key = None if plan.encryption is None else data_key(blob_id, part)
            blob = open_blob(blob_id)
            try:
                if plan.compression is None:
                    assert key is not None
                    return DecryptingSource(blob, key, size)
                stream = blob.size()
                below: ByteSource = blob
                if key is not None:
                    stream = plaintext_size(stream)
                    below = DecryptingSource(blob, key, stream)
                return DecompressingSource(below, stream, size)
            except BaseException:
                blob.close()
                raise

        return open_staged

    def composite_fields(self, plan: StagePlan, bucket: str, key: str, upload_id: str,
                         version_id: str, parts: Sequence[PartRef],
                         verifier: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The record fields of the object a completion of an upload written under `plan`
        makes: the plan, and each part's data key wrapped again for the object's version
        (bound to the upload while it was open; the bytes are not touched). SSE-C parts
        stay bound to their upload (the completion has no customer key to rewrap them
        with): the object keeps the upload id and the upload's key `verifier`."""
        if plan.identity:
            return {}
        fields: dict[str, Any] = {"compression": plan.compression}
        if plan.encryption is None:
            return fields
        if plan.encryption == SSE_C:
            return {**fields, "encryption_algorithm": SSE_C, "encryption_key_id": None,
                    "encryption_params": {"format": FORMAT, "keys": "per-part",
                                          "upload_id": upload_id, **(verifier or {})}}
        master = self._master_for(plan)
        bound = []
        for part in parts:
            params = part.encryption_params
            if params.get("format") != FORMAT or not isinstance(params.get("wrapped_key"), str):
                raise StagesUnavailable(f"part {part.part_number} of upload {upload_id} has "
                                        "no data key")
            data_key = master.unwrap(params.get("key_id", plan.key_id), params["wrapped_key"],
                                     part_context(bucket, key, upload_id, part.blob_id))
            wrapped = master.wrap(data_key, part_context(bucket, key, version_id, part.blob_id))
            bound.append(replace(part, encryption_params={"format": FORMAT,
                                                          "wrapped_key": wrapped}))
        return {**fields, "encryption_algorithm": plan.encryption,
                "encryption_key_id": master.key_id,
                "encryption_params": {"format": FORMAT, "keys": "per-part"},
                "parts": tuple(bound)}

    def _part_key(self, record: StagedObject, plan: StagePlan, part: PartRef) -> bytes:
        master = self._master_for(plan)
        params = part.encryption_params
        if params.get("format") != FORMAT or not isinstance(params.get("wrapped_key"), str):
            raise StagesUnavailable(f"unknown encryption format {params.get('format')!r}")
        return master.unwrap(record.encryption_key_id, params["wrapped_key"],
                             part_context(record.bucket, record.key, record.version_id,
                                          part.blob_id))

    def rewrapped(self, record: StagedObject, bucket: str, key: str, version_id: str
                  ) -> dict[str, Any] | None:
        """The record fields of a copy of `record`'s stored bytes as `bucket`/`key`
        `version_id`: its data key unwrapped and wrapped again for the copy (the bytes are
        neither re-encrypted nor recompressed). None when the stored bytes can not be
        reused: a plain blob (the kernel copies it anyway), SSE-C (no key to rewrap with
        here), a composite (its parts are separate blobs)."""
        plan = plan_of(record)
        if plan.identity or plan.encryption not in (None, *MASTER_KEY_ENCRYPTIONS) \
                or record.parts:
            return None
        if plan.encryption is None:  # compressed only: the bytes as they are
            return {"compression": plan.compression, "encryption_algorithm": None,
                    "encryption_key_id": None, "encryption_params": {}}
        master = self._master_for(plan)
        data_key = self._data_key(record, plan)
        return {"encryption_algorithm": plan.encryption, "encryption_key_id": master.key_id,
                "encryption_params": {"format": FORMAT, "wrapped_key": master.wrap(
                    data_key, key_context(bucket, key, version_id))},
                "compression": plan.compression}

    def _data_key(self, record: StagedObject, plan: StagePlan) -> bytes:
        master = self._master_for(plan)
        params = record.encryption_params or {}
        if params.get("format") != FORMAT or not isinstance(params.get("wrapped_key"), str):
            raise StagesUnavailable(f"unknown encryption format {params.get('format')!r}")
        return master.unwrap(record.encryption_key_id, params["wrapped_key"],
                             key_context(record.bucket, record.key, record.version_id))

    @staticmethod
    def stored_size(record: StagedObject) -> int:
        """The size of the record's blob file as stored (not for a compressed blob: its
        length is known from its file only)."""
        plan = plan_of(record)
        return record.size if plan.identity else stored_size(record.size)


def _customer_data_key(record: StagedObject, part: PartRef | None, customer_key: CustomerKey
                       ) -> bytes:
    """An SSE-C blob's data key, unsealed with the customer's key (a part's is bound to
    its upload: `composite_fields`)."""
    if part is None:
        params: Mapping[str, Any] = record.encryption_params or {}
        context = key_context(record.bucket, record.key, record.version_id)
    else:
        params = part.encryption_params
        holder = str((record.encryption_params or {}).get("upload_id", ""))
        context = part_context(record.bucket, record.key, holder, part.blob_id)
    if params.get("format") != FORMAT:
        raise StagesUnavailable(f"unknown encryption format {params.get('format')!r}")
    try:
        return customer_key.unseal(params, context)
    except ValueError:
        raise UnwrapError("an SSE-C data key does not open for this object") from None


def _compression_level(plan: StagePlan) -> int:
    if plan.compression != ZSTD:
        raise StagesUnavailable(f"unknown compression {plan.compression!r}")
    return DEFAULT_LEVEL if plan.compression_level is None else plan.compression_level
