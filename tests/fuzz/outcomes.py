"""The property every parser of client bytes must have: it returns a value or raises the
S3 error a client is to be answered with (a 4xx code of the one table in objstore/errors.py,
304 NotModified for conditional reads, 501 NotImplemented for what this version refuses to
pretend it does), and nothing else: any other exception would be
a 500, a dropped connection or a traceback in the daemon's log."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from objstore.errors import S3_ERRORS, S3Error
from objstore.http.sigv4 import SigV4Error

T = TypeVar("T")


class Refused:
    """What a parser refused with: its S3 error code and status."""

    def __init__(self, code: str, status: int) -> None:
        self.code, self.status = code, status

    def __repr__(self) -> str:
        return f"Refused({self.code!r}, {self.status})"


def check_code(code: str) -> int:
    assert code in S3_ERRORS, f"{code!r} is not in the error table"
    status = S3_ERRORS[code][0]
    assert 400 <= status < 500 or code in ("NotModified", "NotImplemented"), (
        f"{code} answers {status}")
    return status


def outcome(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T | Refused:
    """`fn(*args, **kwargs)`, or what it refused with; any other exception fails the test."""
    try:
        return fn(*args, **kwargs)
    except S3Error as error:
        assert error.status == check_code(error.code)
        return Refused(error.code, error.status)
    except SigV4Error as error:  # authn.py turns these into S3Error with the same code
        return Refused(error.code, check_code(error.code))
