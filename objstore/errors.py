"""The one error table: every S3 error code and its HTTP status, plus the admin and cluster
error types.

Handlers raise `S3Error("NoSuchKey", key=...)` or `AdminError(404, "NotFound", "...")`
anywhere; the API layers render them once (XML or JSON). No other module maps codes to
statuses.

Below the APIs, where neither format is known, a state of the server that refuses a request
is a `ServerCondition`: a full disk (InsufficientStorage, 507) or an unreachable database
(ServiceUnavailable, 503). `condition_of` is the one rule that recognises them, including
the operating system's own ENOSPC and EDQUOT; `s3_error_of` and `admin_error_of` are how
the APIs' last-resort handlers turn any exception into their error, so that such a state is
never answered as InternalError, whichever layer found it.
"""

from __future__ import annotations

import errno

# code -> (HTTP status, default message)
S3_ERRORS: dict[str, tuple[int, str]] = {
    "AccessControlListNotSupported": (400, "The bucket does not allow ACLs"),
    "AccessDenied": (403, "Access Denied"),
    "AuthorizationHeaderMalformed": (400, "The authorization header is malformed."),
    "AuthorizationQueryParametersError": (400, "Error parsing the query authorization parameters."),
    "BadRequest": (400, "Bad Request"),
    "BadDigest": (400, "The Content-MD5 or checksum you specified did not match what we received."),
    "BucketAlreadyExists": (409, "The requested bucket name is not available."),
    "BucketAlreadyOwnedByYou": (409, "Your previous request to create the named bucket succeeded and you already own it."),  # noqa: E501
    "BucketNotEmpty": (409, "The bucket you tried to delete is not empty."),
    "CORSResponse": (403, "CORS is not enabled for this bucket."),
    "ConditionalRequestConflict": (409, "A conflicting operation occurred. Retry the request."),
    "EntityTooLarge": (400, "Your proposed upload exceeds the maximum allowed size."),
    "EntityTooSmall": (400, "Your proposed upload is smaller than the minimum allowed object size."),  # noqa: E501
    "IllegalLocationConstraintException": (400, "The location constraint is not valid for this endpoint."),  # noqa: E501
    "IllegalVersioningConfigurationException": (400, "The versioning configuration specified in the request is invalid."),  # noqa: E501
    "IncompleteBody": (400, "You did not provide the number of bytes specified by the Content-Length HTTP header."),  # noqa: E501
    "InsufficientStorage": (507, "Not enough storage space to complete the request."),
    "InternalError": (500, "We encountered an internal error. Please try again."),
    "InvalidAccessKeyId": (403, "The AWS access key Id you provided does not exist in our records."),  # noqa: E501
    "InvalidArgument": (400, "Invalid Argument"),
    "InvalidBucketName": (400, "The specified bucket is not valid."),
    "InvalidBucketState": (409, "The request is not valid with the current state of the bucket."),  # noqa: E501
    "InvalidDigest": (400, "The Content-MD5 you specified is not valid."),
    "InvalidEncryptionAlgorithmError": (400, "The encryption request you specified is not valid."),  # noqa: E501
    "InvalidLocationConstraint": (400, "The specified location constraint is not valid."),
    "InvalidObjectState": (403, "The operation is not valid for the current state of the object."),  # noqa: E501
    "InvalidPolicyDocument": (400, "The content of the form does not meet the conditions specified in the policy document."),  # noqa: E501
    "InvalidPart": (400, "One or more of the specified parts could not be found."),
    "InvalidPartOrder": (400, "The list of parts was not in ascending order."),
    "InvalidPartNumber": (416, "The requested partnumber is not satisfiable"),
    "IncorrectNumberOfFilesInPostRequest": (400, "POST requires exactly one file upload per request."),  # noqa: E501
    "InvalidRange": (416, "The requested range is not satisfiable"),
    "InvalidRequest": (400, "Invalid Request"),
    "InvalidRetentionPeriod": (400, "The retention period specified is not valid."),
    "InvalidStorageClass": (400, "The storage class you specified is not valid."),
    "InvalidTag": (400, "The tag provided was not a valid tag."),
    "InvalidURI": (400, "Couldn't parse the specified URI."),
    "KeyTooLongError": (400, "Your key is too long."),
    "KMS.NotFoundException": (400, "Invalid keyId."),  # an SSE-KMS key id objstore does not hold
    "MalformedACLError": (400, "The XML you provided was not well-formed or did not validate against our published schema."),  # noqa: E501
    "MalformedPOSTRequest": (400, "The body of your POST request is not well-formed multipart/form-data."),  # noqa: E501
    "MalformedPolicy": (400, "Policies must be valid JSON and the first byte must be '{'"),
    "MalformedTrailerError": (400, "The request contained trailing data that was not well-formed."),  # noqa: E501
    "MalformedXML": (400, "The XML you provided was not well-formed or did not validate against our published schema."),  # noqa: E501
    "MaxMessageLengthExceeded": (400, "Your request was too big."),
    "MaxPostPreDataLengthExceededError": (400, "Your POST request fields preceding the upload file were too large."),  # noqa: E501
    "MetadataTooLarge": (400, "Your metadata headers exceed the maximum allowed metadata size."),
    "MethodNotAllowed": (405, "The specified method is not allowed against this resource."),
    "MissingContentLength": (411, "You must provide the Content-Length HTTP header."),
    "MissingRequestBodyError": (400, "Request Body is empty."),
    "MissingSecurityHeader": (400, "Your request is missing a required header."),
    "NoSuchBucket": (404, "The specified bucket does not exist."),
    "NoSuchCORSConfiguration": (404, "The CORS configuration does not exist"),
    "NoSuchBucketPolicy": (404, "The bucket policy does not exist"),
    "NoSuchPublicAccessBlockConfiguration": (404, "The public access block configuration was not found"),  # noqa: E501
    "NoSuchKey": (404, "The specified key does not exist."),
    "NoSuchLifecycleConfiguration": (404, "The lifecycle configuration does not exist."),
    "ReplicationConfigurationNotFoundError": (404, "The replication configuration was not found."),  # noqa: E501
    "NoSuchObjectLockConfiguration": (404, "The specified object does not have a ObjectLock configuration"),  # noqa: E501
    "NoSuchTagSet": (404, "The TagSet does not exist"),
    "NoSuchUpload": (404, "The specified multipart upload does not exist."),
    "NoSuchVersion": (404, "The specified version does not exist."),
    "NotImplemented": (501, "A header you provided implies functionality that is not implemented."),  # noqa: E501
    "NotModified": (304, "Not Modified"),
    "OwnershipControlsNotFoundError": (404, "The bucket ownership controls were not found"),
    "InvalidBucketAclWithObjectOwnership": (400, "Bucket cannot have ACLs set with ObjectOwnership's BucketOwnerEnforced setting"),  # noqa: E501
    "ObjectLockConfigurationNotFoundError": (404, "Object Lock configuration does not exist for this bucket"),  # noqa: E501
    "PreconditionFailed": (412, "At least one of the preconditions you specified did not hold."),
    "QuotaExceeded": (403, "The bucket quota would be exceeded by this request."),
    "RequestHeaderSectionTooLarge": (400, "Your request header section exceeds the maximum allowed size."),  # noqa: E501
    "RequestIsNotMultiPartContent": (400, "Bucket POST must be of the enclosure-type multipart/form-data."),  # noqa: E501
    "RequestTimeTooSkewed": (403, "The difference between the request time and the server's time is too large."),  # noqa: E501
    "RequestTimeout": (400, "Your socket connection to the server was not read from or written to within the timeout period."),  # noqa: E501
    "ServerSideEncryptionConfigurationNotFoundError": (404, "The server side encryption configuration was not found"),  # noqa: E501
    "ServiceUnavailable": (503, "Please reduce your request rate."),
    "SignatureDoesNotMatch": (403, "The request signature we calculated does not match the signature you provided. Check your key and signing method."),  # noqa: E501
    "SlowDown": (503, "Please reduce your request rate."),
    "UnexpectedContent": (400, "This request does not support content."),
    "UserKeyMustBeSpecified": (400, "The bucket POST must contain the specified field name. If it is specified, check the order of the fields."),  # noqa: E501
    "XAmzContentSHA256Mismatch": (400, "The provided 'x-amz-content-sha256' header does not match what was computed."),  # noqa: E501
}

RETRY_AFTER_SECONDS = 5


def s3_status(code: str) -> int:
    return S3_ERRORS.get(code, (500, ""))[0]


class S3Error(Exception):
    """An S3 error response. `fields` become extra XML elements (Key, BucketName, ...);
    `headers` are added to the response (e.g. x-amz-delete-marker, Content-Range)."""

    def __init__(
        self,
        code: str,
        message: str | None = None,
        *,
        headers: dict[str, str] | None = None,
        **fields: str,
    ) -> None:
        if code not in S3_ERRORS:
            raise ValueError(f"unknown S3 error code {code!r}")
        status, default = S3_ERRORS[code]
        self.code = code
        self.status = status
        self.message = message or default
        self.fields = fields
        self.headers = dict(headers or {})
        super().__init__(f"{code}: {self.message}")


# Admin JSON errors: error code -> status
ADMIN_ERRORS: dict[str, int] = {
    "BadRequest": 400,
    "Unauthorized": 401,  # GET /admin/metrics without its bearer token ([metrics])
    "AccessDenied": 403,
    # Authentication failures keep the S3 code, so that tools can tell them apart.
    "InvalidAccessKeyId": 403,
    "RequestTimeTooSkewed": 403,
    "SignatureDoesNotMatch": 403,
    "NotFound": 404,
    "MethodNotAllowed": 405,
    "Conflict": 409,
    "PayloadTooLarge": 413,
    "InternalError": 500,
    "NotImplemented": 501,  # a maintenance-job type this build can not run yet
    "BadGateway": 502,  # a peer did not answer a proxied per-node view (node=<peer>)
    "ServiceUnavailable": 503,
    "SlowDown": 503,  # rate limit ([server.limits] rate_limit_*)
    "InsufficientStorage": 507,  # the data volume is full ([storage] min_free_bytes)
}


class AdminError(Exception):
    """An admin API error, rendered as JSON {"error": code, "message": message}."""

    def __init__(self, code: str, message: str) -> None:
        if code not in ADMIN_ERRORS:
            raise ValueError(f"unknown admin error code {code!r}")
        self.code = code
        self.status = ADMIN_ERRORS[code]
        self.message = message
        super().__init__(f"{code}: {message}")


# -- states of the server, found below the APIs ---------------------------------------------

# InternalError: stored bytes that fail their authentication (crypto/packages.py): a 500
# logged in one line, never wrong bytes and never a traceback.
CONDITION_CODES = ("InsufficientStorage", "ServiceUnavailable", "InternalError")
_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
DISK_FULL_MESSAGE = "Not enough storage space to complete the request; free space, then retry."


class ServerCondition(Exception):
    """A state of this server that refuses the request: neither a fault of the request nor
    a bug. Raised where it is found (the metadata store's retry, the blob writer); each API
    renders it in its own format with `code`, one of CONDITION_CODES."""

    def __init__(self, code: str, message: str) -> None:
        if code not in CONDITION_CODES:
            raise ValueError(f"not a server condition: {code!r}")
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}")


def storage_full(message: str = DISK_FULL_MESSAGE) -> ServerCondition:
    return ServerCondition("InsufficientStorage", message)


def is_disk_full(error: BaseException) -> bool:
    """ENOSPC or EDQUOT from the operating system (a write, an fsync, a rename)."""
    return isinstance(error, OSError) and error.errno in _FULL_ERRNOS


def condition_of(error: BaseException) -> ServerCondition | None:
    """The server condition `error` is, or was caused by; None for anything else."""
    seen: BaseException | None = error
    for _ in range(4):  # a condition wrapped by a layer or two (`raise ... from`)
        if seen is None:
            return None
        if isinstance(seen, ServerCondition):
            return seen
        if is_disk_full(seen):
            return storage_full()
        seen = seen.__cause__
    return None


def s3_error_of(error: BaseException) -> S3Error | None:
    """`error` as the S3 error to answer; None when it is a bug (answer InternalError and
    log it with its traceback)."""
    if isinstance(error, S3Error):
        return error
    condition = condition_of(error)
    if condition is None:
        return None
    return S3Error(condition.code, condition.message)


def admin_error_of(error: BaseException) -> AdminError | None:
    """`error` as the admin API's error; None when it is a bug."""
    if isinstance(error, AdminError):
        return error
    condition = condition_of(error)
    if condition is None:
        return None
    return AdminError(condition.code, condition.message)
