"""Reading JSON that came from outside: request bodies of the admin and cluster APIs,
peers' answers, files the CLI is given. One function, `parse_json`, for all of them.

`json.loads` alone lets hostile input through in three ways this module closes: deeply
nested arrays or objects (`[` x 100,000) make its C scanner raise RecursionError, which
is no ValueError and surfaced as a 500 with a traceback; integers of any size parse, and
one past signed 64-bit raises OverflowError in SQLite (or a Python int nothing else
expects); and NaN, Infinity and numbers that overflow a double (1e999) parse as
non-finite floats, which are not JSON and no stored value is. Each is a `JsonInputError`,
a ValueError, so callers that already catch ValueError for malformed JSON need no change.

Nesting deeper than `MAX_DEPTH` is refused too, even when the parser managed it: what
reads the document afterwards (validators, json.dumps into the audit log) recurses as
well, and no document this server reads is nested more than a dozen levels.

Pure: no I/O.
"""

from __future__ import annotations

import json
import math
from typing import Any

MAX_DEPTH = 64
INT64_MIN = -(2 ** 63)
INT64_MAX = 2 ** 63 - 1


class JsonInputError(ValueError):
    """Input that is not a JSON document this server reads (its message says why)."""


def _integer(text: str) -> int:
    value = int(text)
    if not INT64_MIN <= value <= INT64_MAX:
        raise JsonInputError(f"the integer {text[:40]} is outside signed 64-bit")
    return value


def _number(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonInputError(f"the number {text[:40]} is out of range")
    return value


def _constant(name: str) -> Any:
    raise JsonInputError(f"{name} is not JSON")


def parse_json(data: bytes | bytearray | str, *, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON document in `data`; JsonInputError when it is malformed, nested deeper
    than `max_depth`, or holds an integer outside signed 64-bit or a non-finite number."""
    try:
        value = json.loads(data, parse_int=_integer, parse_float=_number,
                           parse_constant=_constant)
    except JsonInputError:
        raise
    except RecursionError:
        raise JsonInputError(f"the document is nested deeper than {max_depth} "
                             "levels") from None
    except (ValueError, UnicodeDecodeError, TypeError) as error:
        raise JsonInputError(str(error)) from None
    if _depth_exceeds(value, max_depth):
        raise JsonInputError(f"the document is nested deeper than {max_depth} levels")
    return value


def _depth_exceeds(value: object, max_depth: int) -> bool:
    """Whether containers nest deeper than `max_depth` (iterative: no recursion)."""
    pending: list[tuple[object, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > max_depth:
            return True
        pending.extend((child, depth + 1) for child in children
                       if isinstance(child, dict | list))
    return False
