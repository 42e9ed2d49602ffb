"""Withdrawal manifests: one file naming the versions a batch delete withdraws.

A permanent delete must make its withdrawal durable before its row's COMMIT, so that
`recover` never rebuilds a deleted version from the files a crash leaves behind (see
store.py). A single delete moves the version's sidecar into `deleting/`; a batch delete
(DeleteObjects: up to 1,000 versions of one bucket) instead writes ONE manifest,
`deleting/<name>.withdrawn.json`, naming every version it is about to delete, made durable
with one sync, and leaves the sidecars where they are. From then on:

* `recover` skips the sidecars of the blobs a manifest names (`BlobStore.manifest_blob_ids`):
  those versions count as deleted, as a withdrawn sidecar's does;
* after the commit the versions' files go (sidecar, blob, parts), then the manifest;
* a crash before that leaves the manifest to `BlobStore.settle_withdrawn` (at start-up and
  by `objstore check --repair`): a version whose row still holds its blob stays whole (its
  sidecar never moved), the others' files go, then the manifest.

A manifest is written in place (no temporary name) and trusted only once its sync
returned, and the commit waits for that: a manifest that does not parse was torn by a
crash during its writing, before any of its versions' rows could go, so it names nothing
and is dropped.

This module owns the manifest's format (pure functions: bytes in, versions out); the
files are BlobStore's. No Twisted, no IO.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

MANIFEST_SUFFIX = ".withdrawn.json"
MANIFEST_FORMAT = 1
# What `BlobStore` names a manifest (pid, token, serial: `_tmp_name`), matched whole since
# the name becomes a path.
MANIFEST_NAME = re.compile(r"[0-9]{1,10}-[0-9a-f]{12}-[0-9]{1,20}" + re.escape(MANIFEST_SUFFIX))


@dataclass(frozen=True)
class WithdrawnVersion:
    """One version a manifest names: its blob (the one holding its sidecar), the row that
    holds it, and its parts' blobs (a composite's: removed with it)."""

    blob_id: str
    bucket: str
    key: str
    version_id: str
    part_ids: tuple[str, ...] = ()

    def identity(self) -> dict[str, Any]:
        """The row it names, as a sidecar names it (`row_holds` in cli/check.py)."""
        return {"kind": "object", "bucket": self.bucket, "key": self.key,
                "version_id": self.version_id}


def encode_manifest(bucket: str, versions: Sequence[WithdrawnVersion]) -> bytes:
    """The manifest of a batch of one bucket's versions: one JSON document, the bucket
    once, each version as [blob_id, key, version_id, [part ids]]."""
    return json.dumps({
        "format": MANIFEST_FORMAT, "bucket": bucket,
        "versions": [[v.blob_id, v.key, v.version_id, list(v.part_ids)] for v in versions],
    }, ensure_ascii=False, separators=(",", ":")).encode()


def parse_manifest(data: bytes, valid_blob_id: Callable[[str], bool]
                   ) -> list[WithdrawnVersion]:
    """The versions of a manifest. ValueError when it is not a whole manifest (torn by a
    crash while it was written, or not one at all). An entry whose blob id is not one
    (`valid_blob_id`, since blob ids become paths) is skipped, as is such a part."""
    document = json.loads(data)
    if not isinstance(document, dict) or document.get("format") != MANIFEST_FORMAT:
        raise ValueError("not a withdrawal manifest")
    bucket, entries = document.get("bucket"), document.get("versions")
    if not isinstance(bucket, str) or not isinstance(entries, list):
        raise ValueError("not a withdrawal manifest")
    versions = []
    for entry in entries:
        if not (isinstance(entry, list) and len(entry) == 4
                and all(isinstance(field, str) for field in entry[:3])
                and isinstance(entry[3], list)):
            raise ValueError("not a withdrawal manifest")
        blob_id, key, version_id, parts = entry
        if not valid_blob_id(blob_id):
            continue
        versions.append(WithdrawnVersion(
            blob_id, bucket, key, version_id,
            tuple(part for part in parts if isinstance(part, str) and valid_blob_id(part))))
    return versions
