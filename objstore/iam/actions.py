"""The action names a policy document may use, and which request needs which action.

Names: the spec's list, the object-lock actions, and every AWS S3 action name of
shared/S3-ACTIONS.md (so AWS-written policies validate), plus the service's own svc:*
actions. The spec's encryption names are canonical; AWS's spellings are accepted as
aliases (s3:GetEncryptionConfiguration = s3:GetBucketEncryption;
s3:PutEncryptionConfiguration = s3:PutBucketEncryption and s3:DeleteBucketEncryption).
"""

from __future__ import annotations

SPEC_S3_ACTIONS = frozenset({
    "s3:CreateBucket", "s3:DeleteBucket", "s3:ListBucket", "s3:ListAllMyBuckets",
    "s3:GetBucketLocation", "s3:GetBucketEncryption", "s3:PutBucketEncryption",
    "s3:DeleteBucketEncryption", "s3:GetObject", "s3:PutObject", "s3:DeleteObject",
    "s3:BypassGovernanceRetention",
})

OBJECT_LOCK_ACTIONS = frozenset({
    "s3:PutObjectRetention", "s3:GetObjectRetention", "s3:PutObjectLegalHold",
    "s3:GetObjectLegalHold", "s3:PutBucketObjectLockConfiguration",
    "s3:GetBucketObjectLockConfiguration",
})

AWS_S3_ACTIONS = frozenset({
    "s3:ListBucketVersions", "s3:ListBucketMultipartUploads", "s3:ListMultipartUploadParts",
    "s3:AbortMultipartUpload", "s3:GetBucketVersioning", "s3:PutBucketVersioning",
    "s3:GetEncryptionConfiguration", "s3:PutEncryptionConfiguration",
    "s3:GetBucketTagging", "s3:PutBucketTagging", "s3:GetLifecycleConfiguration",
    "s3:PutLifecycleConfiguration", "s3:GetBucketNotification", "s3:PutBucketNotification",
    "s3:GetReplicationConfiguration", "s3:PutReplicationConfiguration", "s3:GetBucketCORS",
    "s3:ReplicateObject",
    "s3:PutBucketCORS", "s3:GetBucketWebsite", "s3:PutBucketWebsite",
    "s3:DeleteBucketWebsite", "s3:GetBucketPolicy", "s3:PutBucketPolicy",
    "s3:DeleteBucketPolicy", "s3:GetBucketPolicyStatus", "s3:GetBucketAcl", "s3:PutBucketAcl",
    "s3:GetBucketPublicAccessBlock", "s3:PutBucketPublicAccessBlock",
    "s3:GetBucketOwnershipControls", "s3:PutBucketOwnershipControls", "s3:GetBucketLogging",
    "s3:PutBucketLogging", "s3:GetAccelerateConfiguration", "s3:PutAccelerateConfiguration",
    "s3:GetBucketRequestPayment", "s3:PutBucketRequestPayment",
    "s3:GetAnalyticsConfiguration", "s3:PutAnalyticsConfiguration",
    "s3:GetInventoryConfiguration", "s3:PutInventoryConfiguration",
    "s3:GetMetricsConfiguration", "s3:PutMetricsConfiguration",
    "s3:GetIntelligentTieringConfiguration", "s3:PutIntelligentTieringConfiguration",
    "s3:GetObjectVersion", "s3:GetObjectAttributes", "s3:GetObjectVersionAttributes",
    "s3:DeleteObjectVersion", "s3:GetObjectTagging", "s3:GetObjectVersionTagging",
    "s3:PutObjectTagging", "s3:PutObjectVersionTagging", "s3:DeleteObjectTagging",
    "s3:DeleteObjectVersionTagging", "s3:GetObjectAcl", "s3:PutObjectAcl",
    "s3:GetObjectVersionAcl", "s3:PutObjectVersionAcl", "s3:RestoreObject",
})

SVC_ACTIONS = frozenset({
    "svc:ViewServerInfo", "svc:ManageUsers", "svc:ManageTeams", "svc:ManageGrants",
    "svc:ManageCredentials", "svc:CreatePresignedUrl", "svc:CreateArchive",
})

KNOWN_ACTIONS = SPEC_S3_ACTIONS | OBJECT_LOCK_ACTIONS | AWS_S3_ACTIONS | SVC_ACTIONS

# An action a request needs -> other names whose grant also covers it.
ALIASES: dict[str, frozenset[str]] = {
    "s3:GetBucketEncryption": frozenset({"s3:GetEncryptionConfiguration"}),
    "s3:PutBucketEncryption": frozenset({"s3:PutEncryptionConfiguration"}),
    "s3:DeleteBucketEncryption": frozenset({"s3:PutEncryptionConfiguration"}),
}


# With a versionId a request needs the version-specific action, as on AWS (the spec's
# action covers it: COVERED_BY).
VERSION_VARIANTS: dict[str, str] = {
    "s3:GetObject": "s3:GetObjectVersion",
    "s3:DeleteObject": "s3:DeleteObjectVersion",
    "s3:GetObjectAttributes": "s3:GetObjectVersionAttributes",
    "s3:GetObjectTagging": "s3:GetObjectVersionTagging",
    "s3:PutObjectTagging": "s3:PutObjectVersionTagging",
    "s3:DeleteObjectTagging": "s3:DeleteObjectVersionTagging",
    "s3:GetObjectAcl": "s3:GetObjectVersionAcl",
    "s3:PutObjectAcl": "s3:PutObjectVersionAcl",
}

# An AWS action -> the spec's coarse actions that cover it (shared/S3-ACTIONS.md, "Spec
# actions cover their AWS sub-actions"): a grant written with only the spec's names is
# enough to use a bucket, and a Deny of either name refuses the operation.
COVERED_BY: dict[str, frozenset[str]] = {
    "s3:GetObjectVersion": frozenset({"s3:GetObject"}),
    "s3:GetObjectAttributes": frozenset({"s3:GetObject"}),
    "s3:GetObjectVersionAttributes": frozenset({"s3:GetObject"}),
    "s3:AbortMultipartUpload": frozenset({"s3:PutObject"}),
    "s3:ListMultipartUploadParts": frozenset({"s3:PutObject"}),
    "s3:DeleteObjectVersion": frozenset({"s3:DeleteObject"}),
    "s3:ListBucketVersions": frozenset({"s3:ListBucket"}),
    "s3:ListBucketMultipartUploads": frozenset({"s3:ListBucket"}),
}


def _names(action: str) -> frozenset[str]:
    return (frozenset({action}) | ALIASES.get(action, frozenset())
            | COVERED_BY.get(action, frozenset()))


_NAMES = {action: _names(action) for action in KNOWN_ACTIONS}


def names_for(action: str) -> frozenset[str]:
    """The action itself, every alias that grants it and the spec action covering it."""
    found = _NAMES.get(action)
    return found if found is not None else _names(action)
