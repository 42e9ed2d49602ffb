"""Pure naming rules for buckets and keys (no I/O, no Twisted)."""

from __future__ import annotations

import re

_BUCKET_CHARS = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_IP_SHAPE = re.compile(r"^\d{1,3}(\.\d{1,3}){3}$")
MAX_KEY_BYTES = 1024
# Path-style URLs under these names belong to the daemon's own mounts (`http/root.py`), so
# no bucket may take them.
RESERVED_BUCKET_NAMES = frozenset({"admin", "console"})


def bucket_name_problem(name: str) -> str | None:
    """Why `name` is not a valid bucket name, or None when it is."""
    if not 3 <= len(name) <= 63:
        return "Bucket names must be between 3 and 63 characters long."
    if not _BUCKET_CHARS.match(name):
        return (
            "Bucket names may contain only lowercase letters, digits, periods and hyphens, "
            "and must begin and end with a letter or digit."
        )
    if ".." in name or ".-" in name or "-." in name:
        return "Bucket names must not contain '..', '.-' or '-.'."
    if _IP_SHAPE.match(name):
        return "Bucket names must not be formatted as an IP address."
    if name.startswith("xn--") or name.endswith("-s3alias") or name.endswith("--ol-s3"):
        return "Bucket names must not use a reserved prefix or suffix."
    if name in RESERVED_BUCKET_NAMES:
        return f"The bucket name {name!r} is reserved by this server."
    return None


def key_problem(key: str) -> tuple[str, str] | None:
    """(S3 error code, message) when `key` is not acceptable, else None.

    A key is 1 to 1024 bytes of UTF-8 holding any character but NUL, as on AWS: control
    characters, CR and LF included (a bucket copied from AWS may hold them). The ones XML
    1.0 can not carry are written in XML answers as character references, as AWS writes
    them (`s3/xml.py` `set_text`), so no key makes a bucket unlistable or an answer fail;
    clients that list such keys ask for encoding-type=url (the AWS SDKs do for
    object listings)."""
    if not key:
        return ("InvalidArgument", "An object key must not be empty.")
    if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        return ("KeyTooLongError", "Your key is too long.")
    if "\x00" in key:
        return ("InvalidArgument", "Object keys must not contain null bytes.")
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return ("InvalidURI", "Couldn't parse the specified URI.")
    return None
