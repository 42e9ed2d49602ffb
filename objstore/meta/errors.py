"""The errors the metadata store raises on purpose. Driver errors pass through as
SQLAlchemy's `DBAPIError` (the facade retries the transient ones, `meta/retry.py`).

Pure: no SQL, no Twisted."""

from __future__ import annotations


class MetaStoreError(Exception):
    """Base of the errors the store raises on purpose."""


class RecordNotFound(MetaStoreError, LookupError):
    """A mutation named a row (or its parent bucket/upload) that does not exist."""


class PartsChanged(MetaStoreError):
    """A completion named part blobs that are no longer the upload's parts (a part was
    replaced after the caller read them); read the parts again and retry."""


class RowChanged(MetaStoreError):
    """A guarded mutation (expected_seq) found the row rewritten since the caller read it;
    read it again and decide again."""


class PreconditionNotMet(MetaStoreError):
    """A conditional write found the key in the wrong state. `reason` is "exists" (an
    If-None-Match: * write found an object), "mismatch" (If-Match saw another ETag) or
    "missing" (If-Match found no object)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
