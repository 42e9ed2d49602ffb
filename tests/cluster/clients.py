"""S3 clients and probes of tests/cluster: a client signing with another credential than
root's, the error code a call fails with, and whether a node serves a bucket or an
object yet. The probes answer "not (yet)" on any S3 error and never wait: tests poll
them with `harness.wait_for`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import boto3
from botocore.config import Config as BotoConfig
from botocore.exceptions import ClientError

from tests.cluster.harness import Node


def s3_as(node: Node, access_key: str, secret_key: str) -> Any:
    """An S3 client of `node` signing with this key pair (no retries)."""
    return boto3.client(
        "s3", endpoint_url=node.daemon.endpoint, aws_access_key_id=access_key,
        aws_secret_access_key=secret_key, region_name="us-east-1",
        config=BotoConfig(signature_version="s3v4", retries={"total_max_attempts": 1}))


def error_code(call: Callable[[], Any]) -> str | None:
    """The S3 error code `call` fails with; None when it succeeds."""
    try:
        call()
    except ClientError as error:
        return str(error.response["Error"]["Code"])
    return None


def has_bucket(node: Node, bucket: str) -> bool:
    return error_code(lambda: node.s3.head_bucket(Bucket=bucket)) is None


def body_of(node: Node, bucket: str, key: str) -> bytes | None:
    """The object's bytes on `node`; None while it is not there (yet)."""
    try:
        return bytes(node.s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    except ClientError:
        return None
