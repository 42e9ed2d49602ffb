"""Bucket notification configuration of the S3 API: Put/GetBucketNotificationConfiguration
(PUT/GET /bucket?notification). The body is parsed (`notification_xml`) and validated
(`notify/rules.validate`: events, overlaps, destinations) before anything is stored; a GET
of a bucket without one answers the empty configuration, as AWS."""

from __future__ import annotations

from objstore.errors import S3Error
from objstore.notify.configs import NotificationConfigService
from objstore.notify.rules import NotificationConfiguration
from objstore.s3.call import S3Call, S3Response
from objstore.s3.notification_xml import notification_document, parse_notification

XML = "application/xml"


def _service(call: S3Call) -> NotificationConfigService:
    service = call.services.notifications
    if service is None:
        raise S3Error("NotImplemented", "Bucket notifications are not available here.")
    return service


async def put_bucket_notification(call: S3Call) -> S3Response:
    config = parse_notification(call.body())
    await _service(call).put(call.caller, call.bucket, config)
    return S3Response()


async def get_bucket_notification(call: S3Call) -> S3Response:
    service = call.services.notifications
    if service is None:
        await call.services.bucket_config.get(call.bucket)
        config = NotificationConfiguration()
    else:
        config = await service.get(call.bucket)
    return S3Response(body=notification_document(config), content_type=XML)


__all__ = ["get_bucket_notification", "put_bucket_notification"]
