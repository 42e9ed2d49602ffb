"""Which request headers and trailers claim a checksum of the body.

`x-amz-checksum-<algorithm>` carries a value; `x-amz-checksum-type`, `-algorithm` and
`-mode` are options, not claims. One rule, used by the body sink (what to compute) and by
authentication (what to verify).
"""

from __future__ import annotations

from objstore.checksums import CHECKSUM_ALGORITHMS

PREFIX = "x-amz-checksum-"


def claimed_algorithm(header_name: str) -> str | None:
    """The algorithm a (lower-case) header or trailer name claims a value for, or None."""
    if not header_name.startswith(PREFIX):
        return None
    algorithm = header_name[len(PREFIX):]
    return algorithm if algorithm in CHECKSUM_ALGORITHMS else None


def is_checksum_claim(header_name: str) -> bool:
    """True for x-amz-checksum-<anything> except the option headers (an unknown algorithm
    is still a claim: it must be refused, not ignored)."""
    return header_name.startswith(PREFIX) and header_name[len(PREFIX):] not in (
        "type", "algorithm", "mode",
    )
