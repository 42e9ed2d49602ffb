"""GetObjectAttributes: GET /bucket/key?attributes with `x-amz-object-attributes` naming
what to return (ETag, Checksum, ObjectParts, StorageClass, ObjectSize), paged parts by
`x-amz-max-parts` / `x-amz-part-number-marker`.

The router checks no action for this operation: AWS requires two (s3:GetObject and
s3:GetObjectAttributes, or their Version variants with a versionId), checked here.
"""

from __future__ import annotations

from collections.abc import Mapping

from objstore.crypto.customer_key import customer_key, key_for_object
from objstore.errors import S3Error
from objstore.s3.call import S3Call, S3Response
from objstore.s3.objects import read_version_header, request_headers, version_id_param
from objstore.s3.objects_xml import PartsPage, object_attributes_document
from objstore.s3.params import count_argument
from objstore.s3.xml import http_date

XML = "application/xml"
OBJECT_ATTRIBUTES = frozenset({"ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize"})
MAX_PARTS = 1000


def parse_object_attributes(header: str | None) -> frozenset[str]:
    names = [name.strip() for name in (header or "").split(",") if name.strip()]
    if not names:
        raise S3Error("InvalidArgument", "The x-amz-object-attributes header specifying the "
                      "attributes to be retrieved is either missing or empty",
                      ArgumentName="x-amz-object-attributes", ArgumentValue=header or "")
    unknown = [name for name in names if name not in OBJECT_ATTRIBUTES]
    if unknown:
        raise S3Error("InvalidArgument", "Invalid attribute name specified.",
                      ArgumentName="x-amz-object-attributes", ArgumentValue=unknown[0])
    return frozenset(names)


def parts_page(headers: Mapping[str, str]) -> PartsPage:
    """Paging of ObjectParts; max-parts above 1000 is capped at 1000, as ListParts does."""
    max_parts = count_argument(headers.get("x-amz-max-parts"), "x-amz-max-parts", MAX_PARTS)
    marker = count_argument(headers.get("x-amz-part-number-marker"),
                            "x-amz-part-number-marker", 0)
    return PartsPage(max_parts=min(max_parts, MAX_PARTS), part_number_marker=marker)


async def get_object_attributes(call: S3Call) -> S3Response:
    version_id = version_id_param(call)
    headers = request_headers(call)
    wanted = parse_object_attributes(headers.get("x-amz-object-attributes"))
    page = parts_page(headers)
    bucket, record = await call.services.objects.lookup(call.bucket, call.key, version_id)
    # An SSE-C object shows its attributes only with its key, as its HEAD.
    key_for_object(record.encryption_algorithm, record.encryption_params,
                   customer_key(headers))
    response_headers = {"Last-Modified": http_date(record.last_modified)}
    response_headers.update(read_version_header(bucket, record))
    body = object_attributes_document(record, wanted, page)
    return S3Response(headers=response_headers, body=body, content_type=XML)
