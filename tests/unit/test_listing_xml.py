"""The listing documents rendered as text (objstore/s3/listing_xml.py) are byte for byte
the documents the lxml tree built: the reference renderers below are the lxml code the
text renderers replaced, compared on random pages with awkward text (control characters,
CR, markup characters, non-BMP, U+FFFE), both encodings, owners and checksums."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from urllib.parse import quote

from hypothesis import given, settings
from hypothesis import strategies as st
from lxml import etree

from objstore.meta.listing_queries import ListingEntry, listed_checksum_algorithm
from objstore.meta.records import ObjectRecord
from objstore.s3 import listing_xml
from objstore.s3.listing_xml import VersionsListing
from objstore.s3.xml import iso8601, s3_root, serialize, sub_element
from objstore.utc_dates import END_STAMP, LAST_STAMP, utc_moment

Listed = ObjectRecord | ListingEntry


# -- the lxml renderers the text ones replaced (the reference) ----------------------------


def _encoder(encoding_type: str | None) -> Callable[[str], str]:
    return (lambda s: quote(s, safe="/")) if encoding_type == "url" else (lambda s: s)


def _contents(parent: etree._Element, record: Listed, fetch_owner: bool,
              encode: Callable[[str], str]) -> None:
    item = sub_element(parent, "Contents")
    sub_element(item, "Key", encode(record.key))
    sub_element(item, "LastModified", iso8601(record.last_modified))
    sub_element(item, "ETag", f'"{record.etag}"')
    sub_element(item, "Size", str(record.size))
    sub_element(item, "StorageClass", record.storage_class)
    algorithm = listed_checksum_algorithm(record)
    if algorithm:
        sub_element(item, "ChecksumAlgorithm", algorithm)
        if record.checksum_type:
            sub_element(item, "ChecksumType", record.checksum_type)
    if fetch_owner:
        owner = sub_element(item, "Owner")
        sub_element(owner, "ID", record.owner_id)
        sub_element(owner, "DisplayName", record.owner_name)


def reference_objects(*, bucket: str, version: int, prefix: str, delimiter: str,
                      max_keys: int, encoding_type: str | None, contents: Iterable[Listed],
                      common_prefixes: Iterable[str], is_truncated: bool,
                      fields: Mapping[str, str], fetch_owner: bool) -> bytes:
    encode = _encoder(encoding_type)
    root = s3_root("ListBucketResult")
    sub_element(root, "Name", bucket)
    sub_element(root, "Prefix", encode(prefix))
    if version == 1:
        sub_element(root, "Marker", encode(fields.get("Marker", "")))
        if "NextMarker" in fields:
            sub_element(root, "NextMarker", encode(fields["NextMarker"]))
    else:
        for name in ("ContinuationToken", "NextContinuationToken", "StartAfter"):
            if name in fields:
                value = fields[name]
                sub_element(root, name, encode(value) if name == "StartAfter" else value)
        sub_element(root, "KeyCount", fields["KeyCount"])
    sub_element(root, "MaxKeys", str(max_keys))
    if delimiter:
        sub_element(root, "Delimiter", encode(delimiter))
    if encoding_type:
        sub_element(root, "EncodingType", encoding_type)
    sub_element(root, "IsTruncated", "true" if is_truncated else "false")
    for record in contents:
        _contents(root, record, fetch_owner, encode)
    for common in common_prefixes:
        sub_element(sub_element(root, "CommonPrefixes"), "Prefix", encode(common))
    return serialize(root)


def reference_versions(listing: VersionsListing) -> bytes:
    encode = _encoder(listing.encoding_type)
    root = s3_root("ListVersionsResult")
    sub_element(root, "Name", listing.bucket)
    sub_element(root, "Prefix", encode(listing.prefix))
    sub_element(root, "KeyMarker", encode(listing.key_marker))
    sub_element(root, "VersionIdMarker", listing.version_id_marker)
    if listing.is_truncated:
        sub_element(root, "NextKeyMarker", encode(listing.next_key_marker))
        if listing.next_version_id_marker is not None:
            sub_element(root, "NextVersionIdMarker", listing.next_version_id_marker)
    sub_element(root, "MaxKeys", str(listing.max_keys))
    if listing.delimiter:
        sub_element(root, "Delimiter", encode(listing.delimiter))
    if listing.encoding_type:
        sub_element(root, "EncodingType", listing.encoding_type)
    sub_element(root, "IsTruncated", "true" if listing.is_truncated else "false")
    for record in listing.entries:
        item = sub_element(root, "DeleteMarker" if record.is_delete_marker else "Version")
        sub_element(item, "Key", encode(record.key))
        sub_element(item, "VersionId", record.version_id)
        sub_element(item, "IsLatest", "true" if record.is_latest else "false")
        sub_element(item, "LastModified", iso8601(record.last_modified))
        if not record.is_delete_marker:
            sub_element(item, "ETag", f'"{record.etag}"')
            sub_element(item, "Size", str(record.size))
            sub_element(item, "StorageClass", record.storage_class)
            algorithm = listed_checksum_algorithm(record)
            if algorithm:
                sub_element(item, "ChecksumAlgorithm", algorithm)
                if record.checksum_type:
                    sub_element(item, "ChecksumType", record.checksum_type)
        owner = sub_element(item, "Owner")
        sub_element(owner, "ID", record.owner_id)
        sub_element(owner, "DisplayName", record.owner_name)
    for prefix in listing.common_prefixes:
        sub_element(sub_element(root, "CommonPrefixes"), "Prefix", encode(prefix))
    return serialize(root)


# -- strategies --------------------------------------------------------------------------

# Text lxml can hold (no surrogates, no NUL: no stored key has either), with the
# characters that need care drawn often.
_AWKWARD = "&<>\"'\r\n\t\x01\x1f\x7f\x85\ufffe\uffff\u00e9\u4e2d\U0001f600/ %+"
texts = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
            max_size=20),
    st.text(st.sampled_from(_AWKWARD + "ab"), max_size=12),
)
stamps = st.one_of(
    st.floats(min_value=-1e12, max_value=END_STAMP * 2), st.just(float("nan")),
    st.sampled_from([0.0, 1.0, 1.0005, 1_700_000_000.9999, LAST_STAMP, END_STAMP]),
)


@st.composite
def entries(draw: st.DrawFn) -> ListingEntry:
    algorithm = draw(st.one_of(st.none(), st.sampled_from(["CRC32", "SHA256"]), texts))
    return ListingEntry(
        draw(texts), draw(st.one_of(st.just("null"), texts)),
        draw(st.integers(min_value=0, max_value=2**62)), draw(texts), draw(stamps),
        draw(st.booleans()), draw(st.booleans()), draw(texts), draw(texts),
        draw(st.sampled_from(["STANDARD", "GLACIER"])), algorithm,
        draw(st.one_of(st.none(), st.just("FULL_OBJECT"), st.just("COMPOSITE"))),
    )


encodings = st.sampled_from([None, "url"])


@settings(max_examples=150, deadline=None)
@given(version=st.sampled_from([1, 2]), prefix=texts, delimiter=texts,
       max_keys=st.integers(min_value=0, max_value=1000), encoding=encodings,
       contents=st.lists(entries(), max_size=6), common=st.lists(texts, max_size=4),
       truncated=st.booleans(), fetch_owner=st.booleans(),
       fields=st.dictionaries(st.sampled_from(["Marker", "NextMarker", "ContinuationToken",
                                               "NextContinuationToken", "StartAfter"]),
                              texts),
       bucket=texts)
def test_objects_document_is_the_lxml_document(
        version: int, prefix: str, delimiter: str, max_keys: int, encoding: str | None,
        contents: list[ListingEntry], common: list[str], truncated: bool,
        fetch_owner: bool, fields: dict[str, str], bucket: str) -> None:
    fields = {**fields, "KeyCount": str(len(contents) + len(common))}
    arguments = dict(bucket=bucket, version=version, prefix=prefix, delimiter=delimiter,
                     max_keys=max_keys, encoding_type=encoding, contents=contents,
                     common_prefixes=common, is_truncated=truncated, fields=fields,
                     fetch_owner=fetch_owner)
    assert listing_xml.list_objects_document(**arguments) == reference_objects(**arguments)


@settings(max_examples=150, deadline=None)
@given(prefix=texts, delimiter=texts, key_marker=texts, version_marker=texts,
       max_keys=st.integers(min_value=0, max_value=1000), encoding=encodings,
       listed=st.lists(entries(), max_size=6), common=st.lists(texts, max_size=4),
       truncated=st.booleans(), next_key=texts, next_version=st.one_of(st.none(), texts))
def test_versions_document_is_the_lxml_document(
        prefix: str, delimiter: str, key_marker: str, version_marker: str, max_keys: int,
        encoding: str | None, listed: list[ListingEntry], common: list[str],
        truncated: bool, next_key: str, next_version: str | None) -> None:
    listing = VersionsListing("b&<", prefix, delimiter, key_marker, version_marker, max_keys,
                              encoding, listed, common, truncated, next_key, next_version)
    assert listing_xml.list_versions_document(listing) == reference_versions(listing)


def test_full_records_render_as_their_entries() -> None:
    record = ObjectRecord(bucket="b", key="k&1", version_id="v", blob_id="x", size=3,
                          etag="e", last_modified=1.5, owner_id="o", owner_name="n",
                          checksums={"sha256": "x", "crc32": "y"}, checksum_type="COMPOSITE")
    listing = VersionsListing("b", "", "", "", "", 1000, None, [record])
    body = listing_xml.list_versions_document(listing)
    assert body == reference_versions(listing)
    assert b"<Key>k&amp;1</Key>" in body and b"<ChecksumAlgorithm>CRC32<" in body


def test_text_escapes_as_lxml_and_writes_references() -> None:
    assert listing_xml.text("a&b<c>d\re\nf\tg") == "a&amp;b&lt;c&gt;d&#13;e\nf\tg"
    assert listing_xml.text("x\x01\ufffey") == "x&#x1;&#xFFFE;y"
    assert listing_xml.text("") == ""


@settings(max_examples=2000, deadline=None)
@given(st.one_of(stamps, st.floats(min_value=0, max_value=END_STAMP),
                 st.integers(min_value=0, max_value=int(END_STAMP)).map(
                     lambda n: n + 0.9995)))
def test_iso8601_is_the_datetime_text(stamp: float) -> None:
    moment = utc_moment(stamp)
    expected = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    assert iso8601(stamp) == expected
