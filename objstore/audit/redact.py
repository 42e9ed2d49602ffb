"""What the audit log must never hold: secrets, signatures, session tokens.

Requests are recorded without their query string or headers (bar the User-Agent), so a
presigned URL's signature never reaches the log by that road; these functions are the
second line, applied to every free-text field recorded and to the extra fields that
background actions pass. Pure functions; no Twisted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from objstore.meta.audit_queries import Detail

_SECRET_VALUE = re.compile(
    r"(x-amz-signature|x-amz-security-token|signature|secret[a-z_-]*|token)=[^&\s;,]*",
    re.IGNORECASE,
)
_SECRET_NAMES = ("secret", "signature", "authorization", "password", "token", "private")
REDACTED = "REDACTED"
MAX_TEXT = 2048  # a User-Agent or a detail longer than this is cut


def redact_text(text: str) -> str:
    """`text` without the values of signature/secret/token query-style parameters."""
    if "=" in text:
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
