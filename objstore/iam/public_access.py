"""Public access block and object ownership settings of a bucket, as values (pure).

`PublicAccessBlock`: the four switches of AWS's PublicAccessBlockConfiguration.
BlockPublicAcls refuses requests that set a public ACL; IgnorePublicAcls makes public ACL
grants count for nothing; BlockPublicPolicy refuses a public bucket policy;
RestrictPublicBuckets makes a public policy grant nothing to anonymous callers. A bucket
without its own configuration uses the node's default (`[server] public_access_block`).

Object ownership: BucketOwnerEnforced (ACLs disabled: the default for new buckets, as on
AWS, and what every bucket made before this setting existed has), BucketOwnerPreferred
and ObjectWriter (ACLs enabled).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

OWNER_ENFORCED = "BucketOwnerEnforced"
OWNER_PREFERRED = "BucketOwnerPreferred"
OBJECT_WRITER = "ObjectWriter"
OWNERSHIPS = (OWNER_ENFORCED, OWNER_PREFERRED, OBJECT_WRITER)
FIELDS = ("BlockPublicAcls", "IgnorePublicAcls", "BlockPublicPolicy",
          "RestrictPublicBuckets")


@dataclass(frozen=True)
class PublicAccessBlock:
    block_public_acls: bool = False
    ignore_public_acls: bool = False
    block_public_policy: bool = False
    restrict_public_buckets: bool = False

    def to_json(self) -> str:
        return json.dumps(dict(zip(FIELDS, self.flags(), strict=True)))

    def flags(self) -> tuple[bool, bool, bool, bool]:
        return (self.block_public_acls, self.ignore_public_acls, self.block_public_policy,
                self.restrict_public_buckets)

    @classmethod
    def from_json(cls, text: str) -> PublicAccessBlock:
        data = json.loads(text)
        return cls(*(bool(data.get(name, False)) for name in FIELDS))

    @classmethod
    def all_on(cls) -> PublicAccessBlock:
        return cls(True, True, True, True)


NO_BLOCK = PublicAccessBlock()
