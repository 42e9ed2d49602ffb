"""The canonical query and path of SigV4 take shortcuts (plain components skip decoding
and encoding, repeated ones are kept): they must give exactly what the plain definitions
give (decode as sent, "+" as a space, then AWS's encoding), for any input."""

from __future__ import annotations

from urllib.parse import quote, unquote_to_bytes

from hypothesis import given, settings
from hypothesis import strategies as st

from objstore.http.sigv4 import canonical
from objstore.http.sigv4.canonical import (
    RequestView,
    aws_uri_path,
    canonical_query_string,
    query_component,
    query_items,
    query_pairs,
)


def _decoded(text: str) -> bytes:
    return unquote_to_bytes(text.encode("utf-8", "surrogateescape").replace(b"+", b"%20"))


def _encoded(raw: bytes, safe: str = "") -> str:
    return quote(raw, safe=safe)


def _plain_canonical_query(raw_query: str, exclude: str | None = None) -> str:
    pairs = []
    for part in raw_query.split("&"):
        if not part:
            continue
        key, _, value = part.partition("=")
        pairs.append((_decoded(key), _decoded(value)))
    skip = exclude.encode() if exclude is not None else None
    encoded = sorted((_encoded(k), _encoded(v)) for k, v in pairs if k != skip)
    return "&".join(f"{k}={v}" for k, v in encoded)


# Query text as clients send it: plain characters, escapes (upper and lower case, of
# unreserved characters too), "+", "=", "&", non-ASCII and undecodable bytes.
_PIECES = st.sampled_from(["a", "Z", "0", "-", "_", ".", "~", "/", "+", "%41", "%7e",
                           "%7E", "%2F", "%2f", "%20", "%", "%G1", "=", "&", " ", "é",
                           "\udcff", "X-Amz-Signature", "uploads", "*", "!"])
_TEXT = st.lists(_PIECES, max_size=12).map("".join)


@settings(max_examples=400, deadline=None)
@given(_TEXT)
def test_component_is_the_plain_decoding_and_encoding(text: str) -> None:
    decoded, encoded = query_component(text)
    assert decoded == _decoded(text)
    assert encoded == _encoded(_decoded(text))


@settings(max_examples=400, deadline=None)
@given(_TEXT, st.sampled_from([None, "X-Amz-Signature"]))
def test_canonical_query_is_the_plain_one(raw_query: str, exclude: str | None) -> None:
    assert canonical_query_string(raw_query, exclude=exclude) == _plain_canonical_query(
        raw_query, exclude)
    items = query_items(raw_query)
    assert canonical_query_string(items, exclude=exclude) == _plain_canonical_query(
        raw_query, exclude)
    assert query_pairs(items) == query_pairs(raw_query)


@settings(max_examples=400, deadline=None)
@given(_TEXT)
def test_uri_path_is_the_plain_one(text: str) -> None:
    raw_path = "/" + text
    plain = _encoded(unquote_to_bytes(raw_path.encode("utf-8", "surrogateescape")), "/")
    assert aws_uri_path(raw_path) == plain
    assert aws_uri_path("") == "/"


def test_request_view_parses_its_query_once() -> None:
    view = RequestView("GET", "/b/k", "a=1&b=%2F", {})
    assert view.query is view.query
    assert query_pairs(view.query) == [(b"a", b"1"), (b"b", b"/")]


def test_escaped_unreserved_characters_are_not_taken_as_plain() -> None:
    # "%41" is "A": its AWS encoding is "A", not the text as sent.
    assert query_component("%41") == (b"A", "A")
    assert canonical._UNRESERVED.fullmatch("%41") is None


def test_long_components_are_read_without_the_table() -> None:
    long_value = "%2F" * canonical.CACHED_TEXT_CHARS
    assert query_component(long_value) == (b"/" * canonical.CACHED_TEXT_CHARS,
                                           "%2F" * canonical.CACHED_TEXT_CHARS)
    before = canonical._cached_query_component.cache_info().currsize
    query_component("%2G" + long_value)
    assert canonical._cached_query_component.cache_info().currsize == before
    long_path = "/b/" + "%20" * canonical.CACHED_TEXT_CHARS
    assert aws_uri_path(long_path) == "/b/" + "%20" * canonical.CACHED_TEXT_CHARS
