"""objstore: an S3-compatible object store daemon on Twisted."""

__version__ = "0.1.0"
