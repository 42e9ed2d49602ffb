"""A streaming multipart/form-data decoder for browser form uploads (S3 POST Object).

`FormDecoder` sits where an aws-chunked decoder sits in the body spool (http/spool.py):
`feed` takes the body's bytes as they arrive and returns only the bytes of the file part,
which the spool's writer streams to the data volume (hashing them on the way); the other
fields are kept, bounded by `max_fields_bytes` in total (AWS's 20 KiB of form data before
the file, MaxPostPreDataLengthExceededError beyond). Fields after the file are read and
ignored, as AWS does. Nothing of the file is ever held whole in memory.

Refusals are `SigV4Error`s carrying S3 codes (the spool's decoder contract):
MalformedPOSTRequest for a body that is not well-formed multipart, and
IncorrectNumberOfFilesInPostRequest for none or several file parts. Pure: no I/O.
"""

from __future__ import annotations

from email.message import Message

from objstore.http.sigv4 import SigV4Error

MAX_FIELDS_BYTES = 20 * 1024
MAX_PART_HEADER_BYTES = 8 * 1024
_MALFORMED = "The body of your POST request is not well-formed multipart/form-data."


def boundary_of(content_type: str | None) -> bytes | None:
    """The boundary of a multipart/form-data Content-Type; None when it is not one."""
    if not content_type:
        return None
    message = Message()
    message["content-type"] = content_type
    if message.get_content_type() != "multipart/form-data":
        return None
    boundary = message.get_param("boundary")
    if not isinstance(boundary, str) or not 0 < len(boundary) <= 70 or not boundary.isascii():
        return None
    return boundary.encode("ascii")


def _malformed(message: str = _MALFORMED) -> SigV4Error:
    return SigV4Error("MalformedPOSTRequest", message)


class FormDecoder:
    """States: "preamble" (before the first boundary), "headers" (a part's headers),
    "value" (a field's value), "file" (the file's bytes), "after" (a delimiter just read:
    "--" ends the body, CRLF starts a part), "epilogue" (done)."""

    def __init__(self, boundary: bytes, *, max_fields_bytes: int = MAX_FIELDS_BYTES) -> None:
        self._delimiter = b"\r\n--" + boundary
        self._buffer = b"\r\n"  # so that the first boundary is found like the others
        self._state = "preamble"
        self._max_fields = max_fields_bytes
        self._fields_bytes = 0
        self._name = ""
        self._value = bytearray()
        self.fields: dict[str, str] = {}  # lower-case names, first value of each
        self.filename: str | None = None
        self.file_content_type: str | None = None
        self.files = 0
        self.file_length = 0
        self.trailers: dict[str, str] = {}  # none: what the spool's checks may read

    @property
    def complete(self) -> bool:
        return self._state == "epilogue"

    def feed(self, data: bytes) -> bytes:
        self._buffer += data
        out = bytearray()
        while True:
            progressed, emitted = self._step()
            out += emitted
            if not progressed:
                break
        self.file_length += len(out)
        return bytes(out)

    def finish(self) -> None:
        if self._state != "epilogue":
            raise _malformed()
        if self.files != 1:
            raise SigV4Error("IncorrectNumberOfFilesInPostRequest",
                             "POST requires exactly one file upload per request.")

    def _step(self) -> tuple[bool, bytes]:
        state = self._state
        if state == "epilogue":
            self._buffer = b""
            return False, b""
        if state in ("preamble", "value", "file"):
            return self._until_delimiter(state)
        if state == "after":
            if len(self._buffer) < 2:
                return False, b""
            mark, self._buffer = self._buffer[:2], self._buffer[2:]
            if mark == b"--":
                self._state = "epilogue"
            elif mark == b"\r\n":
                self._state = "headers"
            else:
                raise _malformed()
            return True, b""
        return self._headers(), b""

    def _until_delimiter(self, state: str) -> tuple[bool, bytes]:
        found = self._buffer.find(self._delimiter)
        if found < 0:
            keep = len(self._delimiter) - 1
            ready, self._buffer = self._buffer[:-keep], self._buffer[-keep:]
            return False, self._content(state, ready)
        ready = self._buffer[:found]
        self._buffer = self._buffer[found + len(self._delimiter):]
        emitted = self._content(state, ready)
        if state == "value" and self._name:
            self.fields.setdefault(self._name, self._value.decode("utf-8", "replace"))
        self._state = "after"
        return True, emitted

    def _content(self, state: str, data: bytes) -> bytes:
        if state == "file":
            return data
        if state == "value":
            self._count(len(data))
            if self._name:
                self._value += data
        return b""  # the preamble is ignored

    def _count(self, size: int) -> None:
        if self.files:  # fields after the file: read, not kept, not counted
            return
        self._fields_bytes += size
        if self._fields_bytes > self._max_fields:
            raise SigV4Error("MaxPostPreDataLengthExceededError",
                             "Your POST request fields preceeding the upload file were too "
                             "large.")

    def _headers(self) -> bool:
        end = self._buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buffer) > MAX_PART_HEADER_BYTES:
                raise _malformed()
            return False
        if end > MAX_PART_HEADER_BYTES:
            raise _malformed()
        head, self._buffer = self._buffer[:end], self._buffer[end + 4:]
        self._count(end)
        message = Message()
        for line in head.decode("utf-8", "replace").split("\r\n"):
            name, sep, value = line.partition(":")
            if not sep:
                raise _malformed()
            message[name.strip()] = value.strip()
        if message.get_content_disposition() != "form-data":
            raise _malformed()
        param = message.get_param("name", header="content-disposition")
        if not isinstance(param, str) or not param:
            raise _malformed()
        name = param.lower()
        if name == "file":
            self.files += 1
            if self.files > 1:
                raise SigV4Error("IncorrectNumberOfFilesInPostRequest",
                                 "POST requires exactly one file upload per request.")
            filename = message.get_filename()
            self.filename = filename.replace("\\", "/").rsplit("/", 1)[-1] if filename else ""
            self.file_content_type = message.get("content-type")
            self._state = "file"
        else:
            self._name = "" if self.files else name
            self._value = bytearray()
            self._state = "value"
        return True
