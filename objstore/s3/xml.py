"""S3 XML documents: rendering responses and parsing request bodies (lxml).

Any text can be rendered. An S3 key may hold characters that XML 1.0 cannot carry (U+0001
to U+001F but tab, newline and carriage return; U+FFFE, U+FFFF): AWS stores such keys and
writes each of those characters as a numeric character reference (`&#x1;`), which strict
XML parsers refuse; clients that list such keys ask for `encoding-type=url` (the AWS SDKs
do for object listings). `sub_element` does the same, so no key, prefix or echoed value
can fail a response.

Pure functions of plain data; no Twisted. Request parsers enforce a size limit and refuse
DTDs and entities (no XXE), raising S3Error("MalformedXML") on anything unexpected.
"""

from __future__ import annotations

import datetime
import functools
import math
from collections.abc import Iterable
from functools import lru_cache

from lxml import etree

from objstore.errors import S3Error
from objstore.http.error_xml import serialize, sub_element
from objstore.utc_dates import FIRST_STAMP, LAST_STAMP, clamped, utc_moment

S3_NS = "http://s3.amazonaws.com/doc/2006-03-01/"
MAX_XML_BYTES = 1024 * 1024
# No entities, no network, no DTD. Documents are read as UTF-8 whatever they declare (every
# SDK sends UTF-8; anything else is MalformedXML): the parsers' refusal of "<!DOCTYPE" and
# "<!ENTITY" in the raw bytes is then complete, where a UTF-16 document would hide them.
SAFE_PARSER = etree.XMLParser(
    resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False,
    remove_blank_text=True, encoding="utf-8",
)


def iso8601(timestamp: float) -> str:
    """S3's timestamp format in XML: 2006-02-03T16:45:09.000Z (milliseconds truncated).

    The moment `utc_moment` gives (clamped, rounded to the microsecond half to even as
    `datetime.fromtimestamp` rounds), put together from remembered pieces: a listing page
    shows 1000 dates, and a `datetime` with `strftime` (or formatted integers) cost
    microseconds each."""
    if not FIRST_STAMP <= timestamp <= LAST_STAMP:  # NaN too
        timestamp = clamped(timestamp)
    frac, whole = math.modf(timestamp)
    micros = round(frac * 1e6)
    seconds = int(whole)
    if micros >= 1_000_000:
        seconds, micros = seconds + 1, micros - 1_000_000
    day, second = divmod(seconds, 86400)
    return (_day_text(day) + _HOUR_MINUTE[second // 60] + _SECOND[second % 60]
            + _MILLIS[micros // 1000])


@functools.lru_cache(maxsize=4096)
def _day_text(day: int) -> str:
    """YYYY-MM-DD of the day `day` days after 1970-01-01."""
    return datetime.date.fromordinal(_EPOCH_ORDINAL + day).isoformat()


_HOUR_MINUTE = tuple(f"T{m // 60:02d}:{m % 60:02d}:" for m in range(1440))
_SECOND = tuple(f"{s:02d}" for s in range(60))
_MILLIS = tuple(f".{ms:03d}Z" for ms in range(1000))
_EPOCH_ORDINAL = datetime.date(1970, 1, 1).toordinal()


@lru_cache(maxsize=4096)  # Last-Modified of the objects read most: formatted once each
def http_date(timestamp: float) -> str:
    moment = utc_moment(timestamp)
    return moment.strftime("%a, %d %b %Y %H:%M:%S GMT")


def s3_root(tag: str) -> etree._Element:
    """The root element of a response document, in the S3 namespace."""
    return etree.Element(tag, nsmap={None: S3_NS})


def list_buckets_document(
    owner_id: str, owner_name: str, buckets: Iterable[tuple[str, float, str]],
    continuation_token: str | None = None, prefix: str | None = None,
) -> bytes:
    root = s3_root("ListAllMyBucketsResult")
    owner = sub_element(root, "Owner")
    sub_element(owner, "ID", owner_id)
    sub_element(owner, "DisplayName", owner_name)
    container = sub_element(root, "Buckets")
    for name, created_at, region in buckets:
        bucket = sub_element(container, "Bucket")
        sub_element(bucket, "Name", name)
        sub_element(bucket, "CreationDate", iso8601(created_at))
        sub_element(bucket, "BucketRegion", region)
    if continuation_token:
        sub_element(root, "ContinuationToken", continuation_token)
    if prefix is not None:
        sub_element(root, "Prefix", prefix)
    return serialize(root)


def location_document(region: str) -> bytes:
    root = s3_root("LocationConstraint")
    if region != "us-east-1":
        root.text = region
    return serialize(root)


def parse_document(
    body: bytes, expected_root: str, *, max_bytes: int = MAX_XML_BYTES
) -> etree._Element:
    """Parse a request body whose root element must be `expected_root` (namespace ignored)."""
    if len(body) > max_bytes:
        raise S3Error("MalformedXML", "The XML document is too large.")
    if b"<!DOCTYPE" in body or b"<!ENTITY" in body:
        raise S3Error("MalformedXML", "DTDs and entities are not accepted.")
    try:
        root = etree.fromstring(body, SAFE_PARSER)
    except etree.XMLSyntaxError as exc:
        raise S3Error("MalformedXML") from exc
    if etree.QName(root).localname != expected_root:
        raise S3Error("MalformedXML", f"Expected a {expected_root} document.")
    return root


def child_text(element: etree._Element, name: str) -> str | None:
    for child in element:
        if isinstance(child.tag, str) and etree.QName(child).localname == name:
            return child.text or ""
    return None


def parse_create_bucket(body: bytes) -> str | None:
    """The LocationConstraint of a CreateBucketConfiguration body (None when absent)."""
    if not body.strip():
        return None
    root = parse_document(body, "CreateBucketConfiguration")
    return child_text(root, "LocationConstraint")
