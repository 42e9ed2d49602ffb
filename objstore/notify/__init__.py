"""Bucket notifications (issue 28): the S3 notification configuration, the event records,
their node-local queue and delivery to the targets named in `[notifications.targets.*]`.
`targets/` holds one module per target kind behind one interface (`targets/base.py`)."""
