"""The POST policy of a browser form upload (S3 POST Object): who signed it and whether
the form obeys it.

`parse_form_auth` reads the signing fields (SigV4: x-amz-algorithm, x-amz-credential,
x-amz-date, x-amz-signature; SigV2: AWSAccessKeyId, signature; both: policy) without any
secret; `verify_form_signature` checks the signature of the base64 policy against the
secret key in constant time (SigV4: HMAC-SHA256 with the day's signing key, hex; SigV2:
HMAC-SHA1, base64). `parse_policy` decodes the policy (base64 JSON with `expiration` and
`conditions`), and `check_policy` enforces it as AWS does: not expired, every condition
holds (exact match as {"field": "value"} or ["eq", "$field", "value"], "starts-with",
"content-length-range", the bucket), and every form field but the exempt ones is named by
some condition.

Refusals are S3Errors with AWS's codes: InvalidPolicyDocument for a policy that can not be
read, AccessDenied "Invalid according to Policy: ..." for a form it does not allow,
EntityTooSmall / EntityTooLarge for the content-length-range, InvalidArgument for a
missing signing field. Pure: no I/O, no Twisted, never a secret in a message.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from objstore.errors import S3Error
from objstore.http.sigv4.canonical import (
    ALGORITHM,
    HEX64,
    SERVICE,
    TERMINATOR,
    as_utc,
    derive_signing_key,
    parse_amz_date,
)

SIGV2 = "AWS"
# Fields no condition needs to name (AWS: the signature, the file, the policy and any
# x-ignore-* field; the SigV2 signing fields likewise).
_EXEMPT = frozenset({"x-amz-signature", "file", "policy", "signature", "awsaccesskeyid"})
MAX_POLICY_BYTES = 20 * 1024


@dataclass(frozen=True)
class FormAuth:
    """Who claims to have signed a form's policy, parsed without any secret."""

    version: str  # sigv4.ALGORITHM or SIGV2
    access_key: str
    policy_b64: str
    signature: str = ""
    scope_date: str = ""
    region: str = ""
    service: str = ""
    amz_date: str = ""


@dataclass(frozen=True)
class Policy:
    expiration: datetime
    conditions: tuple[Any, ...]


def _missing(name: str) -> S3Error:
    return S3Error("InvalidArgument", f"Bucket POST must contain a field named '{name}'.  If "
                                      "it is specified, please check the order of the fields.",
                   ArgumentName=name)


def parse_form_auth(fields: Mapping[str, str]) -> FormAuth | None:
    """The signing claims of a form (field names lower-case); None for an unsigned form."""
    algorithm = fields.get("x-amz-algorithm")
    if algorithm is not None:
        if algorithm != ALGORITHM:
            raise S3Error("InvalidArgument", "Only AWS4-HMAC-SHA256 is supported for "
                                             "x-amz-algorithm.", ArgumentName="x-amz-algorithm")
        for name in ("x-amz-credential", "x-amz-date", "x-amz-signature", "policy"):
            if not fields.get(name):
                raise _missing(name)
        parts = fields["x-amz-credential"].rsplit("/", 4)
        if len(parts) != 5 or not all(parts) or parts[4] != TERMINATOR:
            raise S3Error("InvalidArgument", "The x-amz-credential is mal-formed.",
                          ArgumentName="x-amz-credential")
        if HEX64.fullmatch(fields["x-amz-signature"]) is None:
            raise S3Error("SignatureDoesNotMatch")
        return FormAuth(ALGORITHM, parts[0], fields["policy"], fields["x-amz-signature"].lower(),
                        parts[1], parts[2], parts[3], fields["x-amz-date"])
    if "awsaccesskeyid" in fields or "signature" in fields:
        for name in ("awsaccesskeyid", "signature", "policy"):
            if not fields.get(name):
                raise _missing({"awsaccesskeyid": "AWSAccessKeyId"}.get(name, name))
        return FormAuth(SIGV2, fields["awsaccesskeyid"], fields["policy"], fields["signature"])
    return None


def check_form_scope(auth: FormAuth, allowed_regions: Collection[str]) -> None:
    """A SigV4 credential scope this server answers for, dated like x-amz-date."""
    if auth.version != ALGORITHM:
        return
    amz_date = parse_amz_date(auth.amz_date)
    if amz_date is None or auth.scope_date != auth.amz_date[:8]:
        raise S3Error("InvalidArgument", "The x-amz-date is not valid for the credential.",
                      ArgumentName="x-amz-date")
    if auth.region not in allowed_regions:
        raise S3Error("AuthorizationQueryParametersError",
                      f"the region '{auth.region}' is wrong; expecting "
                      f"'{sorted(allowed_regions)[0] if allowed_regions else ''}'")
    if auth.service != SERVICE:
        raise S3Error("InvalidArgument", "The credential's service must be s3.",
                      ArgumentName="x-amz-credential")


def form_signature(auth: FormAuth, secret_key: str) -> str:
    """The signature of the form's policy under `secret_key` (for tests and our tools)."""
    if auth.version == ALGORITHM:
        key = derive_signing_key(secret_key, auth.scope_date, auth.region, auth.service)
        return hmac.new(key, auth.policy_b64.encode("utf-8"), hashlib.sha256).hexdigest()
    digest = hmac.new(secret_key.encode("utf-8"), auth.policy_b64.encode("utf-8"),
                      hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def verify_form_signature(auth: FormAuth, secret_key: str) -> None:
    expected = form_signature(auth, secret_key).encode("ascii")
    claimed = auth.signature.strip().encode("utf-8", "replace")
    if not hmac.compare_digest(expected, claimed):
        raise S3Error("SignatureDoesNotMatch", "The request signature we calculated does not "
                                               "match the signature you provided. Check your "
                                               "key and signing method.")


def _invalid(message: str) -> S3Error:
    return S3Error("InvalidPolicyDocument", f"Invalid Policy: {message}")


def parse_policy(policy_b64: str) -> Policy:
    if len(policy_b64) > MAX_POLICY_BYTES:
        raise _invalid("Policy too large.")
    try:
        document = json.loads(base64.b64decode(policy_b64.strip(), validate=True))
    except (binascii.Error, ValueError, UnicodeDecodeError, RecursionError):
        raise _invalid("Invalid JSON.") from None
    if not isinstance(document, dict):
        raise _invalid("Invalid JSON.")
    expiration = document.get("expiration")
    if not isinstance(expiration, str):
        raise _invalid("Policy missing expiration.")
    try:
        moment = as_utc(datetime.fromisoformat(expiration.replace("Z", "+00:00")))
    except ValueError:
        raise _invalid("Invalid 'expiration' value: '" + expiration[:64] + "'") from None
    conditions = document.get("conditions")
    if not isinstance(conditions, list):
        raise _invalid("Policy missing conditions.")
    for condition in conditions:
        _check_condition_shape(condition)
    return Policy(moment, tuple(conditions))


def _check_condition_shape(condition: Any) -> None:
    if isinstance(condition, dict):
        if len(condition) != 1 or not all(isinstance(v, str) for v in condition.values()):
            raise _invalid("Invalid Simple-Condition: Simple-Conditions must have exactly one "
                           "property specified.")
        return
    if not isinstance(condition, list) or len(condition) != 3:
        raise _invalid("Invalid Condition: a condition is an object or a list of three.")
    operator = condition[0]
    if not isinstance(operator, str):
        raise _invalid("Invalid Condition: unknown operation.")
    operator = operator.lower()
    if operator == "content-length-range":
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                   for v in condition[1:]):
            raise _invalid("Invalid content-length-range: the bounds must be whole numbers.")
        return
    if operator not in ("eq", "starts-with"):
        raise _invalid(f"Invalid Condition: unknown operation '{operator[:32]}'.")
    if not (isinstance(condition[1], str) and condition[1].startswith("$")
            and isinstance(condition[2], str)):
        raise _invalid(f"Invalid {operator} condition: expecting \"$field\" and a string.")


def _failed(condition: Any) -> S3Error:
    return S3Error("AccessDenied", "Invalid according to Policy: Policy Condition failed: "
                                   + json.dumps(condition)[:200])


def check_policy(policy: Policy, fields: Mapping[str, str], bucket: str, file_length: int,
                 now: datetime) -> None:
    """Enforce `policy` on a form whose fields are `fields` (lower-case names, as sent),
    stored in `bucket`, whose file is `file_length` bytes."""
    if as_utc(now) > policy.expiration:
        raise S3Error("AccessDenied", "Invalid according to Policy: Policy expired.")
    values = {**fields, "bucket": bucket}
    named: set[str] = {"bucket"}
    for condition in policy.conditions:
        if isinstance(condition, dict):
            ((name, wanted),) = condition.items()
            name = name.lower().removeprefix("$")
            named.add(name)
            if values.get(name) != wanted:
                raise _failed(condition)
            continue
        operator = condition[0].lower()
        if operator == "content-length-range":
            low, high = condition[1], condition[2]
            if file_length < low:
                raise S3Error("EntityTooSmall", MinSizeAllowed=str(low),
                              ProposedSize=str(file_length))
            if file_length > high:
                raise S3Error("EntityTooLarge", MaxSizeAllowed=str(high),
                              ProposedSize=str(file_length))
            continue
        name = condition[1][1:].lower()
        named.add(name)
        value = values.get(name)
        if value is None:
            raise _failed(condition)
        if operator == "eq" and value != condition[2]:
            raise _failed(condition)
        if operator == "starts-with" and not _starts_with(name, value, condition[2]):
            raise _failed(condition)
    extra = sorted(name for name in fields
                   if name not in named and name not in _EXEMPT
                   and not name.startswith("x-ignore-"))
    if extra:
        raise S3Error("AccessDenied", "Invalid according to Policy: Extra input fields: "
                                      + ", ".join(extra)[:200])


def _starts_with(name: str, value: str, prefix: str) -> bool:
    if name == "content-type":  # each of a comma-separated list must match
        return all(part.strip().startswith(prefix) for part in value.split(","))
    return value.startswith(prefix)
