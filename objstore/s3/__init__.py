"""s3 package."""
