"""The authorization decision for one request: may this principal do this action here?

Root users bypass evaluation. Policy documents (grants) for other users are evaluated by
the RBAC layer; until a user holds grants, every action is denied (deny by default).
"""

from __future__ import annotations

from objstore.errors import S3Error
from objstore.iam.identity import Principal


class Authorizer:
    async def check(self, principal: Principal, action: str, resource: str) -> None:
        """Raise S3Error("AccessDenied") unless `action` on `resource` is allowed."""
        if principal.is_root:
            return
        raise S3Error("AccessDenied")


def bucket_arn(bucket: str) -> str:
    return f"arn:aws:s3:::{bucket}"


def object_arn(bucket: str, key: str) -> str:
    return f"arn:aws:s3:::{bucket}/{key}"
