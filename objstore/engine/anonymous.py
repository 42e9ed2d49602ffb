"""Public links of a bucket (`objstore anonymous`, the admin API's
/buckets/{bucket}/anonymous): reads and rewrites the bucket policy's own statements
(`iam/anonymous_access.py`) through `BucketConfigService`, so the change is stored,
recorded for `recover`, replicated and reported like a PutBucketPolicy. A bucket whose
public access block has BlockPublicPolicy refuses a public link, as it refuses a public
PutBucketPolicy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from objstore.engine.changes import Caller
from objstore.errors import AdminError, S3Error
from objstore.iam.anonymous_access import (
    AnonymousAccessError,
    anonymous_rules,
    public_prefixes,
    set_anonymous,
)
from objstore.iam.bucket_access import POLICY_KEY, PUBLIC_ACCESS_BLOCK_KEY
from objstore.iam.bucket_policy import PolicyDocumentError
from objstore.iam.public_access import PublicAccessBlock

if TYPE_CHECKING:
    from objstore.engine.bucket_config import BucketConfigService


class AnonymousAccessService:
    def __init__(self, documents: BucketConfigService, *,
                 default_block: PublicAccessBlock | None = None) -> None:
        self._documents = documents
        self._default_block = default_block or PublicAccessBlock()

    async def view(self, bucket: str) -> dict[str, Any]:
        """{bucket, rules: [{prefix, access}], public_prefixes: [...]}."""
        await self._bucket(bucket)
        text = await self._documents.document(bucket, POLICY_KEY)
        return {"bucket": bucket, "rules": anonymous_rules(text),
                "public_prefixes": public_prefixes(text, bucket)}

    async def set(self, caller: Caller, bucket: str, prefix: str, access: str
                  ) -> dict[str, Any]:
        await self._bucket(bucket)
        text = await self._documents.document(bucket, POLICY_KEY)
        try:
            updated = set_anonymous(text, bucket, prefix, access)
        except (AnonymousAccessError, PolicyDocumentError) as exc:
            raise AdminError("BadRequest", str(exc)) from None
        if updated is None:
            await self._documents.delete_config(caller, bucket, POLICY_KEY)
        else:
            if access != "none" and (await self._block(bucket)).block_public_policy:
                raise AdminError("Conflict", "The public access block of this bucket "
                                 "blocks public policies (BlockPublicPolicy).")
            await self._documents.put_config(caller, bucket, POLICY_KEY, updated)
        return await self.view(bucket)

    async def _block(self, bucket: str) -> PublicAccessBlock:
        text = await self._documents.document(bucket, PUBLIC_ACCESS_BLOCK_KEY)
        return PublicAccessBlock.from_json(text) if text else self._default_block

    async def _bucket(self, bucket: str) -> None:
        try:
            await self._documents.get(bucket)
        except S3Error:
            raise AdminError("NotFound", f"The bucket {bucket} does not exist.") from None
