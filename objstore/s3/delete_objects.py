"""DeleteObjects: POST /bucket?delete with a Delete document naming up to 1000 keys.

Request-level problems (no Content-MD5 or x-amz-checksum-* header, bad XML, more than 1000
keys, a missing bucket) fail the whole request; everything about one key (authorization as
DeleteObject on that key's ARN, a bad version id, an object lock refusal, a failed delete)
becomes an <Error> entry of a 200 DeleteResult, as on AWS. A key or version that does not
exist counts as deleted. Each key is deleted exactly as DeleteObject deletes it (a delete
marker on a versioned bucket, the named version with a VersionId, the lock rules and the
request's x-amz-bypass-governance-retention header), the keys the caller may delete as
one batch (engine `ObjectService.delete_many`: one transaction for the versions removed).
The router checks no action for this operation: every key is authorized here, on its own.
"""

from __future__ import annotations

from collections.abc import Iterable

from twisted.logger import Logger
from twisted.python.failure import Failure

from objstore.engine.names import key_problem
from objstore.engine.objects import DeleteOutcome, DeleteRequest
from objstore.errors import S3Error, s3_error_of
from objstore.s3.access import permits
from objstore.s3.call import S3Call, S3Response
from objstore.s3.lock_headers import bypass_requested, has_integrity_header
from objstore.s3.objects import request_headers
from objstore.s3.objects_xml import (
    DeleteEntry,
    DeleteEntryResult,
    delete_result_document,
    parse_delete_request,
)
from objstore.s3.route_needs import delete_key_need

log = Logger()
XML = "application/xml"


async def delete_objects(call: S3Call) -> S3Response:
    headers = request_headers(call)
    if not has_integrity_header(headers):
        raise S3Error("InvalidRequest", "Missing required header for this request: "
                      "Content-MD5 OR x-amz-checksum-*")
    await call.services.buckets.get(call.bucket)
    request = parse_delete_request(call.body())
    bypass = bypass_requested(headers)
    refused: dict[int, Exception] = {}
    allowed: list[int] = []
    checked = not call.principal.is_root  # `permits` allows root whatever the key
    for index, entry in enumerate(request.entries):
        try:
            if checked and not await permits(call, delete_key_need(call.bucket, entry.key,
                                                                   entry.version_id)):
                raise S3Error("AccessDenied")
            _check_entry(entry)
        except Exception as error:
            refused[index] = error
            continue
        allowed.append(index)
    done = await _delete_allowed(call, [request.entries[index] for index in allowed], bypass)
    results = dict(zip(allowed, done, strict=True))
    answers: Iterable[tuple[DeleteEntry, DeleteOutcome | Exception]] = (
        (entry, refused.get(index) or results[index])
        for index, entry in enumerate(request.entries))
    if request.quiet:  # only the errors are listed: no entry built for a key deleted
        answers = ((entry, answer) for entry, answer in answers
                   if isinstance(answer, Exception))
    body = delete_result_document((_entry_result(call, entry, answer)
                                   for entry, answer in answers), quiet=request.quiet)
    return S3Response(body=body, content_type=XML)


async def _delete_allowed(call: S3Call, entries: list[DeleteEntry],
                          bypass: bool) -> list[DeleteOutcome | Exception]:
    """The deletes of the keys the caller may delete, as one batch (engine
    `delete_many`); what fails the whole batch is every key's answer."""
    if not entries:
        return []
    try:
        return await call.services.objects.delete_many(
            call.caller, call.bucket, [DeleteRequest(entry.key, entry.version_id)
                                       for entry in entries], bypass_governance=bypass)
    except Exception as error:
        return [error] * len(entries)


def _entry_result(call: S3Call, entry: DeleteEntry,
                  done: DeleteOutcome | Exception) -> DeleteEntryResult:
    if isinstance(done, S3Error):
        return DeleteEntryResult(entry.key, entry.version_id, done.code, done.message)
    if isinstance(done, Exception):
        failed = s3_error_of(done)  # a full disk or an unreachable database: its own code
        if failed is None:
            log.failure("deleting {bucket}/{key} in DeleteObjects", Failure(done),
                        bucket=call.bucket, key=entry.key)
            failed = S3Error("InternalError")
        return DeleteEntryResult(entry.key, entry.version_id, failed.code, failed.message)
    if not done.delete_marker:
        return DeleteEntryResult(entry.key, entry.version_id)
    return DeleteEntryResult(entry.key, entry.version_id, delete_marker=True,
                             delete_marker_version_id=done.version_id)


def _check_entry(entry: DeleteEntry) -> None:
    if entry.conditional:
        raise S3Error("NotImplemented", "Conditional deletes (ETag, LastModifiedTime, Size) "
                      "are not implemented.")
    if entry.version_id == "":
        raise S3Error("InvalidArgument", "Version id cannot be the empty string")
    problem = key_problem(entry.key)
    if problem is not None:
        raise S3Error(problem[0], problem[1])
