"""The two listing documents, ListBucketResult (ListObjects V1 and V2) and
ListVersionsResult, rendered as text.

A page holds up to 1000 entries of seven to eleven elements each. Built as an lxml tree,
one `SubElement` per element and a `strftime` per date, a page cost about 8 ms of the
reactor thread: more than the query and the HTTP exchange together. Here each entry is a
few string pieces joined once and encoded once, with exactly the bytes lxml wrote (a test
compares both on random entries and awkward text): the XML declaration with single
quotes, `&`, `<`, `>` and carriage return escaped in text (`&amp;` `&lt;` `&gt;`
`&#13;`), and each character XML 1.0 cannot carry written as a numeric character
reference (`&#x1;`), as AWS writes it (see http/error_xml.py `set_text`). An element with
empty text is written `<Tag></Tag>`, as lxml writes an element whose text is "".

Pure functions of plain data; no Twisted, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import quote

from objstore.meta.listing_queries import ListingEntry, listed_checksum_algorithm
from objstore.meta.records import ObjectRecord
from objstore.s3.xml import S3_NS, iso8601

_DECLARATION = "<?xml version='1.0' encoding='UTF-8'?>\n"
# A character outside XML 1.0's Char production: written as a character reference.
_NOT_XML_CHAR = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")

Listed = ObjectRecord | ListingEntry


def _reference(match: re.Match[str]) -> str:
    return f"&#x{ord(match.group()):X};"


def text(value: str) -> str:
    """`value` as element text, as lxml serializes it (see the module docstring)."""
    if value.isprintable():  # printable: all XML 1.0 characters, and no CR
        if "&" in value or "<" in value or ">" in value:
            return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        return value
    value = (value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
             .replace("\r", "&#13;"))
    return _NOT_XML_CHAR.sub(_reference, value)


def _element(tag: str, value: str) -> str:
    return f"<{tag}>{text(value)}</{tag}>"


def _encoder(encoding_type: str | None) -> Callable[[str], str]:
    """Keys and prefixes as the answer shows them: percent-encoded with encoding-type=url."""
    if encoding_type == "url":
        return lambda s: quote(s, safe="/")
    return lambda s: s


class _Memo:
    """Text of the parts of an entry that repeat across a page (owner, storage class,
    checksum names), rendered once per page."""

    def __init__(self) -> None:
        self.owners: dict[tuple[str, str], str] = {}
        self.tails: dict[tuple[str, str | None, str | None], str] = {}

    def owner(self, record: Listed) -> str:
        found = self.owners.get((record.owner_id, record.owner_name))
        if found is None:
            found = self.owners[(record.owner_id, record.owner_name)] = _owner(record)
        return found

    def tail(self, record: Listed) -> str:
        """StorageClass, then ChecksumAlgorithm and ChecksumType when listed."""
        algorithm = listed_checksum_algorithm(record)
        found = self.tails.get((record.storage_class, algorithm, record.checksum_type))
        if found is None:
            found = (f"<StorageClass>{text(record.storage_class)}</StorageClass>"
                     + _checksum(algorithm, record.checksum_type))
            self.tails[(record.storage_class, algorithm, record.checksum_type)] = found
        return found


def _checksum(algorithm: str | None, checksum_type: str | None) -> str:
    if not algorithm:
        return ""
    if checksum_type:
        return (f"<ChecksumAlgorithm>{text(algorithm)}</ChecksumAlgorithm>"
                f"<ChecksumType>{text(checksum_type)}</ChecksumType>")
    return f"<ChecksumAlgorithm>{text(algorithm)}</ChecksumAlgorithm>"


def _owner(record: Listed) -> str:
    return (f"<Owner><ID>{text(record.owner_id)}</ID>"
            f"<DisplayName>{text(record.owner_name)}</DisplayName></Owner>")


def _document(root: str, pieces: list[str]) -> bytes:
    return "".join((_DECLARATION, f'<{root} xmlns="{S3_NS}">', *pieces,
                    f"</{root}>")).encode("utf-8")


def _common_prefixes(prefixes: Iterable[str], encode: Callable[[str], str]) -> list[str]:
    return [f"<CommonPrefixes><Prefix>{text(encode(p))}</Prefix></CommonPrefixes>"
            for p in prefixes]


# -- ListBucketResult ------------------------------------------------------------------


def list_objects_document(
    *,
    bucket: str,
    version: int,
    prefix: str,
    delimiter: str,
    max_keys: int,
    encoding_type: str | None,
    contents: Iterable[Listed],
    common_prefixes: Iterable[str],
    is_truncated: bool,
    fields: Mapping[str, str],
    fetch_owner: bool,
) -> bytes:
    """ListBucketResult for V1 (fields: Marker, NextMarker) and V2 (fields: KeyCount,
    ContinuationToken, NextContinuationToken, StartAfter), in AWS's element order."""
    encode = _encoder(encoding_type)
    pieces = [_element("Name", bucket), _element("Prefix", encode(prefix))]
    if version == 1:
        pieces.append(_element("Marker", encode(fields.get("Marker", ""))))
        if "NextMarker" in fields:
            pieces.append(_element("NextMarker", encode(fields["NextMarker"])))
    else:
        for name in ("ContinuationToken", "NextContinuationToken", "StartAfter"):
            if name in fields:
                value = fields[name]
                pieces.append(_element(name, encode(value) if name == "StartAfter" else value))
        pieces.append(_element("KeyCount", fields["KeyCount"]))
    pieces.append(_element("MaxKeys", str(max_keys)))
    if delimiter:
        pieces.append(_element("Delimiter", encode(delimiter)))
    if encoding_type:
        pieces.append(_element("EncodingType", encoding_type))
    pieces.append(_element("IsTruncated", "true" if is_truncated else "false"))
    memo = _Memo()
    for record in contents:
        pieces.append(
            f"<Contents><Key>{text(encode(record.key))}</Key>"
            f"<LastModified>{iso8601(record.last_modified)}</LastModified>"
            f"<ETag>\"{text(record.etag)}\"</ETag><Size>{record.size}</Size>"
            f"{memo.tail(record)}{memo.owner(record) if fetch_owner else ''}</Contents>")
    pieces += _common_prefixes(common_prefixes, encode)
    return _document("ListBucketResult", pieces)


# -- ListVersionsResult ----------------------------------------------------------------


@dataclass(frozen=True)
class VersionsListing:
    bucket: str
    prefix: str
    delimiter: str
    key_marker: str
    version_id_marker: str
    max_keys: int
    encoding_type: str | None
    entries: Sequence[Listed] = field(default_factory=list)
    common_prefixes: list[str] = field(default_factory=list)
    is_truncated: bool = False
    next_key_marker: str = ""
    next_version_id_marker: str | None = None


def list_versions_document(listing: VersionsListing) -> bytes:
    """ListVersionsResult: Version and DeleteMarker entries interleaved in listing order
    (key ascending, newest first), then the CommonPrefixes."""
    encode = _encoder(listing.encoding_type)
    pieces = [
        _element("Name", listing.bucket), _element("Prefix", encode(listing.prefix)),
        _element("KeyMarker", encode(listing.key_marker)),
        _element("VersionIdMarker", listing.version_id_marker),
    ]
    if listing.is_truncated:
        pieces.append(_element("NextKeyMarker", encode(listing.next_key_marker)))
        if listing.next_version_id_marker is not None:
            pieces.append(_element("NextVersionIdMarker", listing.next_version_id_marker))
    pieces.append(_element("MaxKeys", str(listing.max_keys)))
    if listing.delimiter:
        pieces.append(_element("Delimiter", encode(listing.delimiter)))
    if listing.encoding_type:
        pieces.append(_element("EncodingType", listing.encoding_type))
    pieces.append(_element("IsTruncated", "true" if listing.is_truncated else "false"))
    memo = _Memo()
    for record in listing.entries:
        head = (f"<Key>{text(encode(record.key))}</Key>"
                f"<VersionId>{text(record.version_id)}</VersionId>"
                f"<IsLatest>{'true' if record.is_latest else 'false'}</IsLatest>"
                f"<LastModified>{iso8601(record.last_modified)}</LastModified>")
        if record.is_delete_marker:
            pieces.append(f"<DeleteMarker>{head}{memo.owner(record)}</DeleteMarker>")
        else:
            pieces.append(
                f"<Version>{head}<ETag>\"{text(record.etag)}\"</ETag>"
                f"<Size>{record.size}</Size>{memo.tail(record)}{memo.owner(record)}</Version>")
    pieces += _common_prefixes(listing.common_prefixes, encode)
    return _document("ListVersionsResult", pieces)
