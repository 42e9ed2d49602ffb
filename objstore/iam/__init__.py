"""iam package."""
