"""The request-body sink: bytes off the socket go to a spool on the data volume while the
digests the request claims are computed.

`BodySpool` is what `Site.getContentFile` hands to twisted.web. It decodes aws-chunked
framing on the fly (recording chunk signatures for later verification), keeps small bodies
in memory and spills larger ones to `<data_dir>/tmp`, so the blob store can later rename the
file into place without a second copy. It never verifies a signature itself (the secret is
not known while the body streams) and never blocks on fsync: that happens at commit time in
the IO thread pool.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import uuid
from collections.abc import Iterable

from objstore.checksums import Checksummer
from objstore.http.sigv4 import AwsChunkedDecoder, SigV4Error

MEMORY_LIMIT_BYTES = 1024 * 1024


class BodySpool:
    """A write-once, then read, file-like sink (twisted.web seeks to 0 before processing)."""

    def __init__(
        self,
        tmp_dir: str,
        *,
        decoder: AwsChunkedDecoder | None = None,
        want_sha256: bool = False,
        checksum_algorithms: Iterable[str] = (),
        max_length: int | None = None,
        memory_limit: int = MEMORY_LIMIT_BYTES,
    ) -> None:
        self._tmp_dir = tmp_dir
        self.decoder = decoder
        self._md5 = hashlib.md5()
        self._sha256 = hashlib.sha256() if want_sha256 else None
        self.checksummers = {alg: Checksummer(alg) for alg in checksum_algorithms}
        self._max_length = max_length
        self._memory_limit = memory_limit
        self._buffer: io.BytesIO | None = io.BytesIO()
        self._fd: int | None = None
        self.path: str | None = None
        self.length = 0
        self.error: SigV4Error | None = None  # a framing error seen while streaming
        self.too_large = False
        self._read_pos = 0
        self._closed = False

    # -- the write side (reactor thread, as bytes arrive) ---------------------------
    def write(self, data: bytes) -> None:
        if self.error is not None or self.too_large or self._closed:
            return
        if self.decoder is not None:
            try:
                data = self.decoder.feed(data)
            except SigV4Error as exc:
                self.error = exc
                self._discard()
                return
        if not data:
            return
        self.length += len(data)
        if self._max_length is not None and self.length > self._max_length:
            self.too_large = True
            self._discard()
            return
        self._md5.update(data)
        if self._sha256 is not None:
            self._sha256.update(data)
        for summer in self.checksummers.values():
            summer.update(data)
        if self._buffer is not None:
            self._buffer.write(data)
            if self._buffer.tell() > self._memory_limit:
                self._spill()
        elif self._fd is not None:
            _write_all(self._fd, data)

    def _spill(self) -> None:
        assert self._buffer is not None
        os.makedirs(self._tmp_dir, exist_ok=True)
        self.path = os.path.join(self._tmp_dir, f"{uuid.uuid4()}.spool")
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        _write_all(self._fd, self._buffer.getbuffer())
        self._buffer = None

    def finish_decoding(self) -> None:
        """Called once the body is complete: a truncated aws-chunked body becomes an error."""
        if self.decoder is not None and self.error is None and not self.too_large:
            try:
                self.decoder.finish()
            except SigV4Error as exc:
                self.error = exc

    # -- results ---------------------------------------------------------------------
    @property
    def md5_hex(self) -> str:
        return self._md5.hexdigest()

    @property
    def md5_b64(self) -> str:
        return base64.b64encode(self._md5.digest()).decode()

    @property
    def md5_digest(self) -> bytes:
        return self._md5.digest()

    @property
    def sha256_hex(self) -> str | None:
        return None if self._sha256 is None else self._sha256.hexdigest()

    def checksum_b64(self, algorithm: str) -> str | None:
        summer = self.checksummers.get(algorithm)
        return None if summer is None else summer.digest_b64()

    @property
    def in_memory(self) -> bool:
        return self._buffer is not None

    def memory_bytes(self) -> bytes:
        assert self._buffer is not None
        return self._buffer.getvalue()

    def detach_file(self) -> tuple[int, str]:
        """Hand the spool file (fd, path) to the blob store, which renames it into place.
        The spool forgets it, so close() will not delete it."""
        assert self._fd is not None and self.path is not None
        fd, path = self._fd, self.path
        self._fd = None
        self.path = None
        self._closed = True
        return fd, path

    # -- the read side (twisted.web API; small bodies such as XML documents) ---------
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
        size = max(0, min(size, self.length - self._read_pos))
        if self._buffer is not None:
            view = self._buffer.getbuffer()
            data = bytes(view[self._read_pos : self._read_pos + size])
            view.release()
        elif self._fd is not None:
            data = os.pread(self._fd, size, self._read_pos)
        else:
            data = b""
        self._read_pos += len(data)
        return data

    # -- cleanup ---------------------------------------------------------------------
    def _discard(self) -> None:
        """Stop keeping bytes (error or over the limit) but keep counting nothing more."""
        self._release()

    def _release(self) -> None:
        self._buffer = None
        if self._fd is not None:
            try:
                os.close(self._fd)
            finally:
                self._fd = None
        if self.path is not None:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            self.path = None

    def close(self) -> None:
        """Delete the spool (a no-op after detach_file)."""
        self._closed = True
        self._release()


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
