"""The request-body reader: what `Site.getContentFile` hands to twisted.web for a request.

`BodySpool` is the file object twisted.web writes a body into and, for small documents
(XML, JSON), reads it back from (`write`, `seek`, `tell`, `read`, `close`). It only does the
HTTP part: it decodes aws-chunked framing as bytes arrive (recording the chunk signatures
and trailers on its decoder, verified later by `http/authn.py` once the secret is known)
and feeds the decoded bytes to a `BlobWriter` (blobs/writer.py, built by blobs/factory.py
for the body's `StagePlan`, known when the spool is opened), which owns everything
about the bytes themselves: memory or spill file, digests, early flush, hand-over to the
blob store. A framing error is kept in `error` and stops the writer; so is a spool the
writer could not write (a full disk: InsufficientStorage), so that the request is still
read to its end and answered, after authentication, like any refused body.

The rest of its surface forwards to the writer, so the checks of a request (authn.py), the
handlers and the engine (which sees it as an `UploadedBody`) read one object. It never
verifies a signature itself and never blocks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from twisted.internet import defer

from objstore.blobs.factory import BlobStages
from objstore.blobs.plan import IDENTITY, StagePlan
from objstore.blobs.writer import MEMORY_LIMIT_BYTES, BlobWriter, BodyReleased, HeldBody
from objstore.crypto.customer_key import CustomerKey
from objstore.errors import S3Error, s3_error_of
from objstore.http.form_data import FormDecoder
from objstore.http.sigv4 import AwsChunkedDecoder, SigV4Error

if TYPE_CHECKING:
    from objstore.threads import Runner

__all__ = ["MEMORY_LIMIT_BYTES", "BodySpool"]


class BodySpool:
    """A write-once, then read, file-like sink (twisted.web seeks to 0 before processing)."""

    def __init__(
        self,
        tmp_dir: str,
        *,
        decoder: AwsChunkedDecoder | FormDecoder | None = None,
        want_sha256: bool = False,
        checksum_algorithms: Iterable[str] = (),
        max_length: int | None = None,
        memory_limit: int = MEMORY_LIMIT_BYTES,
        hash_runner: Runner | None = None,
        sync_runner: Runner | None = None,
        stages: BlobStages | None = None,
        plan: StagePlan = IDENTITY,
        customer_key: CustomerKey | None = None,
        pressure: Callable[[bool], None] | None = None,
    ) -> None:
        self.decoder = decoder
        self._tmp_dir = tmp_dir
        self._stages = stages if stages is not None else BlobStages()
        self._options: dict[str, Any] = dict(
            want_sha256=want_sha256, checksum_algorithms=tuple(checksum_algorithms),
            max_length=max_length, memory_limit=memory_limit, hash_runner=hash_runner,
            sync_runner=sync_runner, pressure=pressure)
        self._customer_key = customer_key  # an SSE-C body's key (memory only)
        self.writer: BlobWriter = self._stages.writer(tmp_dir, plan, customer_key=customer_key,
                                                      **self._options)
        # A framing error seen while streaming, or why the body could not be kept.
        self.error: SigV4Error | S3Error | None = None
        self._read_pos = 0

    def restage(self, plan: StagePlan, customer_key: CustomerKey | None = None,
                checksums: Iterable[str] = ()) -> None:
        """Write under `plan` instead (with `checksums` computed too: a staged body can not
        be read back): only for a spool that received nothing (an empty body is admitted
        when it is processed, after its spool was opened)."""
        if plan == self.writer.plan and customer_key is self._customer_key:
            return
        if self.writer.length:
            raise RuntimeError("a spool that holds bytes can not change its stages")
        self.writer.close()
        self._customer_key = customer_key
        known = self._options["checksum_algorithms"]
        self._options["checksum_algorithms"] = (
            *known, *(name for name in checksums if name not in known))
        self.writer = self._stages.writer(self._tmp_dir, plan, customer_key=customer_key,
                                          **self._options)

    # -- the write side (reactor thread, as bytes arrive) -------------------------------
    def write(self, data: bytes) -> None:
        if self.error is not None or self.writer.too_large:
            return
        if self.decoder is not None:
            try:
                data = self.decoder.feed(data)
            except SigV4Error as exc:
                self.error = exc
                self.writer.discard()
                return
        if data:
            self.writer.write(data)
            self._note_writer_error()

    def finish_decoding(self) -> None:
        """Called once the body is complete: a truncated aws-chunked body becomes an error."""
        if self.decoder is not None and self.error is None and not self.writer.too_large:
            try:
                self.decoder.finish()
            except SigV4Error as exc:
                self.error = exc
                self.writer.discard()
                return
        self.writer.end()
        self._note_writer_error()

    def _note_writer_error(self) -> None:
        failed = self.writer.error
        if failed is not None and self.error is None:
            self.error = s3_error_of(failed) or S3Error("InternalError")

    # -- the read side (twisted.web API; small bodies such as XML documents) -------------
    def seek(self, offset: int, whence: int = 0) -> int:
        if whence == 0:
            self._read_pos = offset
        elif whence == 1:
            self._read_pos += offset
        else:
            self._read_pos = self.length + offset
        return self._read_pos

    def tell(self) -> int:
        return self._read_pos

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            size = self.length - self._read_pos
        data = self.writer.read_at(self._read_pos, size)
        self._read_pos += len(data)
        return data

    def close(self) -> None:
        """Delete the spool (a no-op once the body was handed to the blob store)."""
        self.writer.close()

    # -- the body as the writer holds it ------------------------------------------------
    @property
    def length(self) -> int:
        return self.writer.length

    @property
    def too_large(self) -> bool:
        return self.writer.too_large

    @property
    def in_memory(self) -> bool:
        return self.writer.in_memory

    def memory_bytes(self) -> bytes:
        return self.writer.memory_bytes()

    @property
    def md5_hex(self) -> str:
        return self.writer.md5_hex

    @property
    def md5_b64(self) -> str:
        return self.writer.md5_b64

    @property
    def md5_digest(self) -> bytes:
        return self.writer.md5_digest

    @property
    def sha256_hex(self) -> str | None:
        return self.writer.sha256_hex

    def checksum_b64(self, algorithm: str) -> str | None:
        return self.writer.checksum_b64(algorithm)

    def checksum(self, algorithm: str) -> str:
        return self.writer.checksum(algorithm)

    def digests_ready(self) -> defer.Deferred[None]:
        return self.writer.digests_ready()

    def flush_early(self) -> None:
        self.writer.flush_early()

    @property
    def early_flush(self) -> defer.Deferred[None] | None:
        return self.writer.early_flush

    def detach(self) -> HeldBody:
        """The body for the blob store; a 400 IncompleteBody (which nobody hears: the
        client is gone, and the shield drops S3 errors) once the connection's loss has
        released it."""
        try:
            return self.writer.detach()
        except BodyReleased:
            raise S3Error("IncompleteBody",
                          "The connection closed before the body was stored.") from None

    def stage_fields(self, bucket: str, key: str, version_id: str,
                     part: str | None = None) -> dict[str, Any] | None:
        return self.writer.stage_fields(bucket, key, version_id, part)
