"""ListObjects (V1) and ListObjectsV2 handlers: query validation, opaque continuation
tokens, and the response document. Grouping rules live in engine/listing.py."""

from __future__ import annotations

import base64
import binascii

from objstore.engine.listing import list_grouped
from objstore.errors import S3Error
from objstore.meta.listing_queries import ListingEntry
from objstore.s3.call import S3Call, S3Response
from objstore.s3.listing_xml import list_objects_document
from objstore.s3.params import MAX_KEYS, encoding_type, max_keys


def encode_token(cursor: str) -> str:
    return base64.urlsafe_b64encode(b"v1:" + cursor.encode("utf-8")).decode()


def decode_token(token: str) -> str:
    try:
        raw = base64.urlsafe_b64decode(token.encode("ascii"))
        if not raw.startswith(b"v1:"):
            raise ValueError(token)
        return raw[3:].decode("utf-8")
    except (ValueError, binascii.Error, UnicodeError):
        raise S3Error("InvalidArgument", "The continuation token provided is incorrect",
                      ArgumentName="continuation-token", ArgumentValue=token) from None


async def list_objects(call: S3Call) -> S3Response:
    query = call.query
    version = 2 if query.get("list-type") == "2" else 1
    prefix = query.get("prefix", "")
    delimiter = query.get("delimiter", "")
    encoding = encoding_type(query)
    page_size = max_keys(query.get("max-keys"))
    if version == 2:
        token = query.get("continuation-token")
        start_after = decode_token(token) if token else query.get("start-after", "")
    else:
        start_after = query.get("marker", "")
    objects = call.services.objects

    async def fetch(p: str, after: str, limit: int) -> list[ListingEntry]:
        return await objects.list_page(call.bucket, prefix=p, start_after=after, limit=limit,
                                       delimiter=delimiter)

    await call.services.buckets.get(call.bucket)
    result = await list_grouped(
        fetch, prefix=prefix, delimiter=delimiter, start_after=start_after,
        max_keys=page_size, batch_size=max(1, min(page_size + 1, MAX_KEYS + 1)),
    )
    fields: dict[str, str] = {}
    if version == 1:
        fields["Marker"] = start_after
        if result.is_truncated and delimiter:
            fields["NextMarker"] = result.last_item
    else:
        if "continuation-token" in query:
            fields["ContinuationToken"] = query["continuation-token"]
        if result.is_truncated:
            fields["NextContinuationToken"] = encode_token(result.resume_after)
        if "start-after" in query:
            fields["StartAfter"] = query["start-after"]
        fields["KeyCount"] = str(len(result.contents) + len(result.common_prefixes))
    body = list_objects_document(
        bucket=call.bucket, version=version, prefix=prefix, delimiter=delimiter,
        max_keys=page_size if "max-keys" in query else MAX_KEYS,
        encoding_type=encoding, contents=result.contents,
        common_prefixes=result.common_prefixes, is_truncated=result.is_truncated,
        fields=fields, fetch_owner=version == 1 or query.get("fetch-owner") == "true",
    )
    return S3Response(body=body, content_type="application/xml")
