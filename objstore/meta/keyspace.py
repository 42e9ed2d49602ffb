"""Pure rules of the key space that the store's range queries and the engine's listings
share: the upper bound of a key prefix, and the CommonPrefix a key rolls up into.

No SQL, no Twisted: plain functions on strings."""

from __future__ import annotations

_MAX_CODE_POINT = 0x10FFFF
_SURROGATES_FIRST, _SURROGATES_LAST = 0xD800, 0xDFFF


def prefix_upper_bound(prefix: str) -> str | None:
    """The smallest string greater than every string that starts with `prefix`, in code
    point order; None when there is none ("" or a prefix of only U+10FFFF).

    Surrogate code points never occur in keys (they cannot be UTF-8 encoded), so the
    successor of U+D7FF is U+E000."""
    chars = list(prefix)
    while chars:
        code = ord(chars[-1])
        if code >= _MAX_CODE_POINT:
            chars.pop()
            continue
        code += 1
        if _SURROGATES_FIRST <= code <= _SURROGATES_LAST:
            code = _SURROGATES_LAST + 1
        chars[-1] = chr(code)
        return "".join(chars)
    return None


def group_of(key: str, prefix: str, delimiter: str) -> str | None:
    """The CommonPrefix a key rolls up into (up to and including the first `delimiter`
    after `prefix`), or None when it is listed itself."""
    if not delimiter:
        return None
    index = key.find(delimiter, len(prefix))
    return None if index < 0 else key[: index + len(delimiter)]
