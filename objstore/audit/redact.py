"""What the audit log must never hold: secrets, signatures, session tokens; and what it
cannot hold: text that one of the databases refuses.

Requests are recorded without their query string or headers (bar the User-Agent), so a
presigned URL's signature never reaches the log by that road; these functions are the
second line, applied to every free-text field recorded and to the extra fields that
background actions pass.

A record is written in a batch with hundreds of others, so one unstorable field would lose
them all: `storable_record` escapes what SQLite or PostgreSQL would refuse (NUL, and the
lone surrogates that stand for bytes that were not UTF-8) in every text field. Pure
functions; no Twisted.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from objstore.meta.audit_queries import AuditRecord, Detail

_SECRET_VALUE = re.compile(
    r"(x-amz-signature|x-amz-security-token|signature|secret[a-z_-]*|token"
    r"|[a-z-]*customer-key)[=:] ?[^&\s;,]*",
    re.IGNORECASE,
)
# An SSE-C key header (x-amz-[copy-source-]server-side-encryption-customer-key) counts as
# secret by its name: a customer's key is never recorded.
_SECRET_NAMES = ("secret", "signature", "authorization", "password", "token", "private",
                 "customer-key", "customer_key")
REDACTED = "REDACTED"
MAX_TEXT = 2048  # a User-Agent or a detail longer than this is cut


def redact_text(text: str) -> str:
    """`text` without the values of signature/secret/token query-style parameters."""
    if "=" in text or ":" in text:
        text = _SECRET_VALUE.sub(lambda m: f"{m.group(1)}={REDACTED}", text)
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT]


def secret_name(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in _SECRET_NAMES)


def safe_details(extra: Mapping[str, object]) -> dict[str, Detail]:
    """JSON-safe extra fields: secret-looking names dropped, text redacted."""
    found: dict[str, Detail] = {}
    for name, value in extra.items():
        if secret_name(name) or value is None:
            continue
        if isinstance(value, bool | int | float):
            found[name] = value
        else:
            found[name] = redact_text(str(value))
    return found


# NUL (PostgreSQL text refuses it) and surrogates (not encodable as UTF-8).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_TEXT_FIELDS = ("operation", "node_id", "request_id", "user_id", "username", "access_key",
                "bucket", "key", "source_ip", "error_code", "user_agent")


def storable(text: str) -> str:
    """`text` with NUL and lone surrogates escaped (a surrogate that stands for a byte that
    was not UTF-8 shows as that byte, `\\xff`); the same object when nothing needed it."""
    if _UNSTORABLE.search(text) is None:
        return text
    return _UNSTORABLE.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape's stand-in for the byte code - 0xDC00
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def storable_record(record: AuditRecord) -> AuditRecord:
    """`record` with every text field `storable`; the same object when all were."""
    changes: dict[str, object] = {}
    for name in _TEXT_FIELDS:
        value = getattr(record, name)
        clean = storable(value)
        if clean is not value:
            changes[name] = clean
    details = {storable(name): storable(value) if isinstance(value, str) else value
               for name, value in record.details.items()}
    if details != record.details:
        changes["details"] = details
    return dataclasses.replace(record, **changes) if changes else record  # type: ignore[arg-type]
