"""What a replicated object row may hold: the values this server could have written
itself, so a row that passes can be listed, read, served as headers and stored by SQLite
on every node. The direct route (POST /cluster/v1/object) and anti-entropy both apply rows
through `engine.replication_apply`, which asks `row_problem` before anything else, and
anti-entropy asks it once more before it fetches a row's bytes; a refused row is a 400
on the route and a failed entry in anti-entropy (sync_rules rule 9), never applied, so the
nodes agree on what they refuse.

The rules (each refusal names the field):

- stamps (`last_modified`, `lock_updated_at`, `tags_updated_at`) and `retain_until_date`
  are dates S3 can show: years 1970 to 9999 (`utc_dates.renderable`; AWS takes no
  retain-until date past 9999 either: ISO 8601 has four-digit years);
- integers fit SQLite's signed 64 bits; `size` and part sizes are not negative; part
  numbers are 1 to 10,000, ascending; a composite's size is the sum of its parts';
- enumerations hold one of their values: storage class, retention mode, legal hold,
  checksum type and algorithms, encryption algorithm, replication status; compression,
  when set, is a short token;
- every string is valid Unicode (no lone surrogates: nothing could encode it); the ones
  served as headers (ETag, Content-Type, metadata, system headers, the encryption key
  id) hold no NUL, CR or LF (what would split a response; a client cannot send them
  either) and the ETag no double quote; metadata names are HTTP tokens and system
  headers are the ones objstore keeps.

`blob_problem` is the rule between a row and bytes held for it: a plain row (neither
compressed nor encrypted) has exactly `size` bytes. `etag_is_md5`: a row whose ETag is
the MD5 of its stored bytes, which bytes sent for it (anti-entropy's fetch, a row sent
with its bytes) must then match.

What the bucket, key, version id and blob ids must be is the engine's check
(`check_replicated_record`: engine.names, UUIDs), which calls this.

Pure: no I/O, no Twisted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from objstore.meta.records import ObjectRecord
from objstore.utc_dates import renderable

INT64_MAX = 2 ** 63 - 1
MAX_PART_NUMBER = 10_000
MAX_ETAG_CHARS = 128
# The values objstore writes (s3/objects.py, engine/lock_rules.py and s3/multipart.py hold
# the same sets for client requests; a unit test keeps them equal).
STORAGE_CLASSES = frozenset({
    "STANDARD", "REDUCED_REDUNDANCY", "STANDARD_IA", "ONEZONE_IA", "INTELLIGENT_TIERING",
    "GLACIER", "DEEP_ARCHIVE", "GLACIER_IR", "OUTPOSTS", "SNOW", "EXPRESS_ONEZONE",
})
RETENTION_MODES = frozenset({"GOVERNANCE", "COMPLIANCE"})
HOLD_STATUSES = frozenset({"ON", "OFF"})
# The permissions of an object ACL's grants (iam/acl_rules.PERMISSIONS).
ACL_PERMISSIONS = frozenset({"READ", "WRITE", "READ_ACP", "WRITE_ACP", "FULL_CONTROL"})
CHECKSUM_TYPES = frozenset({"FULL_OBJECT", "COMPOSITE"})
CHECKSUM_ALGORITHMS = frozenset({"crc32", "crc32c", "crc64nvme", "sha1", "sha256"})
ENCRYPTION_ALGORITHMS = frozenset({"AES256", "aws:kms", "aws:kms:dsse", "SSE-C"})
REPLICATION_STATUSES = frozenset({"PENDING", "COMPLETED", "FAILED", "REPLICA"})
SYSTEM_HEADERS = frozenset({
    "cache-control", "content-disposition", "content-encoding", "content-language", "expires",
})
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_COMPRESSION = re.compile(r"[a-z0-9][a-z0-9._-]{0,31}")
_CHECKSUM_VALUE = re.compile(r"[A-Za-z0-9+/=]{1,128}(-[0-9]{1,5})?")  # composite: "-N"
# What no header value a client sends can hold (the listener refuses such a request) and
# what would split a response: NUL, CR, LF. Other control characters do reach stored
# values from clients (a PUT's metadata), so a row holding them is one a node writes.
_CONTROL = re.compile(r"[\x00\r\n]")


@dataclass(frozen=True, slots=True)
class RowProblem:
    """Why a row is refused: the field and a message for the peer's operator."""

    field: str
    value: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def _shown(value: object) -> str:
    text = repr(value) if not isinstance(value, str) else value
    return text.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")[:80]


def _problem(name: str, value: object, message: str) -> RowProblem:
    return RowProblem(name, _shown(value), message)


def stamp_problem(name: str, stamp: float | None) -> RowProblem | None:
    """A stamp or date outside what S3 can show (None passes)."""
    if stamp is None or renderable(stamp):
        return None
    return _problem(name, stamp, "must be a date of the years 1970 to 9999 "
                    "(seconds since the epoch).")


def _count_problem(name: str, value: int) -> RowProblem | None:
    if not 0 <= value <= INT64_MAX:
        return _problem(name, value, "must be an integer from 0 to 2^63-1.")
    return None


def _enum_problem(name: str, value: str | None, allowed: frozenset[str], *,
                  optional: bool = True) -> RowProblem | None:
    if value is None and optional:
        return None
    if value not in allowed:
        return _problem(name, value, f"must be one of {', '.join(sorted(allowed))}"
                        + (" or null." if optional else "."))
    return None


def _text_problem(name: str, value: str, *, header: bool) -> RowProblem | None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return _problem(name, value, "must be valid Unicode (no lone surrogates).")
    if header and _CONTROL.search(value):
        return _problem(name, value, "must hold no NUL, CR or LF.")
    return None


def _strings_problem(name: str, values: Mapping[str, str], *, header: bool
                     ) -> RowProblem | None:
    for key, value in values.items():
        problem = (_text_problem(f"{name} name", key, header=header)
                   or _text_problem(f"{name}[{key!r}]", value, header=header))
        if problem:
            return problem
    return None


def _first(problems: Iterable[RowProblem | None]) -> RowProblem | None:
    return next((p for p in problems if p is not None), None)


def _stamps(record: ObjectRecord) -> RowProblem | None:
    return _first(stamp_problem(name, getattr(record, name)) for name in (
        "last_modified", "lock_updated_at", "tags_updated_at", "stages_updated_at",
        "retain_until_date"))


def _sizes(record: ObjectRecord) -> RowProblem | None:
    problem = _count_problem("size", record.size)
    if problem or not record.parts:
        return problem
    previous = 0
    for index, part in enumerate(record.parts):
        name = f"parts[{index}]"
        if not previous < part.part_number <= MAX_PART_NUMBER:
            return _problem(f"{name}.part_number", part.part_number,
                            "part numbers are 1 to 10000, ascending.")
        previous = part.part_number
        problem = _count_problem(f"{name}.size", part.size)
        if problem:
            return problem
    total = sum(part.size for part in record.parts)
    if total != record.size:
        return _problem("size", record.size, f"a composite's size is the sum of its "
                        f"parts' sizes ({total}).")
    return None


def _enums(record: ObjectRecord) -> RowProblem | None:
    compression = record.compression
    return _first((
        _enum_problem("storage_class", record.storage_class, STORAGE_CLASSES,
                      optional=False),
        _enum_problem("retention_mode", record.retention_mode, RETENTION_MODES),
        _enum_problem("legal_hold_status", record.legal_hold_status, HOLD_STATUSES),
        _enum_problem("checksum_type", record.checksum_type, CHECKSUM_TYPES),
        _enum_problem("encryption_algorithm", record.encryption_algorithm,
                      ENCRYPTION_ALGORITHMS),
        _enum_problem("replication_status", record.replication_status,
                      REPLICATION_STATUSES),
        None if compression is None or _COMPRESSION.fullmatch(compression) else
        _problem("compression", compression, "must be a short lowercase token or null."),
        _checksums_problem("checksums", record.checksums),
        *(_checksums_problem(f"parts[{index}].checksums", part.checksums)
          for index, part in enumerate(record.parts)),
    ))


def _checksums_problem(name: str, checksums: Mapping[str, str]) -> RowProblem | None:
    for algorithm, value in checksums.items():
        if algorithm not in CHECKSUM_ALGORITHMS:
            return _problem(f"{name} name", algorithm, "must be one of "
                            f"{', '.join(sorted(CHECKSUM_ALGORITHMS))}.")
        if not _CHECKSUM_VALUE.fullmatch(value):
            return _problem(f"{name}[{algorithm!r}]", value, "must be base64.")
    return None


def _etag_problem(name: str, etag: str) -> RowProblem | None:
    problem = _text_problem(name, etag, header=True)
    if problem:
        return problem
    if len(etag) > MAX_ETAG_CHARS or '"' in etag:
        return _problem(name, etag, f"must be at most {MAX_ETAG_CHARS} characters "
                        "and hold no double quote.")
    return None


def _texts(record: ObjectRecord) -> RowProblem | None:
    for name in record.user_metadata:
        if not _TOKEN.fullmatch(name):
            return _problem("user_metadata name", name, "must be an HTTP token.")
    for name in record.system_headers:
        if name not in SYSTEM_HEADERS:
            return _problem("system_headers name", name, "must be one of "
                            f"{', '.join(sorted(SYSTEM_HEADERS))}.")
    return _first((
        _etag_problem("etag", record.etag),
        *(_etag_problem(f"parts[{index}].etag", part.etag)
          for index, part in enumerate(record.parts)),
        _text_problem("content_type", record.content_type, header=True),
        _text_problem("encryption_key_id", record.encryption_key_id or "", header=True),
        _strings_problem("user_metadata", record.user_metadata, header=True),
        _strings_problem("system_headers", record.system_headers, header=True),
        _text_problem("owner_id", record.owner_id, header=False),
        _text_problem("owner_name", record.owner_name, header=False),
        _strings_problem("tags", record.tags, header=False),
        _acl_problem(record.acl),
    ))


def _acl_problem(text: str | None) -> RowProblem | None:
    """An object ACL is `{"owner": id, "grants": [[grantee, permission, name], ...]}`
    (`Acl.to_json`) with known permissions."""
    if text is None:
        return None
    try:
        document = json.loads(text)
    except ValueError:
        return _problem("acl", text, "must be a JSON document.")
    grants = document.get("grants") if isinstance(document, dict) else None
    if not isinstance(grants, list) or not isinstance(document.get("owner"), str):
        return _problem("acl", text, "must name an owner and a list of grants.")
    for grant in grants:
        if not (isinstance(grant, list) and len(grant) == 3
                and all(isinstance(item, str) for item in grant)
                and grant[1] in ACL_PERMISSIONS):
            return _problem("acl", text, "each grant must be [grantee, permission, name] "
                            "with a known permission.")
    return _text_problem("acl", text, header=False)


def row_problem(record: ObjectRecord) -> RowProblem | None:
    """The first reason `record` is not a row this server could have written, or None."""
    return _first(check(record) for check in (_stamps, _sizes, _enums, _texts))


def etag_is_md5(record: ObjectRecord) -> bool:
    """A row whose ETag is the MD5 of its stored bytes (no encryption, compression or
    multipart ETag)."""
    return (record.encryption_algorithm is None and record.compression is None
            and not record.parts and "-" not in record.etag and len(record.etag) == 32)


def blob_problem(record: ObjectRecord, stored_bytes: int) -> RowProblem | None:
    """Whether `stored_bytes` bytes can be this row's blob: a plain row's size is its
    blob's length (a compressed or encrypted row stores another length; a composite's
    blob holds only its sidecar, its bytes are its parts')."""
    if (record.compression is not None or record.encryption_algorithm is not None
            or record.parts or record.is_delete_marker):
        return None
    if stored_bytes != record.size:
        return _problem("size", record.size, f"the blob holds {stored_bytes} bytes.")
    return None
