"""Numbers and options in query parameters and headers, read by one rule
(`client_bytes.decimal`: ASCII digits, bounded length) with the refusals AWS answers for
them: max-keys and encoding-type of every listing, and the counts, part numbers and sizes
the other operations take. Pure; no Twisted."""

from __future__ import annotations

from collections.abc import Mapping

from objstore.engine.multipart import MAX_PART_NUMBER
from objstore.errors import S3Error
from objstore.http.client_bytes import decimal

MAX_KEYS = 1000  # the default page, and the most a page holds


def integer_argument(raw: str, name: str, message: str, *, low: int = 0,
                     high: int | None = None) -> int:
    """`raw`, the value of query parameter or header `name`, as a decimal number within
    `low`..`high`; S3Error InvalidArgument with `message` for anything else."""
    value = decimal(raw.strip())
    if value is None or value < low or (high is not None and value > high):
        raise S3Error("InvalidArgument", message, ArgumentName=name, ArgumentValue=raw)
    return value


def part_number(raw: str | None, name: str = "partNumber") -> int:
    """A part number, 1 to 10,000."""
    return integer_argument(raw or "", name, "Part number must be an integer between 1 and "
                            f"{MAX_PART_NUMBER}, inclusive", low=1, high=MAX_PART_NUMBER)


def max_keys(raw: str | None) -> int:
    """max-keys: absent is 1000; a negative or non-integer value is InvalidArgument; more
    than 1000 is 1000."""
    if raw is None:
        return MAX_KEYS
    value = integer_argument(raw, "max-keys", "max-keys must be a non-negative integer.")
    return min(value, MAX_KEYS)


def count_argument(raw: str | None, name: str, default: int) -> int:
    """A non-negative count (max-parts, max-uploads, part-number-marker, and their
    x-amz-* header forms); `default` when absent."""
    if raw is None:
        return default
    return integer_argument(raw, name, f"Provided {name} not an integer or within integer "
                            "range")


def encoding_type(query: Mapping[str, str]) -> str | None:
    """encoding-type: absent, or "url" (keys and prefixes percent-encoded in the answer)."""
    value = query.get("encoding-type")
    if value not in (None, "url"):
        raise S3Error("InvalidArgument", "Invalid Encoding Method specified in Request",
                      ArgumentName="encoding-type", ArgumentValue=value)
    return value
