"""Bucket replication to other S3 endpoints: the rules and their validation, the
credentials setting, the journal's outbox consumer, the worker and its S3 client (see
docs/ARCHITECTURE.md, "Background services", and man/objstore.8, BUCKET REPLICATION)."""
