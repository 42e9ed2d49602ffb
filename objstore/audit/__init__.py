"""The node-local audit log: what every S3 and admin request (and every background action
that reports itself) did, recorded off the request path through a bounded queue that a
timer flushes to the metadata database in batches."""
