"""Replication operations of the S3 API: Put/Get/DeleteBucketReplication
(PUT/GET/DELETE /bucket?replication), and the x-amz-replication-status header of GET/HEAD.

The body is parsed before anything is looked up; the service checks versioning and the
credential reference (`replication/service.py`). A node built without the replication
service (in-memory tests) answers 501 as before.
"""

from __future__ import annotations

from objstore.errors import S3Error
from objstore.meta.records import ObjectRecord
from objstore.replication.service import ReplicationConfigService
from objstore.s3.call import S3Call, S3Response
from objstore.s3.replication_xml import parse_replication, replication_document

XML = "application/xml"


def _service(call: S3Call) -> ReplicationConfigService:
    service = call.services.replication
    if service is None:
        raise S3Error("NotImplemented")
    return service


async def put_replication(call: S3Call) -> S3Response:
    service = _service(call)
    config = parse_replication(call.body())
    await service.put(call.caller, call.bucket, config)
    return S3Response()


async def get_replication(call: S3Call) -> S3Response:
    config = await _service(call).get(call.bucket)
    return S3Response(body=replication_document(config), content_type=XML)


async def delete_replication(call: S3Call) -> S3Response:
    await _service(call).delete(call.caller, call.bucket)
    return S3Response(status=204)


def replication_header(record: ObjectRecord) -> dict[str, str]:
    """x-amz-replication-status of an object that has one."""
    if record.replication_status:
        return {"x-amz-replication-status": record.replication_status}
    return {}


__all__ = ["delete_replication", "get_replication", "put_replication", "replication_header"]
