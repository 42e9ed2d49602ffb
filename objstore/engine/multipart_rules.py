"""The rules of S3 multipart uploads that depend on neither HTTP nor storage: limits, the
shapes a request gives (checksum mode, the part list and claims of a completion), the
validation of a completion's part list (order, ETags, per-part checksums, minimum part
size), its whole-object checksum, the composite record it commits, whether a retried
completion names the same parts, and the sidecar of a part. Plain functions, tested
without a reactor; the service that applies them is engine/multipart.py.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from objstore.blobs import checksum_combine as combine
from objstore.errors import S3Error
from objstore.meta.records import ObjectRecord, PartRecord, PartRef, UploadRecord
from objstore.random_ids import random_uuid

MAX_PART_NUMBER = 10_000
MIN_PART_BYTES = 5 * 1024 * 1024
MAX_COPY_PART_BYTES = 5 * 1024**3
COMPOSITE = "COMPOSITE"
FULL_OBJECT = "FULL_OBJECT"


def new_upload_id() -> str:
    """Opaque, and ordered by creation time, so uploads of one key list oldest first as
    AWS lists them (the store orders by key, then upload id)."""
    return f"{time.time_ns() // 1000:015x}{random_uuid().hex}"


@dataclass(frozen=True)
class ChecksumMode:
    """The whole-object checksum an upload was created for (x-amz-checksum-algorithm and
    x-amz-checksum-type): algorithm in lower case ("crc32"), type COMPOSITE or
    FULL_OBJECT; both None when the client asked for none."""

    algorithm: str | None = None
    type: str | None = None

    @staticmethod
    def of(upload: UploadRecord) -> ChecksumMode:
        return ChecksumMode(upload.checksum_algorithm, upload.extra.get("checksum_type"))


@dataclass(frozen=True)
class RequestedPart:
    """One Part entry of a CompleteMultipartUpload body."""

    part_number: int
    etag: str
    checksums: dict[str, str] = field(default_factory=dict)  # "crc32" -> base64


@dataclass(frozen=True)
class CompletionClaims:
    """What the headers of a CompleteMultipartUpload claim about the whole object."""

    checksums: dict[str, str] = field(default_factory=dict)  # x-amz-checksum-<alg>
    checksum_type: str | None = None  # x-amz-checksum-type
    object_size: int | None = None  # x-amz-mp-object-size


def normalize_etag(etag: str) -> str:
    return etag.strip().strip('"').lower()


def check_part_order(requested: Sequence[RequestedPart]) -> None:
    """Part numbers must be strictly ascending (a repeated number is out of order too)."""
    if not requested:
        raise S3Error("MalformedXML", "The CompleteMultipartUpload list of parts is empty.")
    previous = 0
    for part in requested:
        if part.part_number <= previous:
            raise S3Error("InvalidPartOrder", "The list of parts was not in ascending order. "
                          "The parts list must be specified in order by part number.")
        previous = part.part_number


def select_parts(
    upload_id: str, mode: ChecksumMode, requested: Sequence[RequestedPart],
    stored: Sequence[PartRecord],
) -> list[PartRecord]:
    """The stored parts a completion names, checked as S3 does: each must exist with the
    given ETag (and the given checksums), a COMPOSITE upload's list must carry each part's
    checksum, and every part but the last must be at least 5 MiB."""
    check_part_order(requested)
    by_number = {part.part_number: part for part in stored}
    chosen = [_matching_part(upload_id, mode, entry, by_number) for entry in requested]
    for part in chosen[:-1]:
        if part.size < MIN_PART_BYTES:
            raise S3Error("EntityTooSmall", ProposedSize=str(part.size),
                          MinSizeAllowed=str(MIN_PART_BYTES), PartNumber=str(part.part_number),
                          ETag=f'"{part.etag}"')
    return chosen


def _matching_part(
    upload_id: str, mode: ChecksumMode, entry: RequestedPart, by_number: dict[int, PartRecord]
) -> PartRecord:
    part = by_number.get(entry.part_number)
    invalid = S3Error(
        "InvalidPart", "One or more of the specified parts could not be found. The part may "
        "not have been uploaded, or the specified entity tag may not match the part's entity "
        "tag.", UploadId=upload_id, PartNumber=str(entry.part_number), ETag=entry.etag,
    )
    if part is None or normalize_etag(entry.etag) != part.etag:
        raise invalid
    if any(part.checksums.get(alg) != value.strip() for alg, value in entry.checksums.items()):
        raise invalid
    if mode.type == COMPOSITE and mode.algorithm not in entry.checksums:
        raise S3Error("InvalidRequest", f"The upload was created using a {mode.algorithm} "
                      "checksum. The complete request must include the checksum for each "
                      f"part. It was missing for part {entry.part_number} in the request.")
    return part


def object_checksums(mode: ChecksumMode, parts: Sequence[PartRecord]) -> dict[str, str]:
    """The whole-object checksum of a completion: COMPOSITE (hash of the part digests,
    suffixed -N) or FULL_OBJECT (the part CRCs combined); none without an algorithm."""
    algorithm = mode.algorithm
    if algorithm is None:
        return {}
    values = [part.checksums.get(algorithm) for part in parts]
    if any(value is None for value in values):
        raise S3Error("InvalidRequest", f"A part has no {algorithm} checksum.")
    present = [value for value in values if value is not None]
    try:
        if mode.type == FULL_OBJECT:
            sizes = [part.size for part in parts]
            return {algorithm: combine.full_object_crc(algorithm, list(zip(present, sizes,
                                                                            strict=True)))}
        return {algorithm: combine.composite_checksum(algorithm, present)}
    except combine.ChecksumValueError as error:
        raise S3Error("InvalidRequest", f"A part's {algorithm} checksum is invalid.") from error


def check_claims(
    claims: CompletionClaims, mode: ChecksumMode, checksums: dict[str, str], size: int
) -> None:
    """Compare what the Complete request claims with what the parts give."""
    if claims.checksum_type is not None and claims.checksum_type.upper() != (mode.type or ""):
        raise S3Error("BadDigest", f"The upload was created using the {mode.type or 'null'} "
                      "checksum mode. The complete request must use the same checksum mode.")
    for algorithm, claimed in claims.checksums.items():
        computed = checksums.get(algorithm)
        if computed is None:
            raise S3Error("InvalidRequest", f"The upload was not created with a {algorithm} "
                          "checksum.")
        if claimed.strip() not in (computed, computed.partition("-")[0]):
            raise S3Error("BadDigest", f"The {algorithm.upper()} you specified did not match "
                          "the calculated checksum.")
    if claims.object_size is not None and claims.object_size != size:
        raise S3Error("InvalidRequest", f"The provided 'x-amz-mp-object-size' header value "
                      f"{claims.object_size} does not match what was computed: {size}")


def same_parts(requested: Sequence[RequestedPart], record: ObjectRecord) -> bool:
    """Whether a completion's part list names exactly the parts (numbers and ETags) the
    composite object `record` was made of."""
    return ([(part.part_number, normalize_etag(part.etag)) for part in requested]
            == [(part.part_number, part.etag) for part in record.parts])


ACL_EXTRA = "acl"  # upload.extra: the ACL the object gets on completion (Acl.to_json)


def composite_record(
    upload: UploadRecord, parts: Sequence[PartRecord], *, version_id: str, blob_id: str,
    now: float, checksums: dict[str, str], checksum_type: str | None,
) -> ObjectRecord:
    """The object a completion commits: its parts reference the part blobs; `blob_id`
    names the blob that holds only its sidecar."""
    return ObjectRecord(
        bucket=upload.bucket,
        key=upload.key,
        version_id=version_id,
        blob_id=blob_id,
        size=sum(part.size for part in parts),
        etag=combine.composite_etag([part.etag for part in parts]),
        last_modified=now,
        owner_id=upload.owner_id,
        owner_name=upload.owner_name,
        content_type=upload.content_type,
        user_metadata=dict(upload.user_metadata),
        system_headers=dict(upload.system_headers),
        storage_class=upload.storage_class,
        checksums=checksums,
        checksum_type=checksum_type if checksums else None,
        tags=dict(upload.tags),
        acl=upload.extra.get(ACL_EXTRA) or None,
        parts=tuple(
            PartRef(p.part_number, p.blob_id, p.size, p.etag, dict(p.checksums),
                    dict(p.encryption_params)) for p in parts
        ),
    )


def part_sidecar(upload: UploadRecord, part: PartRecord) -> dict[str, Any]:
    """The sidecar of a part blob: enough to tell what the blob is and to rebuild its row
    (its wrapped data key too: a part of an encrypted upload can not be read without)."""
    found = {
        "kind": "part",
        "bucket": upload.bucket,
        "key": upload.key,
        "upload_id": part.upload_id,
        "part_number": part.part_number,
        "etag": part.etag,
        "size": part.size,
        "checksums": dict(part.checksums),
        "last_modified": part.last_modified,
    }
    if part.encryption_params:
        found["encryption_params"] = dict(part.encryption_params)
    return found


def part_checksum_mismatch(mode: ChecksumMode, claimed: dict[str, str]) -> str | None:
    """The algorithm of a part's checksum that contradicts the upload's, if any."""
    if mode.algorithm is None:
        return None
    others = sorted(set(claimed) - {mode.algorithm})
    return others[0] if others else None
