"""blobs package."""
